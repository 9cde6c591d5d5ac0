"""What `trainledger serve` runs: the embedded Valkey when no Redis is configured, the checks
and set-up on start, the folding process and the uvicorn workers. Imported only when `serve`
runs (`cli/serve.py` declares the command), so other commands start without it."""

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
from dataclasses import replace
from pathlib import Path

from ..config import Settings
from ..config.environment import share_prometheus_metrics
from ..config.handoff import hand_down
from ..ledger.folding import Folder
from ..runtime import tune_garbage_collector
from ..storage.embedded import DataDirOwned, EmbeddedValkey
from ..storage.sealing import Sealer, SecretKeyError, load_sealer
from ..storage.urls import redact
from .admin_token import ADMIN_TOKEN_FILE, supplied_admin_token
from .local_store import ensure_admin_token, ensure_secret_key, open_store
from .serve_logging import (
    announce_admin_token,
    announce_when_listening,
    bind,
    log,
    setup_logging,
)


def _share_metrics_between_workers(data_dir: Path) -> None:
    """prometheus_client's multiprocess mode: each worker writes its counters to files in
    this directory and `/metrics` (in whichever worker answers) sums them. Emptied at start,
    as that mode requires."""
    directory = (data_dir / "prometheus-multiproc").resolve()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(mode=0o700, parents=True)
    share_prometheus_metrics(str(directory))


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


def fold_forever(settings: Settings, parent: int) -> None:
    """The folding process: folds every project's log into its totals every 2 seconds, until
    `trainledger serve` (process `parent`) is gone. One process for all the workers keeps
    the fold's Python off the request workers (in a worker it took turns with the requests
    for the interpreter: single-event p99 8 ms with it there, 3 ms without it)."""
    from ..http.observability import JsonFormatter, TextFormatter

    _name_process(FOLD_PROCESS_NAME)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    handler = logging.StreamHandler()
    if settings.log_format == "text":
        handler.setFormatter(TextFormatter())
    else:
        handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler])

    async def go() -> None:
        assert settings.redis_url is not None  # `serve` set it: its store's
        async with open_store(settings.redis_url) as store:
            tune_garbage_collector()
            folder = Folder(store, every_project=True)
            await folder.run(keep_going=lambda: os.getppid() == parent)

    asyncio.run(go())


def _start_folder(settings: Settings) -> multiprocessing.process.BaseProcess:
    process = multiprocessing.get_context("spawn").Process(
        target=fold_forever, args=(settings, os.getpid()), name="trainledger-fold", daemon=True
    )
    process.start()
    return process


def _cannot_start(reason: object) -> int:
    log.error("cannot start: %s", reason)
    return 2


class CannotStart(Exception):
    """Why `serve` cannot start, said as what to do (one line, no traceback)."""


def port_in_use(host: str, port: int, error: OSError) -> CannotStart:
    return CannotStart(
        f"{host}:{port} is taken ({error.strerror or error}): another `trainledger serve` or "
        f"another program listens there. Stop it, or serve on another port: --port {port + 1}"
    )


def check_port(host: str, port: int) -> None:
    """Refuse a port another process holds before anything is started: a first start must
    not bring up Valkey and mint a token only to fail on the socket."""
    try:
        bind(host, port).close()
    except OSError as exc:
        raise port_in_use(host, port, exc) from exc


def start_embedded(embedded: EmbeddedValkey) -> str:
    """Start the data dir's Valkey, or say what to do when another process owns the dir."""
    try:
        return embedded.start()
    except DataDirOwned as exc:
        raise CannotStart(
            f"{embedded.data_dir} is in use by another trainledger process (a running "
            "`trainledger serve`?). Stop it, or use another data dir: --data-dir DIR; to share "
            f"its store, set TRAINLEDGER_REDIS_URL to the URL in {embedded.url_file}"
        ) from exc


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


def workers_settings(args: argparse.Namespace, settings: Settings, url: str) -> Settings:
    """The settings of the worker processes and the folding process: `serve`'s own, with its
    store's URL and logging, and no folding in the workers (the folding process does it)."""
    return replace(
        settings,
        redis_url=url,
        # Every worker process sets up its logging from these (see create_app).
        log_format="text" if log_format_of(args, settings) == "text" else "json",
        log_level=log_level_of(args, settings),  # type: ignore[arg-type]
        fold_in_workers=False,
    )


def _tell_workers(args: argparse.Namespace, settings: Settings) -> None:
    """Hand the workers their settings, whole (they exit with this process)."""
    if args.workers > 1:
        _share_metrics_between_workers(settings.data_dir)
    hand_down(settings, os.getpid())


# uvicorn's exit status when its server did not start.
STARTUP_FAILURE = 3


def _run_workers(
    args: argparse.Namespace, log_level: str, token_file: Path, log_format: str
) -> None:
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
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:  # taken since `check_port`
        raise port_in_use(args.host, args.port, exc) from exc
    stop_watching = announce_when_listening(sock, args.host, token_file, log_format)
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
    settings = workers_settings(args, settings, url)
    _tell_workers(args, settings)
    folder = _start_folder(settings)
    try:
        _run_workers(
            args,
            log_level_of(args, settings),
            settings.data_dir / ADMIN_TOKEN_FILE,
            log_format_of(args, settings),
        )
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


def serve(args: argparse.Namespace, settings: Settings) -> int:
    """`trainledger serve` with its options: until stopped, or the reason it cannot start."""
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
        # With the embedded Valkey the data dir is this server's own: a key is made there on
        # first start. An external Redis may be shared by several servers, which must all
        # use one key: it has to be given.
        sealer = load_sealer(
            settings.data_dir,
            create=url is None,
            key=settings.secret_key,
            key_file=settings.secret_key_file,
        )
        supplied = supplied_admin_token(settings.admin_token_file)
    except (SecretKeyError, ValueError) as exc:
        return _cannot_start(exc)
    try:
        check_port(args.host, args.port)
        if url is not None:
            return _serve(args, settings, url, sealer, supplied)
        embedded = EmbeddedValkey(settings.data_dir, settings.appendfsync)
        url = start_embedded(embedded)
        # Not the URL itself: it holds the server's password (kept in the data dir, 0600).
        log.info("embedded Valkey on %s", redact(url))
        try:
            return _serve(args, settings, url, sealer, supplied)
        finally:
            embedded.stop()
    except CannotStart as exc:
        return _cannot_start(exc)
