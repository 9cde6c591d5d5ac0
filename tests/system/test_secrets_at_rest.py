"""Webhook URLs and signing secrets are kept encrypted at rest (service/storage/sealing.py).

Checked the hard way: a real `trainledger serve` with its embedded Valkey, webhooks
registered over HTTP, then every value of every key in that Valkey and every byte of every
file in the data directory (the append-only file included) searched for the secrets.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from cryptography.fernet import Fernet
from trainledger.cli.local_store import ensure_secret_key
from trainledger.storage.embedded import EmbeddedValkey
from trainledger.storage.sealing import (
    KEY_ENV,
    KEY_FILE_NAME,
    Sealer,
    SecretKeyError,
    Unsealable,
    load_sealer,
)
from trainledger.stores import Stores
from trainledger.webhooks.delivery.worker import DeliveryWorker
from trainledger.webhooks.formats.signing import generate_secret
from trainledger.webhooks.registry import (
    WebhookIn,
    create_webhook,
    load_webhooks,
    webhook_view,
)

from tests.api.test_budgets import this_month
from tests.api.test_ingest import post, put_card
from tests.api.test_webhooks import (
    BY_HAND,
    LOOPBACK,
    PUBLIC_URL,
    QUIET,
    Receiver,
    add_budget,
    add_webhook,
    check_standard,
    deliveries,
    ledger,
    receiving,
    store_of,
)
from tests.conftest import TEST_SEALER, TEST_SECRET_KEY, event, free_port, wait_until_ready

REPO = Path(__file__).resolve().parents[2]
EXIT_WAIT_S = 60  # a bound on waiting for a refused start, not a speed assertion


def serve_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env["TRAINLEDGER_DATA_DIR"] = str(data_dir)
    env.update(extra)
    return env


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A short path (the embedded Valkey's unix socket must fit in sun_path)."""
    root = Path(tempfile.mkdtemp(prefix="tl-sec-"))
    try:
        yield root / "d"
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


class Serve:
    def __init__(self, data_dir: Path, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "trainledger.cli", "serve", "--port", str(self.port)],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ready(self) -> Serve:
        wait_until_ready(self.proc, self.base_url, self.log)
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def exit_code(self) -> int:
        try:
            return self.proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"serve did not refuse to start:\n{self.log()}") from None


