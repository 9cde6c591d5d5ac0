"""Secrets kept in Redis are sealed (encrypted and authenticated) with a key Redis never sees.

What is sealed: a webhook's URL and its signing secret. The URL counts as a secret for every
format: a Slack, Feishu, DingTalk or WeCom incoming-webhook URL is itself the credential (its
path or query lets anyone post), and a `standard` URL may carry tokens in its path or query.
Redis, its append-only file, its snapshots and its replicas hold only ciphertext for them.

The key (Fernet: AES-128-CBC with HMAC-SHA256, from the ``cryptography`` library) comes from,
in this order:

1. ``TRAINLEDGER_SECRET_KEY``: one key, or several separated by commas. A key is 32 random
   bytes in URL-safe base64 (44 characters), as ``python -c "from cryptography.fernet import
   Fernet; print(Fernet.generate_key().decode())"`` prints. The first key seals; every key
   opens (rotation: put the new key first and the old one after it; `trainledger serve`
   re-seals what is stored with the first key at start, after which the old key can go).
2. ``TRAINLEDGER_SECRET_KEY_FILE``: a file holding the same (one key a line, or commas).
3. ``secret-key`` in the data directory. `trainledger serve` with the embedded Valkey creates
   it (mode 0600) on first start. With an external Redis it is never created: servers sharing
   one Redis must share one key, so it has to be given (1, 2, or this file put there).

A check value sealed with the key (`CHECK_PLAINTEXT`) is kept in Redis, so a server started
with a key that cannot open what is stored refuses to start instead of failing every delivery.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

KEY_ENV: Final = "TRAINLEDGER_SECRET_KEY"
KEY_FILE_ENV: Final = "TRAINLEDGER_SECRET_KEY_FILE"
KEY_FILE_NAME: Final = "secret-key"
CHECK_PLAINTEXT: Final = b"trainledger sealing check"


class SecretKeyError(ValueError):
    """The key is missing or malformed (the message names the variable or file to fix)."""


class Unsealable(ValueError):
    """A sealed value none of the configured keys opens (sealed with another key, or
    damaged)."""


class Sealer:
    """Seals with the first key, opens with any of them."""

    def __init__(self, keys: list[bytes]) -> None:
        if not keys:
            raise SecretKeyError("no key given")
        self._fernets = [Fernet(k) for k in keys]
        self._multi = MultiFernet(self._fernets)

    @classmethod
    def parse(cls, text: str, source: str) -> Sealer:
        """Keys separated by commas or line breaks; `source` (a variable or file name) is
        named in the error."""
        raw = [k.strip() for k in text.replace("\n", ",").split(",") if k.strip()]
        if not raw:
            raise SecretKeyError(f"{source} holds no key")
        keys = []
        for i, key in enumerate(raw, 1):
            try:
                Fernet(key.encode("ascii"))
            except (ValueError, UnicodeError) as exc:
                raise SecretKeyError(
                    f"{source}: key {i} is not a Fernet key (32 random bytes in URL-safe "
                    'base64, 44 characters; make one with `python -c "from cryptography.'
                    'fernet import Fernet; print(Fernet.generate_key().decode())"`)'
                ) from exc
            keys.append(key.encode("ascii"))
        return cls(keys)

    @classmethod
    def generate(cls) -> Sealer:
        return cls([Fernet.generate_key()])

    def seal(self, plaintext: bytes) -> str:
        return self._multi.encrypt(plaintext).decode("ascii")

    def open(self, token: str | bytes) -> bytes:
        try:
            return self._multi.decrypt(token)
        except InvalidToken as exc:
            raise Unsealable(
                f"sealed with a key that is not configured ({KEY_ENV}), or damaged"
            ) from exc

    def sealed_with_first_key(self, token: str | bytes) -> bool:
        try:
            self._fernets[0].decrypt(token)
        except InvalidToken:
            return False
        return True

    def reseal(self, token: str | bytes) -> str:
        """`token` sealed again with the first key (`Unsealable` if no key opens it)."""
        try:
            return self._multi.rotate(token).decode("ascii")
        except InvalidToken as exc:
            raise Unsealable(f"sealed with a key that is not configured ({KEY_ENV})") from exc


def _read_key_file(path: Path, source: str) -> Sealer:
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError as exc:
        raise SecretKeyError(f"{source}: {path} does not exist") from exc
    except (OSError, UnicodeError) as exc:
        raise SecretKeyError(f"{source}: {path} cannot be read ({exc})") from exc
    return Sealer.parse(text, f"{source} ({path})")


def _create_key_file(path: Path) -> None:
    """A new random key in `path`, readable by its owner only. Two processes racing here
    both end up with the one key that won."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(Fernet.generate_key().decode("ascii") + "\n")


def load_sealer(
    data_dir: Path | None,
    *,
    create: bool = False,
    key: str | None = None,
    key_file: Path | None = None,
) -> Sealer:
    """The key as configured (see the module's documentation): `key` and `key_file` are the
    settings of ``TRAINLEDGER_SECRET_KEY`` and ``TRAINLEDGER_SECRET_KEY_FILE``. `create`:
    make the data directory's key file if no key is configured (the embedded Valkey's case
    only). `SecretKeyError` says what to set when there is none."""
    if key and key.strip():
        return Sealer.parse(key.strip(), KEY_ENV)
    if key_file is not None:
        return _read_key_file(key_file, KEY_FILE_ENV)
    if data_dir is not None:
        path = data_dir / KEY_FILE_NAME
        if create:
            _create_key_file(path)
        if path.exists():
            return _read_key_file(path, "the data directory's key file")
    raise SecretKeyError(
        f"no key to encrypt webhook secrets with: set {KEY_ENV} (a Fernet key; several "
        f"separated by commas to rotate) or {KEY_FILE_ENV} (a file holding one), or put a "
        f"'{KEY_FILE_NAME}' file in the data directory. Every server sharing this Redis must "
        "use the same key."
    )
