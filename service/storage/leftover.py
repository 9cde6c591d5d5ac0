"""A server an earlier owner of a data directory left running: found by asking it (it answers
on the last URL and names this directory as its own) or, when it does not answer, by the pid
file and /proc (a valkey-server working in this directory)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from urllib.parse import urlsplit

import redis

from .data_dir import PID_FILE
from .processes import alive


def pid_from_file(data_dir: Path) -> int | None:
    """The pid `valkey.pid` names, if it names one."""
    try:
        return int((data_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def leftover_pid(data_dir: Path, url_file: Path) -> int | None:
    """The pid of a live server of this data dir that no owner supervises, if any: one that
    answers on the last URL and says its dir is this one, or (Linux, when it does not
    answer) the pid in `valkey.pid` if that process is a valkey-server working here.
    `data_dir` is resolved (it is compared with the resolved paths the server reports)."""
    with contextlib.suppress(OSError, ValueError):
        url = url_file.read_text().strip()
        if url:
            pid = _ask_leftover(data_dir, url)
            if pid is not None:
                return pid
    pid = pid_from_file(data_dir)
    if pid is None or not alive(pid):
        return None
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd")).resolve()
        exe = Path(os.readlink(f"/proc/{pid}/exe")).name
    except OSError:
        return None
    return pid if cwd == data_dir and exe.startswith("valkey-server") else None


def _ask_leftover(data_dir: Path, url: str) -> int | None:
    """Connect to `url` as a client: if a server answers and its dir is this data dir,
    its pid. A leftover of an older version has no password: try without too."""
    parts = urlsplit(url)
    bare = parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()
    for candidate in dict.fromkeys((url, bare)):
        client = redis.Redis.from_url(
            candidate, decode_responses=True, socket_timeout=2, socket_connect_timeout=2
        )
        try:
            directory = client.config_get("dir").get("dir")
            pid = client.info("server").get("process_id")
        except (redis.AuthenticationError, redis.ResponseError):
            continue
        except redis.RedisError:
            return None
        finally:
            client.close()
        if directory is not None and Path(directory).resolve() == data_dir and pid:
            return int(pid)
        return None
    return None
