"""`trainledger serve`: the HTTP API, with the embedded Valkey when no Redis URL is given.

Also the helpers the token commands share: which Redis/Valkey the CLI talks to, and the
local admin token written on first start."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.process
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from service.cli.ui import ui
from service.config import Settings
from service.domain.auth import mint
from service.domain.folding import Folder
from service.runtime import tune_garbage_collector
from service.storage.embedded import EmbeddedValkey
from service.storage.redis_store import Store

# The local admin token `serve` writes on first start; client commands fall back to it.
ADMIN_TOKEN_FILE = "admin-token"


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
    path = data_dir / ADMIN_TOKEN_FILE
    path.write_text(token + "\n")
    os.chmod(path, 0o600)
    return token


def _share_metrics_between_workers(data_dir: Path) -> None:
    """prometheus_client's multiprocess mode: each worker writes its counters to files in
    this directory and `/metrics` (in whichever worker answers) sums them. Emptied at start,
    as that mode requires."""
    directory = (data_dir / "prometheus-multiproc").resolve()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


KEEP_ALIVE_SECONDS = 75

# What `ps`/`top` show for the folding process (Linux: the kernel's name of the process).
FOLD_PROCESS_NAME = "tl-fold"


def _name_process(name: str) -> None:
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME


def fold_forever(url: str, parent: int) -> None:
    """The folding process: folds every project's log into its totals every 2 seconds, until
    `trainledger serve` (process `parent`) is gone. One process for all the workers keeps
    the fold's Python off the request workers (in a worker it took turns with the requests
    for the interpreter: single-event p99 8 ms with it there, 3 ms without it)."""
    from service.http.observability import JsonFormatter, TextFormatter

    _name_process(FOLD_PROCESS_NAME)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    handler = logging.StreamHandler()
    if os.environ.get("TRAINLEDGER_LOG_FORMAT", "json") == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    logging.basicConfig(
        level=os.environ.get("TRAINLEDGER_LOG_LEVEL", "info").upper(), handlers=[handler]
    )

    async def go() -> None:
        async with open_store(url) as store:
            tune_garbage_collector()
            folder = Folder(store, every_project=True)
            await folder.run(keep_going=lambda: os.getppid() == parent)

    asyncio.run(go())


def _start_folder(url: str) -> multiprocessing.process.BaseProcess:
    process = multiprocessing.get_context("spawn").Process(
        target=fold_forever, args=(url, os.getpid()), name="trainledger-fold", daemon=True
    )
    process.start()
    return process


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    settings = replace(
        settings,
        redis_url=args.redis_url or settings.redis_url,
        data_dir=Path(args.data_dir) if args.data_dir else settings.data_dir,
    )
    embedded: EmbeddedValkey | None = None
    folder: multiprocessing.process.BaseProcess | None = None
    url = settings.redis_url
    # uvicorn shuts down on SIGTERM and then raises the signal again; with the default
    # disposition that kills the process before the `finally` below stops the embedded
    # Valkey, leaving it running, orphaned, on a data dir whose lock is gone. Exit instead.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if url is None:
        embedded = EmbeddedValkey(settings.data_dir, settings.appendfsync)
        url = embedded.start()
        ui.err.print(f"[green]embedded Valkey[/] on {url} (data in {settings.data_dir.resolve()})")
    try:

        async def bootstrap() -> str | None:
            async with open_store(url) as store:
                return await ensure_admin_token(store, settings.data_dir)

        token = asyncio.run(bootstrap())
        if token:
            saved = settings.data_dir / ADMIN_TOKEN_FILE
            ui.err.print(f"[bold yellow]local admin token[/] (saved in {saved}):")
            ui.err.print(token, markup=False, highlight=False)
        os.environ["TRAINLEDGER_REDIS_URL"] = url
        os.environ["TRAINLEDGER_DATA_DIR"] = str(settings.data_dir)
        # Every worker process sets up its logging from these (see create_app).
        os.environ["TRAINLEDGER_LOG_FORMAT"] = args.log_format or settings.log_format or "json"
        log_level = args.log_level or settings.log_level
        os.environ["TRAINLEDGER_LOG_LEVEL"] = log_level
        if args.workers > 1:
            _share_metrics_between_workers(settings.data_dir)
        os.environ["TRAINLEDGER_FOLD_IN_WORKERS"] = "0"
        folder = _start_folder(url)
        ui.err.print(f"serving on http://{args.host}:{args.port}  (API docs at /docs)")
        uvicorn.run(
            "service.http.app:serve_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=log_level,
            log_config=None,  # the app configures logging (JSON by default)
            access_log=False,
            loop="uvloop",
            http="httptools",
            # Longer than a load balancer's usual idle timeout (60 s), so that it, not the
            # server, closes idle connections: a client never sends on a connection the server
            # is closing (uvicorn's 5 s default did that to bursty schedulers).
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
        )
    finally:
        if folder is not None:
            folder.terminate()
            folder.join(timeout=5)
        if embedded is not None:
            embedded.stop()
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API (starts the embedded Valkey if needed)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--redis-url", default=None, help="default: $TRAINLEDGER_REDIS_URL")
    serve.add_argument("--data-dir", default=None, help="default: $TRAINLEDGER_DATA_DIR")
    serve.add_argument(
        "--log-level", default=None, help="default: $TRAINLEDGER_LOG_LEVEL, else info"
    )
    serve.add_argument(
        "--log-format",
        choices=["json", "text"],
        default=None,
        help="default: $TRAINLEDGER_LOG_FORMAT, else json (one object per line, with request id)",
    )
    serve.set_defaults(handler=cmd_serve)
