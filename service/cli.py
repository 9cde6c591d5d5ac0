"""The `trainledger` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from service import __version__
from service.config import Settings
from service.domain.auth import ROLES, mint, view_of
from service.storage.embedded import EmbeddedValkey
from service.storage.redis_store import Store

console = Console(stderr=True)
out = Console()


@contextmanager
def redis_url_for(settings: Settings) -> Iterator[str]:
    """The configured URL; else the embedded server already running for the data dir;
    else an embedded server started for as long as the block runs."""
    if settings.redis_url:
        yield settings.redis_url
        return
    embedded = EmbeddedValkey(settings.data_dir, settings.appendfsync)
    running = embedded.running_url()
    if running:
        yield running
        return
    url = embedded.start()
    try:
        yield url
    finally:
        embedded.stop()


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[Store]:
    store = Store.from_url(url)
    try:
        yield store
    finally:
        await store.close()


def run_with_store(settings: Settings, action: Callable[[Store], Coroutine[Any, Any, Any]]) -> Any:
    async def go(url: str) -> Any:
        async with open_store(url) as store:
            return await action(store)

    with redis_url_for(settings) as url:
        return asyncio.run(go(url))


async def ensure_admin_token(store: Store, data_dir: Path) -> str | None:
    """On first start (no admin token yet) mint a local admin token and keep it in the data dir."""
    if any(r.get("role") == "admin" for r in await store.token_records()):
        return None
    token, digest, record = mint("admin", None, "local admin (first start)")
    await store.put_token(digest, record["id"], record)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "admin-token"
    path.write_text(token + "\n")
    os.chmod(path, 0o600)
    return token


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    settings = replace(
        settings,
        redis_url=args.redis_url or settings.redis_url,
        data_dir=Path(args.data_dir) if args.data_dir else settings.data_dir,
    )
    embedded: EmbeddedValkey | None = None
    url = settings.redis_url
    # uvicorn shuts down on SIGTERM and then raises the signal again; with the default
    # disposition that kills the process before the `finally` below stops the embedded
    # Valkey, leaving it running, orphaned, on a data dir whose lock is gone. Exit instead.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if url is None:
        embedded = EmbeddedValkey(settings.data_dir, settings.appendfsync)
        url = embedded.start()
        console.print(f"[green]embedded Valkey[/] on {url} (data in {settings.data_dir.resolve()})")
    try:

        async def bootstrap() -> str | None:
            async with open_store(url) as store:
                return await ensure_admin_token(store, settings.data_dir)

        token = asyncio.run(bootstrap())
        if token:
            console.print(
                f"[bold yellow]local admin token[/] (saved in {settings.data_dir / 'admin-token'}):"
            )
            console.print(token, markup=False, highlight=False)
        os.environ["TRAINLEDGER_REDIS_URL"] = url
        os.environ["TRAINLEDGER_DATA_DIR"] = str(settings.data_dir)
        console.print(f"serving on http://{args.host}:{args.port}  (API docs at /docs)")
        uvicorn.run(
            "service.http.app:create_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
            access_log=False,
            loop="uvloop",
            http="httptools",
        )
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    if args.token_command == "create":
        projects = args.project or None

        async def create(store: Store) -> str:
            token, digest, record = mint(args.role, projects, args.name or "")
            await store.put_token(digest, record["id"], record)
            return token

        out.print(run_with_store(settings, create), markup=False, highlight=False)
        return 0
    if args.token_command == "list":

        async def listing(store: Store) -> list[dict[str, str]]:
            return await store.token_records()

        table = Table("id", "role", "projects", "name", "created")
        for record in run_with_store(settings, listing):
            view = view_of(record)
            table.add_row(
                view.id,
                view.role,
                ",".join(view.projects or ["*"]),
                view.name,
                str(view.created_at),
            )
        out.print(table)
        return 0

    async def revoke(store: Store) -> bool:
        return await store.revoke_token(args.token_id)

    if run_with_store(settings, revoke):
        console.print(f"revoked {args.token_id}")
        return 0
    console.print(f"[red]no token with id {args.token_id}[/]")
    return 1


def openapi_json() -> str:
    from service.http.openapi import openapi_document

    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def cmd_openapi(args: argparse.Namespace) -> int:
    document = openapi_json()
    if args.check:
        path = Path(args.check)
        if not path.exists() or path.read_text() != document:
            console.print(f"[red]{path} is stale[/]: run `python3 dev.py openapi` and commit it")
            return 1
        console.print(f"{path} is up to date")
        return 0
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(document)
        console.print(f"wrote {args.output}")
    else:
        out.print(document, markup=False, highlight=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainledger", description=__doc__)
    parser.add_argument("--version", action="version", version=f"trainledger {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP API (starts the embedded Valkey if needed)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--redis-url", default=None, help="default: $TRAINLEDGER_REDIS_URL")
    serve.add_argument("--data-dir", default=None, help="default: $TRAINLEDGER_DATA_DIR")
    serve.add_argument("--log-level", default="info")

    token = sub.add_parser("token", help="manage bearer tokens")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="mint a token and print it (shown once)")
    create.add_argument("--role", choices=ROLES, required=True)
    create.add_argument("--project", action="append", help="limit to a project (repeatable)")
    create.add_argument("--name", default="")
    token_sub.add_parser("list", help="list tokens")
    revoke = token_sub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("token_id")

    spec = sub.add_parser("openapi", help="print or write the OpenAPI document")
    spec.add_argument("--output", help="write to this file")
    spec.add_argument("--check", help="fail if this file differs from the generated document")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings.from_env()
    if args.command == "serve":
        return cmd_serve(args, settings)
    if args.command == "token":
        return cmd_token(args, settings)
    if args.command == "openapi":
        return cmd_openapi(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
