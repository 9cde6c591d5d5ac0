"""The service's store as the command line reaches it: the configured Redis, else the embedded
Valkey of the data dir (started for as long as a command needs it); and what `serve` checks
and sets up there on start (the secret key, the first admin token)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from ..auth.model import digest as digest_of
from ..auth.model import mint
from ..config import Settings
from ..storage.embedded import EmbeddedValkey
from ..storage.sealing import CHECK_PLAINTEXT, KEY_ENV, Sealer, Unsealable
from ..stores import Stores
from .admin_token import ADMIN_TOKEN_FILE, ADMIN_TOKEN_FILE_ENV
from .serve_logging import log


@contextmanager
def redis_url_for(settings: Settings) -> Iterator[str]:
    """The configured URL; else the embedded server already running for the data dir;
    else an embedded server started for as long as the block runs."""
    if settings.redis_url:
        yield settings.redis_url
        return
    embedded = EmbeddedValkey(settings.data_dir, settings.appendfsync)
    running = embedded.running_url()
    if running:
        yield running
        return
    url = embedded.start()
    try:
        yield url
    finally:
        embedded.stop()


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[Stores]:
    store = Stores.from_url(url)
    try:
        yield store
    finally:
        await store.close()


def run_with_store(settings: Settings, action: Callable[[Stores], Coroutine[Any, Any, Any]]) -> Any:
    async def go(url: str) -> Any:
        async with open_store(url) as store:
            return await action(store)

    with redis_url_for(settings) as url:
        return asyncio.run(go(url))


async def ensure_admin_token(
    store: Stores, data_dir: Path, supplied: str | None = None
) -> str | None:
    """On first start (no admin token yet) mint a local admin token and keep it in the data dir.
    A `supplied` token is registered instead whenever it is not yet known (a changed secret
    is a new admin token: revoke the old one), and nothing is returned to show."""
    if supplied is not None:
        if await store.tokens.token_record(digest_of(supplied)) is None:
            _, token_digest, record = mint("admin", None, ADMIN_TOKEN_FILE_ENV, supplied)
            await store.tokens.put_token(token_digest, record["id"], record)
        return None
    if any(r.get("role") == "admin" for r in await store.tokens.token_records()):
        return None
    token, digest, record = mint("admin", None, "local admin (first start)")
    await store.tokens.put_token(digest, record["id"], record)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / ADMIN_TOKEN_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


async def ensure_secret_key(store: Stores, sealer: Sealer) -> str | None:
    """Check that the key opens the secrets this Redis holds (a check value sealed with the
    key of the first start), and re-seal with the first key whatever an older key of the
    list sealed (rotation). Returns why the server must not start, or None."""
    from ..webhooks.registry import reseal_webhooks

    stored = await store.webhooks.sealing_check(sealer.seal(CHECK_PLAINTEXT))
    try:
        if sealer.open(stored) != CHECK_PLAINTEXT:
            raise Unsealable("not the check value")
    except Unsealable:
        return (
            f"{KEY_ENV}: the secrets stored in this Redis were encrypted with another key. "
            f"Set {KEY_ENV} (or the key file) to the key they were stored with; to change "
            f"keys, list the new one first and the old one after it: {KEY_ENV}=NEW,OLD"
        )
    if not sealer.sealed_with_first_key(stored):
        await store.webhooks.replace_sealing_check(stored, sealer.reseal(stored))
    resealed, unopenable = await reseal_webhooks(store, sealer)
    if resealed:
        log.info("re-encrypted %d webhook(s) with the first key of %s", resealed, KEY_ENV)
    if unopenable:
        log.error(
            "%d webhook(s) cannot be decrypted with the configured key (their deliveries fail "
            "until it is configured again)",
            unopenable,
        )
    return None
