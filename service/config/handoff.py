"""`trainledger serve` builds its `Settings` once and hands them to its worker processes
whole: msgspec-encoded in the one variable `TRAINLEDGER_SERVE_SETTINGS` (not a setting), read
back by each worker (`serve_app`, the connections' protocol). No variable is rewritten for
them."""

from __future__ import annotations

import functools

import msgspec

from .declare import decode_hook, encode_hook
from .environment import set_variable, variable
from .settings import Settings, settings_from

HANDOFF_VARIABLE = "TRAINLEDGER_SERVE_SETTINGS"


class Handoff(msgspec.Struct, frozen=True):
    """What `serve` gives each worker: its settings, whole, and its process id (a worker
    exits when `serve` is gone)."""

    settings: Settings
    serve_pid: int


def hand_down(settings: Settings, serve_pid: int) -> None:
    """Make `settings` the settings of the worker processes started from now on."""
    encoded = msgspec.json.encode(Handoff(settings, serve_pid), enc_hook=encode_hook)
    set_variable(HANDOFF_VARIABLE, encoded.decode())


def handed_down() -> Handoff | None:
    """What `serve` handed this worker, if it is one of `serve`'s."""
    raw = variable(HANDOFF_VARIABLE)
    if not raw:
        return None
    return msgspec.json.decode(raw, type=Handoff, dec_hook=decode_hook)


@functools.cache
def process_settings() -> Settings:
    """This process's settings, for what cannot be given them (uvicorn makes the protocol
    object of each connection): `serve`'s if it handed them down, else the environment's."""
    handoff = handed_down()
    return handoff.settings if handoff is not None else settings_from()
