"""`trainledger serve`: the HTTP API, with the embedded Valkey when no Redis URL is given.

The command's options are declared here; what it runs is in `serve_runtime.py`, imported only
when it runs, so that the other commands (`slurm-hook` runs at the end of every Slurm job)
start without the web framework and the Redis client."""

from __future__ import annotations

import argparse

from ..config import LOG_LEVELS, Settings


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from .serve_runtime import serve

    return serve(args, settings)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API (starts the embedded Valkey if needed)")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (127.0.0.1; 0.0.0.0: all)"
    )
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (8000)")
    serve.add_argument(
        "--workers", type=int, default=1, help="worker processes serving requests (1)"
    )
    serve.add_argument("--redis-url", default=None, help="default: $TRAINLEDGER_REDIS_URL")
    serve.add_argument(
        "--data-dir",
        default=None,
        help="default: $TRAINLEDGER_DATA_DIR, else the user data dir "
        "(~/.local/share/trainledger on Linux)",
    )
    serve.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default=None,
        help="default: $TRAINLEDGER_LOG_LEVEL, else info",
    )
    serve.add_argument(
        "--log-format",
        choices=["json", "text"],
        default=None,
        help="default: $TRAINLEDGER_LOG_FORMAT, else json (one object per line, with request id)",
    )
    serve.set_defaults(handler=cmd_serve)
