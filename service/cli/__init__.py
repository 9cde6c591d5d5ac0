"""The `trainledger` command line.

Server side: `serve`, `token create|list|revoke` (straight to the service's Redis/Valkey),
`openapi`. Client side, over HTTP to a running service (`--url`, `--token`): `ratecard apply`,
`plan estimate`, `costs`, `export focus`, `import slurm|pods`, `events post`, `spool
flush`, `agent`, `budgets`, `webhooks`, `alerts` (retried through outages and 429s by
trainledger.client). `spool put` and `spool failed` need no service, nor does `slurm-hook`
(it spools a Slurm job's usage as the job ends). And `demo`.
"""

from __future__ import annotations

import argparse

import httpx

from .. import __version__
from ..config import ConfigError, Settings
from ..config.settings import variable_of
from . import bills, commands, events, imports, oncall, serve, slurm_hook, spec, tokens
from .client import ApiError, CliError, print_problem, report_connection_error
from .spec import openapi_json
from .ui import ui

__all__ = ["build_parser", "main", "openapi_json"]


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """Hand the rest of the command line to `trainledger.cli.demo`, imported only now: it is
    the largest package and no other command needs it."""
    from . import demo

    parser = argparse.ArgumentParser(prog="trainledger demo", description=demo.__doc__)
    demo.add_arguments(parser)
    return int(demo.run(parser.parse_args(args.demo_argv)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainledger",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"trainledger {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve.add_parser(sub)
    tokens.add_parser(sub)
    spec.add_parser(sub)
    commands.add_parsers(sub)
    imports.add_parsers(sub)
    bills.add_parsers(sub)
    events.add_parsers(sub)
    oncall.add_parsers(sub)
    slurm_hook.add_parser(sub)
    # The demo declares its own options; they are parsed when it runs (see cmd_demo), so
    # `trainledger demo --help` is the demo's own help.
    demo = sub.add_parser("demo", help="a guided tour on simulated data", add_help=False)
    demo.set_defaults(handler=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    ui.configure()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "demo":
        args.demo_argv = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        return _refuse_configuration(args, exc)
    try:
        return int(args.handler(args, settings))
    except ApiError as exc:
        print_problem(exc)
        return 1
    except CliError as exc:
        ui.err.print(f"[bold red]error[/]: {_escape(str(exc))}", highlight=False)
        return 1
    except httpx.HTTPError as exc:
        report_connection_error(getattr(args, "url", None) or "the service", exc)
        return 1
    except KeyboardInterrupt:
        ui.err.print("interrupted")
        return 130


def _refuse_configuration(args: argparse.Namespace, error: ConfigError) -> int:
    """Exit status 2, each bad value named. `serve` says it in its log format (JSON unless
    `--log-format` or a valid `TRAINLEDGER_LOG_FORMAT` says text), as everything it writes."""
    if args.command == "serve":
        from .serve_logging import log, setup_logging

        fmt = args.log_format or error.values.get(variable_of("log_format")) or "json"
        setup_logging(fmt, "info")
        for problem in error.problems:
            log.error("cannot start: %s", problem)
        return error.code if isinstance(error.code, int) else 2
    for problem in error.problems:
        ui.err.print(f"[bold red]error[/]: {_escape(problem)}", highlight=False)
    return 2


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
