"""How a setting is declared, and how its variable's text becomes its value.

A setting is a field of `Settings` (settings.py) made by `setting(...)`: the field's type
(with its bounds as `msgspec.Meta`) and default, and an `Env` holding the variable's name,
its help (the docs' "meaning" column) and what the type cannot say (a URL's schemes, a
Fernet key). `Variable` is that declaration read back; `convert` turns a variable's text
into the value with `msgspec.convert`, and `allowed` says what a refused value should have
been, from the same type and bounds (the error line and the docs' "allowed" column).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

import msgspec
from cryptography.fernet import Fernet

from ..storage.urls import redact

# A number of seconds (a float): `Annotated[float, Meta(...)]` read as seconds.
Seconds = float

SERVER, DELIVERY, CLIENT = "server", "delivery", "client"


@dataclass(frozen=True)
class Env:
    """A setting's environment variable. `allowed`/`refused` are needed only where the type
    and its bounds do not say them (a URL, a key); `check` turns the text into the value
    where `msgspec.convert` alone cannot (ValueError when it is not allowed)."""

    name: str
    help: str
    shown: str | None = None  # the default as the docs show it; None: the default itself
    allowed: str | None = None
    refused: str | None = None  # a value the variable refuses (the tests set it)
    check: Callable[[str], Any] | None = None
    secret: bool = False  # its value is never shown in an error
    section: str = SERVER  # the docs' table it is listed in


def setting(default: Any, name: str, help: str, **env: Any) -> Any:
    """A `Settings` field read from the variable `name` (see `Env` for the rest)."""
    if callable(default):
        return field(default_factory=default, metadata={"env": Env(name, help, **env)})
    return field(default=default, metadata={"env": Env(name, help, **env)})


class ConfigError(SystemExit):
    """Bad settings; `problems` has one line per variable: its name, value and what is allowed.
    A `SystemExit` with status 2: a process that does not catch it ends with that status.
    `values`: the variables that were allowed, read (a refusal is still said in the log
    format they ask for)."""

    def __init__(self, problems: list[str], values: dict[str, Any] | None = None) -> None:
        super().__init__(2)
        self.problems = problems
        self.values = values or {}

    def __str__(self) -> str:
        return "; ".join(self.problems)


def refusal(variable: Variable | str, raw: str, allowed: str, *, secret: bool = False) -> str:
    """One problem line: `NAME='value' is not allowed: <allowed>` (a secret's value and a
    URL's password are not shown)."""
    name = variable if isinstance(variable, str) else variable.name
    shown = "(value not shown)" if secret else repr(redact(raw) if "://" in raw else raw)
    return f"{name}={shown} is not allowed: {allowed}"


@dataclass(frozen=True)
class Kind:
    """What a variable allows, in words, and a value it refuses (None: it takes any)."""

    allowed: str
    refused: str | None


@dataclass(frozen=True)
class Variable:
    """One declared setting: the `Settings` field `setting`, its type and default."""

    setting: str
    type: Any
    default: Any
    env: Env

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def secret(self) -> bool:
        return self.env.secret

    @property
    def kind(self) -> Kind:
        base, bounds = _unwrap(self.type)
        allowed = self.env.allowed or _allowed(base, bounds)
        refused = self.env.refused if self.env.allowed else _refused(base, bounds)
        return Kind(allowed, refused)

    @property
    def shown_default(self) -> str:
        if self.env.shown is not None:
            return self.env.shown
        if isinstance(self.default, bool):
            return "`on`" if self.default else "`off`"
        if self.default is None:
            return "*(unset)*"
        if self.default == ():
            return "*(empty)*"
        if isinstance(self.default, float):
            return f"`{self.default:g}`"
        return f"`{self.default}`"

    def convert(self, raw: str) -> Any:
        """The value of the variable's (stripped, non-empty) text; ValueError when it is
        not allowed."""
        base, _ = _unwrap(self.type)
        value: Any = raw
        if self.env.check is not None:
            value = self.env.check(raw)
        elif base is bool:  # on/off words besides msgspec's true/false/1/0
            value = {"on": "true", "off": "false", "yes": "true", "no": "false"}.get(
                raw.lower(), raw.lower()
            )
        elif get_origin(base) is Literal:
            value = raw.lower()
        try:
            return msgspec.convert(value, self.type, strict=False, dec_hook=decode_hook)
        except msgspec.ValidationError as exc:
            raise ValueError(str(exc)) from exc


def decode_hook(type_: type, obj: Any) -> Any:
    """The types msgspec does not know: a path (made absolute, `~` expanded)."""
    if type_ is Path and isinstance(obj, str):
        return Path(obj).expanduser().absolute()
    raise NotImplementedError(type_)


def encode_hook(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    raise NotImplementedError(type(obj))


def _unwrap(type_: Any) -> tuple[Any, msgspec.Meta | None]:
    """The type without `None` (an unset variable) and its bounds."""
    bounds = None
    if get_origin(type_) is Annotated:
        type_, *extras = get_args(type_)
        bounds = next((m for m in extras if isinstance(m, msgspec.Meta)), None)
    if get_origin(type_) in (Union, types.UnionType):
        (type_,) = [a for a in get_args(type_) if a is not type(None)]
        return _unwrap(type_)[0], bounds
    return type_, bounds


def _allowed(base: Any, bounds: msgspec.Meta | None) -> str:
    ge = bounds.ge if bounds else None
    if base is bool:
        return "on or off (also 1/0, true/false, yes/no)"
    if get_origin(base) is Literal:
        return "one of " + ", ".join(get_args(base))
    if base is int and bounds is not None and bounds.le is not None:
        return f"a whole number from {ge} to {bounds.le}"
    if base is int:
        return f"a whole number, at least {ge}"
    if base is float:
        return "a number of seconds, " + (
            "more than 0" if bounds and bounds.gt == 0 else "0 or more"
        )
    if base is Path:
        return "a directory or file path"
    if base is str:
        return "any text"
    raise TypeError(f"say what {base} allows: Env(allowed=...)")


def _refused(base: Any, bounds: msgspec.Meta | None) -> str | None:
    if base is bool:
        return "maybe"
    if get_origin(base) is Literal:
        return "loud"
    if base is int and bounds is not None and bounds.ge is not None:
        return str(bounds.ge - 1)
    if base is float:
        return "0" if bounds and bounds.gt == 0 else "-1"
    return None


def declared(settings_class: type) -> tuple[Variable, ...]:
    """The variables of `settings_class`'s fields made by `setting`, in declaration order."""
    from dataclasses import fields

    hints = typing.get_type_hints(settings_class, include_extras=True)
    out = []
    for f in fields(settings_class):
        env = f.metadata.get("env")
        if env is None:
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default
        out.append(Variable(f.name, hints[f.name], default, env))
    return tuple(out)


# The value rules the types cannot say ------------------------------------------------------


def url(*schemes: str) -> dict[str, Any]:
    """`Env` options for a URL with one of `schemes`."""

    def check(raw: str) -> str:
        parts = urlsplit(raw)
        if parts.scheme not in schemes or not (parts.netloc or parts.path):
            raise ValueError
        if parts.scheme.startswith(("http", "redis")) and not parts.hostname:
            raise ValueError
        return raw

    allowed = "a URL starting " + " or ".join(f"{s}://" for s in schemes)
    return {"allowed": allowed, "refused": "localhost", "check": check}


def _fernet_keys(raw: str) -> str:
    for key in (k.strip() for k in raw.replace("\n", ",").split(",")):
        if key:
            Fernet(key.encode("ascii"))
    return raw


FERNET_KEYS: dict[str, Any] = {
    "allowed": "Fernet keys (44 characters of URL-safe base64), comma-separated",
    "refused": "k",
    "check": _fernet_keys,
    "secret": True,
}
