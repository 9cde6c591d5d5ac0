"""`trainledger serve`: the HTTP API, with the embedded Valkey when no Redis URL is given.

Also the helpers the token commands share: which Redis/Valkey the CLI talks to, and the
local admin token written on first start."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
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

from ..auth.model import digest as digest_of
from ..auth.model import mint, supplied_token_problem
from ..config import LOG_LEVELS, Settings
from ..ledger.folding import Folder
from ..runtime import tune_garbage_collector
from ..storage.embedded import EmbeddedValkey, redact
from ..storage.sealing import (
    CHECK_PLAINTEXT,
    KEY_ENV,
    Sealer,
    SecretKeyError,
    Unsealable,
    load_sealer,
)
from ..stores import Stores
from .serve_logging import (
    announce_admin_token,
    announce_when_listening,
    bind,
    log,
    setup_logging,
)

# The local admin token `serve` writes on first start; client commands fall back to it.
ADMIN_TOKEN_FILE = "admin-token"
# Or an admin token the operator supplies as a file (a Docker or Kubernetes secret): registered
# at start, never printed and never copied into the data dir.
ADMIN_TOKEN_FILE_ENV = "TRAINLEDGER_ADMIN_TOKEN_FILE"


def supplied_admin_token() -> str | None:
    """The token in the file `$TRAINLEDGER_ADMIN_TOKEN_FILE` names; raises ValueError saying
    why it cannot be used (never showing it)."""
    path = os.environ.get(ADMIN_TOKEN_FILE_ENV)
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"{ADMIN_TOKEN_FILE_ENV}: cannot read {path}: {exc.strerror}") from exc
    problem = supplied_token_problem(token)
    if problem is not None:
        raise ValueError(f"{ADMIN_TOKEN_FILE_ENV}: the token in {path} {problem}")
    return token


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
async def open_store(url: str) -> AsyncIterator[Stores]:
    store = Stores.from_url(url)
    try:
        yield store
    finally:
        await store.close()


def run_with_store(settings: Settings, action: Callable[[Stores], Coroutine[Any, Any, Any]]) -> Any:
    async def go(url: str) -> Any:
        async with open_store(url) as store:
            return await action(store)

    with redis_url_for(settings) as url:
        return asyncio.run(go(url))


async def ensure_admin_token(
    store: Stores, data_dir: Path, supplied: str | None = None
) -> str | None:
    """On first start (no admin token yet) mint a local admin token and keep it in the data dir.
    A `supplied` token is registered instead whenever it is not yet known (a changed secret
    is a new admin token: revoke the old one), and nothing is returned to show."""
    if supplied is not None:
        if await store.tokens.token_record(digest_of(supplied)) is None:
            _, token_digest, record = mint("admin", None, ADMIN_TOKEN_FILE_ENV, supplied)
            await store.tokens.put_token(token_digest, record["id"], record)
        return None
    if any(r.get("role") == "admin" for r in await store.tokens.token_records()):
        return None
    token, digest, record = mint("admin", None, "local admin (first start)")
    await store.tokens.put_token(digest, record["id"], record)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / ADMIN_TOKEN_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


async def ensure_secret_key(store: Stores, sealer: Sealer) -> str | None:
    """Check that the key opens the secrets this Redis holds (a check value sealed with the
    key of the first start), and re-seal with the first key whatever an older key of the
    list sealed (rotation). Returns why the server must not start, or None."""
    from ..webhooks.registry import reseal_webhooks

    stored = await store.webhooks.sealing_check(sealer.seal(CHECK_PLAINTEXT))
    try:
        if sealer.open(stored) != CHECK_PLAINTEXT:
            raise Unsealable("not the check value")
    except Unsealable:
        return (
            f"{KEY_ENV}: the secrets stored in this Redis were encrypted with another key. "
            f"Set {KEY_ENV} (or the key file) to the key they were stored with; to change "
            f"keys, list the new one first and the old one after it: {KEY_ENV}=NEW,OLD"
        )
    if not sealer.sealed_with_first_key(stored):
        await store.webhooks.replace_sealing_check(stored, sealer.reseal(stored))
    resealed, unopenable = await reseal_webhooks(store, sealer)
    if resealed:
        log.info("re-encrypted %d webhook(s) with the first key of %s", resealed, KEY_ENV)
    if unopenable:
        log.error(
            "%d webhook(s) cannot be decrypted with the configured key (their deliveries fail "
            "until it is configured again)",
            unopenable,
        )
    return None


def _share_metrics_between_workers(data_dir: Path) -> None:
    """prometheus_client's multiprocess mode: each worker writes its counters to files in
    this directory and `/metrics` (in whichever worker answers) sums them. Emptied at start,
    as that mode requires."""
    directory = (data_dir / "prometheus-multiproc").resolve()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(mode=0o700, parents=True)
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
    from ..http.observability import JsonFormatter, TextFormatter

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


def _cannot_start(reason: object) -> int:
    log.error("cannot start: %s", reason)
    return 2


async def _bootstrap(
    url: str, sealer: Sealer, data_dir: Path, supplied: str | None
) -> tuple[str | None, str | None]:
    """(the local admin token minted on first start, why the server must not start)."""
    async with open_store(url) as store:
        refused = await ensure_secret_key(store, sealer)
        if refused is not None:
            return None, refused
        return await ensure_admin_token(store, data_dir, supplied), None


def log_format_of(args: argparse.Namespace, settings: Settings) -> str:
    return str(getattr(args, "log_format", None) or settings.log_format or "json")


def log_level_of(args: argparse.Namespace, settings: Settings) -> str:
    return str(getattr(args, "log_level", None) or settings.log_level)


def _tell_workers(args: argparse.Namespace, settings: Settings, url: str) -> None:
    """Set the environment the worker processes start from."""
    os.environ["TRAINLEDGER_REDIS_URL"] = url
    os.environ["TRAINLEDGER_DATA_DIR"] = str(settings.data_dir)
    # Every worker process sets up its logging from these (see create_app).
    os.environ["TRAINLEDGER_LOG_FORMAT"] = log_format_of(args, settings)
    os.environ["TRAINLEDGER_LOG_LEVEL"] = log_level_of(args, settings)
    if args.workers > 1:
        _share_metrics_between_workers(settings.data_dir)
    os.environ["TRAINLEDGER_FOLD_IN_WORKERS"] = "0"
    os.environ["TRAINLEDGER_SERVE_PID"] = str(os.getpid())  # workers exit with it


# uvicorn's exit status when its server did not start.
STARTUP_FAILURE = 3


def _run_workers(args: argparse.Namespace, log_level: str) -> None:
    """uvicorn on a socket bound here, so that the ready line can wait for it to listen
    (`serve_logging`): with one worker in this process, with more in uvicorn's workers."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from ..http.protocol import TimedHttpToolsProtocol

    config = uvicorn.Config(
        "trainledger.http.app:serve_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=log_level,
        log_config=None,  # the app configures logging (JSON by default)
        access_log=False,
        loop="uvloop",
        # httptools, with read timeouts for the request head and body (slow clients):
        # TRAINLEDGER_HEADER_TIMEOUT_S and TRAINLEDGER_BODY_TIMEOUT_S.
        http=TimedHttpToolsProtocol,
        # Longer than a load balancer's usual idle timeout (60 s), so that it, not the
        # server, closes idle connections: a client never sends on a connection the server
        # is closing (uvicorn's 5 s default did that to bursty schedulers).
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    sock = bind(args.host, args.port)
    stop_watching = announce_when_listening(sock, args.host)
    try:
        if args.workers > 1:
            # Older uvicorn releases take the workers' target; newer ones make it themselves.
            if "target" in inspect.signature(Multiprocess).parameters:
                Multiprocess(config, target=uvicorn.Server(config).run, sockets=[sock]).run()  # type: ignore[call-arg]
            else:
                Multiprocess(config, sockets=[sock]).run()
        else:
            server = uvicorn.Server(config)
            server.run(sockets=[sock])
            if not server.started:
                raise SystemExit(STARTUP_FAILURE)
    finally:
        stop_watching.set()
        sock.close()


def _serve(
    args: argparse.Namespace, settings: Settings, url: str, sealer: Sealer, supplied: str | None
) -> int:
    """Serve on the running store at `url` until stopped: check the key, mint the first admin
    token, then the folding process and the workers."""
    token, refused = asyncio.run(_bootstrap(url, sealer, settings.data_dir, supplied))
    if refused is not None:
        return _cannot_start(refused)
    if token:
        announce_admin_token(
            token, settings.data_dir / ADMIN_TOKEN_FILE, log_format_of(args, settings)
        )
    _tell_workers(args, settings, url)
    folder = _start_folder(url)
    try:
        _run_workers(args, log_level_of(args, settings))
    finally:
        folder.terminate()
        folder.join(timeout=5)
    return 0


# Where versions before the user data dir kept their data: relative to the working directory.
OLD_DATA_DIR = Path(".trainledger")


def _warn_of_an_older_data_dir(data_dir: Path) -> None:
    """Say so when the working directory holds the data of an earlier version that this
    start does not use: a ledger must not seem to vanish without a word."""
    old = OLD_DATA_DIR.absolute()
    if old != data_dir and (old / ADMIN_TOKEN_FILE).exists():
        log.warning(
            "%s holds the data of an earlier start (the old default); this one uses %s. "
            "To keep using it, set TRAINLEDGER_DATA_DIR=%s (or --data-dir), or move it there",
            old,
            data_dir,
            old,
        )


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from ..http.protocol import read_timeouts

    settings = replace(
        settings,
        redis_url=args.redis_url or settings.redis_url,
        data_dir=Path(args.data_dir).expanduser().absolute()
        if args.data_dir
        else settings.data_dir,
    )
    setup_logging(log_format_of(args, settings), log_level_of(args, settings))
    # The path only: what is in it (the token, the key, the Valkey password) is never logged.
    log.info(
        "data directory %s",
        settings.data_dir,
        extra={"fields": {"data_dir": str(settings.data_dir)}},
    )
    _warn_of_an_older_data_dir(settings.data_dir)
    url = settings.redis_url
    # uvicorn shuts down on SIGTERM and then raises the signal again; with the default
    # disposition that kills the process before the `finally` below stops the embedded
    # Valkey, leaving it running, orphaned, on a data dir whose lock is gone. Exit instead.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        read_timeouts()  # the workers read them too: refuse bad values here, once
    except ValueError as exc:
        return _cannot_start(exc)
    try:
        # With the embedded Valkey the data dir is this server's own: a key is made there on
        # first start. An external Redis may be shared by several servers, which must all
        # use one key: it has to be given.
        sealer = load_sealer(settings.data_dir, create=url is None)
        supplied = supplied_admin_token()
    except (SecretKeyError, ValueError) as exc:
        return _cannot_start(exc)
    if url is not None:
        return _serve(args, settings, url, sealer, supplied)
    embedded = EmbeddedValkey(settings.data_dir, settings.appendfsync)
    url = embedded.start()
    # Not the URL itself: it holds the server's password (kept in the data dir, 0600).
    log.info("embedded Valkey on %s", redact(url))
    try:
        return _serve(args, settings, url, sealer, supplied)
    finally:
        embedded.stop()


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API (starts the embedded Valkey if needed)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
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
