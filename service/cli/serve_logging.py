"""What `trainledger serve` itself says, in the configured log format, and nothing secret.

Every line `serve` writes is a log record on stderr in the format of `--log-format` /
`TRAINLEDGER_LOG_FORMAT` (JSON by default), the start-up lines included. The local admin
token minted on first start goes to its 0600 file; it is shown (as one more line in the same
format, written straight to the terminal, never through `logging`) only when stderr is a
terminal, so it never reaches `docker logs` or a log shipper.

The ready line ("serving on ...") is written once the listening socket accepts connections:
`serve` binds the socket itself and watches it (`SO_ACCEPTCONN`) until a worker has started
listening on it, which uvicorn does only after the app's start-up has completed.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from pathlib import Path
from urllib.parse import quote

from ..http.observability import JsonFormatter, TextFormatter

log = logging.getLogger("trainledger.serve")

LISTEN_POLL_S = 0.01


def formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


def setup_logging(fmt: str, level: str) -> None:
    """This process's log records on stderr in `fmt` ("json" or "text") from `level` up
    (uvicorn's parent-process lines included). The workers set up their own (create_app)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def announce_admin_token(token: str, path: Path, fmt: str) -> None:
    """Say where the first start's admin token is; show the token itself only on a terminal."""
    log.warning(
        "a local admin token was created on first start; it is in %s (readable by this user only)",
        path,
        extra={"fields": {"admin_token_file": str(path)}},
    )
    if not sys.stderr.isatty():
        return
    _show(fmt, "local admin token (shown because stderr is a terminal; not logged): %s", token)


def _show_signed_in_link(url: str, token_file: Path | None, fmt: str) -> None:
    """On a terminal, the dashboard link with the local admin token, as a line in the log
    format: one click to a ready dashboard. Never logged (a log outlives the terminal, and is
    read by others)."""
    if token_file is None or not sys.stderr.isatty():
        return
    try:
        token = token_file.read_text().strip()
    except OSError:
        return
    if token:
        _show(
            fmt,
            "open the dashboard (shown because stderr is a terminal; not logged): %s",
            f"{url}/ui?token={quote(token, safe='')}",
        )


def _show(fmt: str, message: str, arg: str) -> None:
    """A warning in the log format, on the terminal only: it holds a secret."""
    record = logging.LogRecord(log.name, logging.WARNING, __file__, 0, message, (arg,), None)
    sys.stderr.write(formatter(fmt).format(record) + "\n")
    sys.stderr.flush()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket's address bound (not yet listening: a worker listens on it once
    its app has started), inheritable by uvicorn's worker processes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def listening(sock: socket.socket) -> bool:
    try:
        return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
    except OSError:
        return False


def announce_when_listening(
    sock: socket.socket, host: str, token_file: Path | None = None, fmt: str = "json"
) -> threading.Event:
    """Start a thread that writes the ready line once `sock` listens (with the dashboard's
    address; on a terminal also a link signed in with the admin token of `token_file`, shown,
    not logged); set the returned event to stop it early (the server ended without
    listening)."""
    stop = threading.Event()
    port = sock.getsockname()[1]
    where = f"[{host}]" if ":" in host else host
    url = f"http://{where}:{port}"

    def watch() -> None:
        while not stop.wait(LISTEN_POLL_S):
            if listening(sock):
                log.info(
                    "serving on %s (dashboard: %s/ui, API docs at /docs)",
                    url,
                    url,
                    extra={"fields": {"url": url, "dashboard": f"{url}/ui"}},
                )
                _show_signed_in_link(url, token_file, fmt)
                return

    threading.Thread(target=watch, name="trainledger-ready", daemon=True).start()
    return stop