def everything_in(client: redis.Redis) -> bytes:
    """Every key and every value of every key, by type (no DUMP: it may compress)."""
    out: list[bytes] = []
    for key in client.scan_iter(count=1000):
        out.append(key)
        kind = client.type(key)
        if kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                out += [field, value]
        elif kind == b"list":
            out += client.lrange(key, 0, -1)
        elif kind == b"set":
            out += list(client.smembers(key))
        elif kind == b"zset":
            out += [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == b"stream":
            for entry_id, fields in client.xrange(key):
                out.append(entry_id)
                for field, value in fields.items():
                    out += [field, value]
        else:
            raise AssertionError(f"a key of type {kind!r} this scan does not read")
    return b"\n".join(out)


def files_in(directory: Path) -> dict[Path, bytes]:
    return {
        path: path.read_bytes()
        for path in directory.rglob("*")
        if path.is_file() and stat.S_ISREG(path.stat().st_mode)
    }


def test_webhook_urls_and_secrets_are_only_ciphertext_in_redis_and_on_disk(
    data_dir: Path, tmp_path: Path
) -> None:
    tag = secrets.token_hex(6)
    own_secret = generate_secret()
    bot_secret = f"feishu-bot-secret-{tag}"
    hooks = [
        {
            "url": f"http://127.0.0.1:9/in/path-token-{tag}?token=query-token-{tag}",
            "secret": own_secret,
            "description": f"own secret {tag}",
        },
        {"url": f"http://127.0.0.1:9/generated-{tag}", "description": f"generated {tag}"},
        {
            "url": f"http://127.0.0.1:9/services/T0/B0/slack-key-{tag}",
            "format": "slack",
            "description": f"slack {tag}",
        },
        {
            "url": f"http://127.0.0.1:9/open-apis/bot/v2/hook/feishu-hook-{tag}",
            "format": "feishu",
            "secret": bot_secret,
            "description": f"feishu {tag}",
        },
    ]
    env = serve_env(
        data_dir,
        TRAINLEDGER_APPENDFSYNC="always",  # every write is in the append-only file at once
        TRAINLEDGER_WEBHOOK_ALLOWLIST="127.0.0.1",
        TRAINLEDGER_WEBHOOK_DELIVERY="off",
    )
    server = Serve(data_dir, env, tmp_path / "serve.log").ready()
    try:
        admin = (data_dir / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {admin}"}
        created = []
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as c:
            for body in hooks:
                r = c.post("/v1/webhooks", json=body)
                assert r.status_code == 201, r.text
                created.append(r.json())
        generated_secret = created[1]["secret"]
        assert generated_secret.startswith("whsec_")

        needles = [own_secret, generated_secret, bot_secret] + [
            f"{x}-{tag}"
            for x in ("path-token", "query-token", "generated", "slack-key", "feishu-hook")
        ]
        needles += [s.removeprefix("whsec_") for s in (own_secret, generated_secret)]
        needles += [h["url"] for h in hooks]

        url = EmbeddedValkey(data_dir).running_url()
        assert url is not None
        client = redis.Redis.from_url(url)
        try:
            stored = everything_in(client)
        finally:
            client.close()
        on_disk = files_in(data_dir)
    finally:
        server.stop()

    # The scans see the webhooks (ids, descriptions): they would see a leak.
    for hook in created:
        assert hook["id"].encode() in stored
        assert hook["description"].encode() in stored
    aof = b"".join(v for p, v in on_disk.items() if "appendonly" in str(p))
    assert all(hook["id"].encode() in aof for hook in created), "no append-only file read"
    for needle in needles:
        assert needle.encode() not in stored, f"{needle!r} is in Redis in plain text"
        for path, content in on_disk.items():
            assert needle.encode() not in content, f"{needle!r} is in {path} in plain text"

    # The key the first start made is the owner's alone, and the next start opens with it.
    key_file = data_dir / KEY_FILE_NAME
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    again = Serve(data_dir, env, tmp_path / "serve-2.log").ready()
    try:
        with httpx.Client(base_url=again.base_url, headers=headers, timeout=30) as c:
            listed = {w["id"]: w for w in c.get("/v1/webhooks").json()}
    finally:
        again.stop()
    own = listed[created[0]["id"]]
    assert own["url"] == f"http://127.0.0.1:9/in/path-token-{tag}?token=…"
    assert own["has_secret"] and own["unreadable"] is None
    assert listed[created[2]["id"]]["url"] == "http://127.0.0.1:9/…"


async def test_a_wrong_key_fails_deliveries_clearly_and_the_right_one_signs(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deliveries by a worker whose key cannot open the webhook fail with the reason (and
    are retried), the worker carries on; with the key again they are sent, and signed with
    the secret that was sealed."""
    with receiving(Receiver().start()) as rx:
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            await put_card(api)
            secret = (await add_webhook(api, rx.url + "/in"))["secret"]
            await add_budget(api)
            await post(api, [event("k1", "3", time=this_month())])

            wrong = Sealer.generate()
            (listed,) = await load_webhooks(store, wrong)
            view = webhook_view(listed)
            assert view.url == "" and view.unreadable and KEY_ENV in view.unreadable

            worker = DeliveryWorker(store, BY_HAND, PUBLIC_URL, allowlist=LOOPBACK, sealer=wrong)
            assert await worker.run_once() == 1
            assert await worker.run_once() == 1  # still going, and still failing
            (pending,) = (await deliveries(api, "pending"))["items"]
            assert pending["attempts"] == 2
            assert "cannot be decrypted" in pending["last_error"]
            assert KEY_ENV in pending["last_error"]
            assert rx.at("/in") == []

            right = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, allowlist=LOOPBACK, sealer=TEST_SEALER
            )
            assert await right.run_once() == 1
            (done,) = (await deliveries(api, "delivered"))["items"]
            assert done["attempts"] == 3
    (received,) = rx.at("/in")
    assert check_standard(secret, received)["data"]["id"] == done["alert_id"]


async def _public(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return [ipaddress.ip_address("93.184.215.14")]


def new_key() -> str:
    return Fernet.generate_key().decode()


async def test_rotation_reseals_with_the_first_key_and_a_stale_key_is_refused(
    store: Stores,
) -> None:
    old, new = new_key(), new_key()
    url = "https://hooks.example/in?token=query-secret-1"
    record = await create_webhook(
        store, WebhookIn(url=url), resolver=_public, sealer=Sealer.parse(old, "old")
    )
    assert await ensure_secret_key(store, Sealer.parse(old, "old")) is None  # records OLD

    refused = await ensure_secret_key(store, Sealer.parse(new, "new"))
    assert refused is not None and KEY_ENV in refused and "another key" in refused

    # NEW,OLD: the start re-seals everything with NEW, so NEW alone opens it afterwards.
    assert await ensure_secret_key(store, Sealer.parse(f"{new},{old}", "both")) is None
    (opened,) = await load_webhooks(store, Sealer.parse(new, "new"))
    assert (opened.url, opened.secret, opened.unsealable) == (url, record.secret, None)
    assert await ensure_secret_key(store, Sealer.parse(new, "new")) is None
    assert await ensure_secret_key(store, Sealer.parse(old, "old")) is not None


async def test_serve_refuses_to_start_without_a_usable_key(
    clean_redis: str, tmp_path: Path, store: Stores
) -> None:
    """An external Redis needs the key given (a server alone must not invent one that the
    others sharing the Redis do not have); a malformed key, a missing key file, or a key
    that does not open what the Redis holds is refused; each with exit code 2 and the
    variable named."""
    data = tmp_path / "data"
    env = serve_env(data, TRAINLEDGER_REDIS_URL=clean_redis)
    none = Serve(data, env, tmp_path / "none.log")
    assert none.exit_code() == 2
    assert KEY_ENV in none.log() and "TRAINLEDGER_SECRET_KEY_FILE" in none.log()
    assert not (data / KEY_FILE_NAME).exists()

    bad = Serve(data, {**env, KEY_ENV: "not-a-key"}, tmp_path / "bad.log")
    assert bad.exit_code() == 2
    assert f"{KEY_ENV}=(value not shown) is not allowed: Fernet keys" in bad.log()
    assert "not-a-key" not in bad.log()  # a key's value, even a wrong one, is never shown

    missing_file = {**env, "TRAINLEDGER_SECRET_KEY_FILE": str(tmp_path / "nowhere")}
    no_file = Serve(data, missing_file, tmp_path / "nofile.log")
    assert no_file.exit_code() == 2
    assert "TRAINLEDGER_SECRET_KEY_FILE" in no_file.log() and "does not exist" in no_file.log()

    assert await ensure_secret_key(store, Sealer.parse(TEST_SECRET_KEY, "test")) is None
    other = new_key()
    wrong = Serve(data, {**env, KEY_ENV: other}, tmp_path / "wrong.log")
    assert wrong.exit_code() == 2
    assert "encrypted with another key" in wrong.log() and KEY_ENV in wrong.log()
    assert TEST_SECRET_KEY not in wrong.log() and other not in wrong.log()


def test_keys_from_the_environment_a_file_or_the_data_dir(tmp_path: Path) -> None:
    key_a, key_b = new_key(), new_key()
    file = tmp_path / "key"
    file.write_text(f"{key_a}\n{key_b}\n")
    from_file = load_sealer(None, key_file=file)
    from_env = load_sealer(None, key=f" {key_a} , {key_b} ")
    token = from_file.seal(b"x")
    assert from_env.open(token) == b"x" and from_env.sealed_with_first_key(token)
    by_b = Sealer.parse(key_b, "b").seal(b"y")  # sealed by the second (older) key
    assert from_env.open(by_b) == b"y" and not from_env.sealed_with_first_key(by_b)
    assert from_env.sealed_with_first_key(from_env.reseal(by_b))
    with pytest.raises(Unsealable):
        Sealer.parse(new_key(), "c").open(token)

    made = load_sealer(tmp_path / "dd", create=True)
    assert stat.S_IMODE((tmp_path / "dd" / KEY_FILE_NAME).stat().st_mode) == 0o600
    assert load_sealer(tmp_path / "dd").open(made.seal(b"z")) == b"z"
    with pytest.raises(SecretKeyError, match=KEY_ENV):
        load_sealer(tmp_path / "empty")  # not created unless asked to
    assert not (tmp_path / "empty").exists()


async def test_a_sealed_url_copied_into_another_webhook_is_refused(store: Stores) -> None:
    """Someone able to write to Redis cannot point one webhook's alerts at another's URL by
    copying the sealed value across: it carries the id of the webhook it was sealed for."""
    sealer = Sealer.generate()
    a = await create_webhook(
        store, WebhookIn(url="https://a.example/in"), resolver=_public, sealer=sealer
    )
    b = await create_webhook(
        store,
        WebhookIn(url="https://b.example/in", projects=["other"]),
        resolver=_public,
        sealer=sealer,
    )
    raw = await store.webhooks.webhooks()
    stored_a, stored_b = json.loads(raw[a.id]), json.loads(raw[b.id])
    await store.webhooks.put_webhook(
        b.id, json.dumps({**stored_b, "sealed": stored_a["sealed"]}).encode()
    )
    opened = {w.id: w for w in await load_webhooks(store, sealer)}
    assert opened[a.id].url == "https://a.example/in" and opened[a.id].unsealable is None
    assert opened[b.id].url == "" and opened[b.id].secret is None
    assert opened[b.id].unsealable == "its sealed URL and secret belong to another webhook"
