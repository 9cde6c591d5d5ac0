"""Process lifetimes, for the embedded server and `serve`'s workers (Linux; elsewhere the
parent-death signal is simply not armed): a child that gets SIGTERM when its parent dies,
whether a pid is alive, and stopping a process that is not our child."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path


def _prctl_pdeathsig() -> Callable[[int], int] | None:
    """Linux's prctl(PR_SET_PDEATHSIG, sig), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    pr_set_pdeathsig = 1
    return lambda sig: int(prctl(pr_set_pdeathsig, sig, 0, 0, 0))


def parent_death_signal() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child get SIGTERM when the thread that started it (and
    so its process) dies: Linux's PR_SET_PDEATHSIG. None elsewhere."""
    arm_pdeathsig = _prctl_pdeathsig()
    if arm_pdeathsig is None:
        return None
    parent = os.getpid()

    def arm() -> None:  # runs in the child between fork and exec
        arm_pdeathsig(signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


def exit_with_parent(parent: int) -> None:
    """Make this process get SIGTERM when process `parent` (its parent) dies: `trainledger
    serve`'s worker processes call it, so that a SIGKILLed `serve` leaves none of them
    serving on. Linux only; elsewhere nothing."""
    arm_pdeathsig = _prctl_pdeathsig()
    if arm_pdeathsig is None or parent == os.getpid():
        return
    arm_pdeathsig(signal.SIGTERM)
    if os.getppid() != parent:  # already gone before the signal was armed
        os.kill(os.getpid(), signal.SIGTERM)


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: kill(0) is all there is
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def terminate_and_wait(pid: int, grace_seconds: float, poll_seconds: float) -> None:
    """SIGTERM process `pid` (and SIGCONT, should it be stopped), give it `grace_seconds` to
    exit, then SIGKILL it. For a process that is not our child (we cannot wait() for it)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)  # Valkey fsyncs its append-only file and exits
        os.kill(pid, signal.SIGCONT)  # ... even if it was stopped
    for _ in range(int(grace_seconds / poll_seconds)):
        if not alive(pid):
            return
        time.sleep(poll_seconds)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
