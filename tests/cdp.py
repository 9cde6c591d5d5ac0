"""A headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
JSON messages, NUL-terminated, commands on fd 3, answers on fd 4), stdlib only: open a page,
wait for it to load, evaluate JavaScript in it. For measuring what the browser laid out
(text boxes in the dashboard's charts), which a dumped DOM cannot tell."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import time
from typing import Any


def _above_4(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class Chromium:
    def __init__(self, args: list[str], timeout: float = 120.0) -> None:
        self.timeout = timeout
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Above 4, so that placing them on 3 and 4 in the child overwrites neither.
        to_child_r, from_child_w = (_above_4(fd) for fd in (to_child_r, from_child_w))

        # A shell puts the pipes where Chromium looks for them: fd 3 reads commands, fd 4
        # writes answers; then it becomes Chromium.
        wire = (
            f'exec 3<&{to_child_r} 4>&{from_child_w} {to_child_r}<&- {from_child_w}>&-; exec "$@"'
        )
        self.proc = subprocess.Popen(
            ["bash", "-c", wire, "bash", *args, "--remote-debugging-pipe"],
            pass_fds=(to_child_r, from_child_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next = 0
        self._events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(message))

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        command: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session:
            command["sessionId"] = session
        os.write(self._to_child, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read(deadline)
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self._events.append(message)

    def wait_for(self, method: str, session: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return dict(self._events.pop(i))
            self._events.append(self._read(deadline))

    def open(self, url: str, width: int = 1400, height: int = 1000) -> str:
        """A new page at `url`, loaded (redirects followed); its session id."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable", session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.send("Page.navigate", session, url=url)
        self.wait_for("Page.loadEventFired", session)
        return str(session)

    def evaluate(self, session: str, expression: str) -> Any:
        answer = self.send("Runtime.evaluate", session, expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"the script failed: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
