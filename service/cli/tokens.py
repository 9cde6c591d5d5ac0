"""`trainledger token create|list|revoke`: straight to the Redis/Valkey the service uses."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.table import Table

from ..auth.model import ROLES, mint, view_of
from ..config import Settings
from .ui import ui

if TYPE_CHECKING:
    from ..stores import Stores


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    # The store and the Redis client only when a token command runs (see `cli/serve.py`).
    from ..auth.store import LastUnscopedAdmin
    from .local_store import run_with_store

    if args.token_command == "create":
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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = sub.add_parser("token", help="manage bearer tokens")
    token.set_defaults(handler=cmd_token)
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="mint a token and print it (shown once)")
    create.add_argument("--role", choices=ROLES, required=True)
    create.add_argument("--project", action="append", help="limit to a project (repeatable)")
    create.add_argument("--name", default="")
    token_sub.add_parser("list", help="list tokens")
    revoke = token_sub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("token_id")
