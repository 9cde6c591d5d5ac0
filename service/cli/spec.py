"""`trainledger openapi`: print, write or check the OpenAPI document (`.ci/run` checks it)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import Settings
from .ui import ui


def openapi_json() -> str:
    from ..http.app import openapi_document

    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def cmd_openapi(args: argparse.Namespace, settings: Settings) -> int:
    document = openapi_json()
    if args.check:
        path = Path(args.check)
        if not path.exists() or path.read_text() != document:
            ui.err.print(f"[red]{path} is stale[/]: run `python3 dev.py openapi` and commit it")
            return 1
        ui.err.print(f"{path} is up to date")
        return 0
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(document)
        ui.err.print(f"wrote {args.output}")
    else:
        sys.stdout.write(document)  # raw: a console would wrap long lines
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spec = sub.add_parser("openapi", help="print or write the OpenAPI document")
    spec.add_argument("--output", help="write to this file")
    spec.add_argument("--check", help="fail if this file differs from the generated document")
    spec.set_defaults(handler=cmd_openapi)
