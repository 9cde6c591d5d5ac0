"""`trainledger token create|list|revoke`: straight to the Redis/Valkey the service uses."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from ..auth.model import ROLES, mint, view_of
from ..config import Settings
from .figures import when
from .ui import ui

if TYPE_CHECKING:
    from ..stores import Stores


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    # The store and the Redis client only when a token command runs (see `cli/serve.py`).
    from ..auth.store import LastUnscopedAdmin
    from .local_store import run_with_store

    if args.token_command == "create":
        refused = _no_server_reads(settings) if not args.offline else None
        if refused is not None:
            ui.err.print(f"[bold red]error[/]: {escape(refused)}", highlight=False)
            return 1
        projects = args.project or None

        async def create(store: Stores) -> str:
            token, digest, record = mint(args.role, projects, args.name or "")
            await store.tokens.put_token(digest, record["id"], record)
            return token

        ui.out.print(run_with_store(settings, create), markup=False, highlight=False)
        return 0
    if args.token_command == "list":

        async def listing(store: Stores) -> list[dict[str, str]]:
            return await store.tokens.token_records()

        records = run_with_store(settings, listing)
        if not records:
            ui.out.print("no tokens (mint one: trainledger token create --role ROLE)")
            return 0
        table = Table("id", "role", "projects", "name", "created (UTC)")
        for record in records:
            view = view_of(record)
            table.add_row(
                view.id,
                view.role,
                ",".join(view.projects or ["*"]),
                view.name,
                when(view.created_at).removesuffix(" UTC"),
            )
        ui.out.print(table)
        return 0

    async def revoke(store: Stores) -> bool | None:
        try:
            return await store.tokens.revoke_token(args.token_id)
        except LastUnscopedAdmin:
            return None

    revoked = run_with_store(settings, revoke)
    if revoked is None:
        ui.err.print(
            f"[red]{args.token_id} is the last admin token for every project; "
            "create another (token create --role admin) before revoking it[/]"
        )
        return 1
    if revoked:
        ui.err.print(f"revoked {args.token_id}")
        return 0
    ui.err.print(f"[red]no token with id {args.token_id}[/]")
    return 1


def _no_server_reads(settings: Settings) -> str | None:
    """Why a token minted now would reach no server: no Redis URL is configured and no
    `trainledger serve` runs on the data dir (its embedded Valkey is not running). A token
    minted then is checked by nobody, so the likely mistake (another data dir than the
    server's) is said instead. None: a server's store is there."""
    if settings.redis_url:
        return None
    from ..storage.embedded import EmbeddedValkey

    if EmbeddedValkey(settings.data_dir).running_url() is not None:
        return None
    return (
        f"no trainledger server uses the data dir {settings.data_dir}: a token minted there "
        "reaches no server. Start `trainledger serve` first; or point at the server's store "
        "with TRAINLEDGER_DATA_DIR=DIR or TRAINLEDGER_REDIS_URL=URL; or, to prepare a token "
        "for a server not started yet, pass --offline"
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = sub.add_parser("token", help="manage bearer tokens")
    token.set_defaults(handler=cmd_token)
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="mint a token and print it (shown once)")
    create.add_argument(
        "--role",
        choices=ROLES,
        required=True,
        help="what the token may do (docs/operations/security.md)",
    )
    create.add_argument("--project", action="append", help="limit to a project (repeatable)")
    create.add_argument("--name", default="", help="a name to tell the token by in lists")
    create.add_argument(
        "--offline",
        action="store_true",
        help="mint into the data dir's store although no server runs on it (a server started "
        "there later accepts the token); without it, refused",
    )
    token_sub.add_parser("list", help="list tokens")
    revoke = token_sub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("token_id", help="the id `token list` shows")
