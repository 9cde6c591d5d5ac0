"""The Teams and email channels, end to end, against real receivers.

Teams: a real HTTP receiver on loopback standing in for the Workflows webhook (it answers
202 as Workflows does); the body it gets is validated against the Adaptive Card schema
subset in ``tests/data``. Email: a real SMTP server (aiosmtpd, in a thread) with STARTTLS or
implicit TLS from a CA made for the test (``cryptography``), and AUTH; the message it
receives is parsed as a mail client would. Alerts are produced the real way (a budget, then
events posted over HTTP); the delivery worker runs by hand, one round at a time, so each
test can look between attempts. The one seam is the resolver (`targets.resolver`, or the
worker's ``resolver=``), answering the ``.test`` names (RFC 6761) with chosen addresses.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email
import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import default
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from trainledger.auth.model import Principal
from trainledger.webhooks.delivery.config import DeliveryConfig
from trainledger.webhooks.delivery.worker import DeliveryWorker
from trainledger.webhooks.service import send_test_message
from trainledger.webhooks.targets import checks as targets

from tests.api.test_budgets import this_month
from tests.api.test_ingest import post, put_card
from tests.api.test_webhooks import (
    FAST,
    LOOPBACK,
    PUBLIC_URL,
    QUIET,
    Receiver,
    add_budget,
    add_webhook,
    alert_ids,
    delivered_count,
    deliveries,
    ledger,
    receiving,
    store_of,
    wait_until,
)
from tests.conftest import TEST_SEALER, Api, event, free_port, sync_client
from tests.system.test_secrets_at_rest import everything_in
from tests.system.test_webhook_targets import PUBLIC_V4, Names
from tests.system.test_webhook_targets import ledger as strict_ledger

SCHEMA = json.loads(
    (Path(__file__).parents[1] / "data" / "adaptive-card-1.5-subset.schema.json").read_text()
)
CARD = jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
BY_HAND = DeliveryConfig(max_attempts=5, base_delay_s=0, lease_s=10.0, timeout_s=5.0)
PASSWORD = "app-password-7f3a9c"
SENDER = "ledger@example.com"
TO = "ops@example.com"


async def spend_6000(api: Api) -> str:
    """A 10,000 budget on pretrain and 2,400 GPU hours (6,000.00) that cross its 50 %."""
    await put_card(api)
    await add_budget(api, name="pretrain monthly", amount="10000", scope={"stage": "pretrain"})
    await post(api, [event("m1", "2400", time=this_month(), stage="pretrain")])
    (alert_id,) = await alert_ids(api)
    return alert_id


# --- Teams ------------------------------------------------------------------------------------


async def test_teams_gets_a_valid_adaptive_card_once(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = "/workflows/wf-1/triggers/manual/paths/invoke"
    with receiving(Receiver().start()) as rx:
        rx.answers = {path: [(202, {})]}  # what a Workflows trigger answers
        async with ledger(clean_redis, monkeypatch, FAST) as api:
            url = rx.url + path + "?api-version=2016-06-01&sp=%2Ftriggers&sig=sig-secret-1"
            hook = await add_webhook(api, url, "teams")
            alert_id = await spend_6000(api)

            async def delivered() -> bool:
                return await delivered_count(api) == 1

            await wait_until(delivered, "the Teams delivery")
            (done,) = (await deliveries(api, "delivered"))["items"]
            async with api.client() as c:
                listed = (await c.get("/v1/webhooks")).json()

    assert "secret" not in hook and hook["has_secret"] is False
    assert done["last_status_code"] == 202 and done["attempts"] == 1
    assert [w["url"] for w in listed] == [f"{rx.url}/…"]
    assert "sig-secret-1" not in json.dumps(listed)
    (request,) = rx.at(path)
    assert request.headers["webhook-id"] == alert_id
    body = request.json
    assert [e.message for e in CARD.iter_errors(body)] == []
    card = body["attachments"][0]["content"]
    text = json.dumps(card, ensure_ascii=False)
    for needle in ("6,000.00 USD", "5,000.00 USD", "1,000.00 USD", "10,000.00 USD", "50%",
                   "gpu.h100.hour / pretrain", "stage=pretrain"):  # fmt: skip
        assert needle in text, needle
    budget_links = [a["url"] for a in card["actions"] if a["title"] == "Budget"]
    assert budget_links and budget_links[0].startswith(f"{PUBLIC_URL}/v1/budgets/")


# --- a real SMTP server -------------------------------------------------------------------------


@dataclass
class Pki:
    server: ssl.SSLContext  # a certificate for mail.test
    client: ssl.SSLContext  # trusts the test CA only


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA and a certificate for mail.test, made with `cryptography` for real TLS."""
    now = dt.datetime.now(dt.UTC)
    ca_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )

    def cert(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(subject))
            .issuer_name(_name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            names = [x509.DNSName("mail.test")]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca = cert("trainledger test CA", ca_key, "trainledger test CA", ca_key, True)
    leaf = cert("mail.test", leaf_key, "trainledger test CA", ca_key, False)
    d = tmp_path_factory.mktemp("smtp-pki")
    (d / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (d / "leaf.key").write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(d / "leaf.pem", d / "leaf.key")
    client = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return Pki(server, client)


@dataclass
class Mail:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    tls: bool
    login: str | None

    @property
    def message(self) -> EmailMessage:
        parsed = email.message_from_bytes(self.data, policy=default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@dataclass
class SmtpServer:
    """An aiosmtpd server on a loopback port: STARTTLS (required) with `starttls`, TLS
    from the first byte with `implicit`, AUTH (required, after TLS) with `login`. Records
    every message; `rcpt_answers` queues replies to RCPT TO (then 250)."""

    port: int = field(default_factory=free_port)
    starttls: ssl.SSLContext | None = None
    implicit: ssl.SSLContext | None = None
    login: tuple[str, str] | None = None
    mails: list[Mail] = field(default_factory=list)
    rcpt_answers: list[str] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    _controller: Controller | None = None

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        if self.rcpt_answers:
            answer = self.rcpt_answers.pop(0)
            if not answer.startswith("250"):
                return answer
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        login = self.logins[-1] if session.authenticated else None
        # session.ssl is set by STARTTLS; a connection that was TLS from the start has an
        # SSL object on its transport.
        tls = session.ssl is not None or server.transport.get_extra_info("ssl_object") is not None
        self.mails.append(
            Mail(envelope.mail_from, list(envelope.rcpt_tos), envelope.content, tls, login)
        )
        return "250 2.0.0 accepted"

    def authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        assert self.login is not None
        if (
            isinstance(data, LoginPassword)
            and (
                data.login.decode(),
                data.password.decode(),
            )
            == self.login
        ):
            self.logins.append(data.login.decode())
            return AuthResult(success=True)
        return AuthResult(success=False, handled=False)

    def __enter__(self) -> SmtpServer:
        return self if self._controller is not None else self.start()

    def start(self) -> SmtpServer:
        options: dict[str, Any] = {}
        if self.starttls is not None:
            options.update(tls_context=self.starttls, require_starttls=True)
        if self.login is not None:
            options.update(
                authenticator=self.authenticate, auth_required=True, auth_require_tls=True
            )
        self._controller = Controller(
            self, hostname="127.0.0.1", port=self.port, ssl_context=self.implicit,
            server_hostname="mail.test", **options,
        )  # fmt: skip
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._controller is not None:
            self._controller.stop()


def email_settings(**extra: Any) -> dict[str, Any]:
    return {"from": SENDER, "to": [TO], **extra}


def mail_worker(store: Any, names: Names | None, pki: Pki | None) -> DeliveryWorker:
    return DeliveryWorker(
        store, BY_HAND, PUBLIC_URL, allowlist=LOOPBACK, resolver=names,
        ssl_context=pki.client if pki else None,
        sealer=TEST_SEALER,
    )  # fmt: skip


def mail_names(monkeypatch: pytest.MonkeyPatch) -> Names:
    names = Names({"mail.test": [["127.0.0.1"]], "other.test": [["127.0.0.1"]]})
    monkeypatch.setattr(targets, "resolver", names)  # registration's lookups
    return names


# --- email --------------------------------------------------------------------------------------


async def test_email_over_starttls_with_login_is_delivered_once(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch, pki: Pki
) -> None:
    names = mail_names(monkeypatch)
    with SmtpServer(starttls=pki.server, login=("ledger", PASSWORD)) as mx:
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            hook = await add_webhook(
                api, f"smtp://mail.test:{mx.port}", "email", secret=PASSWORD,
                email=email_settings(username="ledger"),
            )  # fmt: skip
            alert_id = await spend_6000(api)
            worker = mail_worker(store, names, pki)
            assert [await worker.run_once() for _ in range(2)] == [1, 0]
            (done,) = (await deliveries(api, "delivered"))["items"]
            async with api.client() as c:
                listed = (await c.get("/v1/webhooks")).json()
    client = sync_client(clean_redis)
    try:
        stored = everything_in(client)  # the password is sealed: only ciphertext in Redis
    finally:
        client.close()

    assert hook["id"].encode() in stored and PASSWORD.encode() not in stored
    assert hook["email"] == email_settings(username="ledger", tls="starttls")
    assert "secret" not in hook and hook["has_secret"] is True
    assert listed[0]["url"] == f"smtp://mail.test:{mx.port}" and PASSWORD not in json.dumps(listed)
    assert (done["alert_id"], done["attempts"], done["last_status_code"]) == (alert_id, 1, 250)
    (mail,) = mx.mails
    assert mail.tls and mail.login == "ledger"
    assert (mail.mail_from, mail.rcpt_tos) == (SENDER, [TO])
    message = mail.message
    assert message["Subject"] == "[trainledger] llm: budget pretrain monthly crossed 50%"
    assert message["X-Trainledger-Alert-Id"] == alert_id
    assert message["Message-ID"].endswith(f".{hook['id']}@example.com>")
    plain, html = message.get_body(("plain",)), message.get_body(("html",))
    assert plain is not None and html is not None
    for part in (plain.get_content(), html.get_content()):
        for needle in ("6,000.00 USD", "5,000.00 USD", "1,000.00 USD", "10,000.00 USD",
                       "gpu.h100.hour / pretrain", f"{PUBLIC_URL}/v1/budgets/"):  # fmt: skip
            assert needle in part, needle


async def test_an_email_webhook_gets_its_test_message_over_smtp(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch, pki: Pki
) -> None:
    """`POST /v1/webhooks/{id}/test` on an email webhook: one SMTP session as a delivery
    makes (TLS, login), the sample of the asked kind, and the SMTP reply code as the status.
    The use case is driven here, beside the route, to trust the test CA (the route is one
    call to it)."""
    names = mail_names(monkeypatch)
    with SmtpServer(starttls=pki.server, login=("ledger", PASSWORD)) as mx:
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            hook = await add_webhook(
                api, f"smtp://mail.test:{mx.port}", "email", secret=PASSWORD,
                email=email_settings(username="ledger"),
            )  # fmt: skip
            answers = [
                await send_test_message(
                    store,
                    TEST_SEALER,
                    Principal("t", "admin", None),
                    hook["id"],
                    kind=kind,
                    public_url=PUBLIC_URL,
                    allowlist=LOOPBACK,
                    config=QUIET,
                    resolver=names,
                    ssl_context=pki.client,
                )
                for kind in ("threshold", "evaluation_regression")
            ]
            async with api.client() as c:
                listed = (await c.get("/v1/webhooks/deliveries", params={"project": "llm"})).json()
    assert [(a.delivered, a.status_code, a.error) for a in answers] == [(True, 250, None)] * 2
    assert listed["items"] == []  # a test is not a delivery
    first, second = (mail.message for mail in mx.mails)
    assert all(mail.tls and mail.login == "ledger" for mail in mx.mails)
    assert first["X-Trainledger-Alert-Id"] == answers[0].message_id
    assert "budget" in first["Subject"] and "mmlu" in second["Subject"]
    assert "test" in (first.get_body(("plain",)) or first).get_content().lower()


async def test_email_over_implicit_tls(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch, pki: Pki
) -> None:
    names = mail_names(monkeypatch)
    with SmtpServer(implicit=pki.server) as mx:
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            hook = await add_webhook(
                api, f"smtps://mail.test:{mx.port}", "email", email=email_settings()
            )
            await spend_6000(api)
            assert await mail_worker(store, names, pki).run_once() == 1
            assert (await delivered_count(api)) == 1
    assert hook["email"]["tls"] == "implicit" and hook["has_secret"] is False
    (mail,) = mx.mails
    assert mail.tls and mail.login is None


async def test_tls_is_required_and_the_certificate_verified_for_the_name(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch, pki: Pki
) -> None:
    """A server that offers no STARTTLS gets nothing in plain text, and a server whose
    certificate is for another name gets nothing at all: both are failed attempts."""
    names = mail_names(monkeypatch)
    with SmtpServer() as plain, SmtpServer(starttls=pki.server) as misnamed:
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            no_tls = await add_webhook(
                api, f"smtp://mail.test:{plain.port}", "email", email=email_settings()
            )
            other = await add_webhook(
                api, f"smtp://other.test:{misnamed.port}", "email", email=email_settings()
            )
            await spend_6000(api)
            assert await mail_worker(store, names, pki).run_once() == 2
            pending = {d["webhook_id"]: d for d in (await deliveries(api, "pending"))["items"]}
    assert plain.mails == [] and misnamed.mails == []
    assert "STARTTLS" in pending[no_tls["id"]]["last_error"]
    assert "certificate" in pending[other["id"]]["last_error"].lower()


async def test_a_server_down_then_up_gets_the_message_once(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mx = SmtpServer()  # not started: its port refuses connections
    async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
        await add_webhook(
            api, f"smtp://127.0.0.1:{mx.port}", "email", email=email_settings(tls="none")
        )
        alert_id = await spend_6000(api)
        worker = mail_worker(store, None, None)
        assert await worker.run_once() == 1
        (waiting,) = (await deliveries(api, "pending"))["items"]
        with mx.start():
            assert [await worker.run_once() for _ in range(2)] == [1, 0]
            (done,) = (await deliveries(api, "delivered"))["items"]
    assert waiting["attempts"] == 1 and waiting["last_status_code"] is None
    assert "refused" in waiting["last_error"].lower() or "connect" in waiting["last_error"].lower()
    assert (done["id"], done["attempts"]) == (waiting["id"], 2)
    (mail,) = mx.mails
    assert mail.message["X-Trainledger-Alert-Id"] == alert_id and not mail.tls


async def test_a_4xx_is_retried_and_a_5xx_is_a_dead_letter_at_once(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SmtpServer() as mx:
        mx.rcpt_answers = ["451 4.3.0 try again later", "550 5.1.1 no such mailbox"]
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            await add_webhook(
                api, f"smtp://127.0.0.1:{mx.port}", "email", email=email_settings(tls="none")
            )
            await spend_6000(api)
            worker = mail_worker(store, None, None)
            assert await worker.run_once() == 1
            (retry,) = (await deliveries(api, "pending"))["items"]
            assert await worker.run_once() == 1
            (dead,) = (await deliveries(api, "failed"))["items"]
            assert await worker.run_once() == 0  # a dead letter is not retried
            async with api.client() as c:
                r = await c.post(
                    "/v1/webhooks/deliveries/redeliver", params={"project": "llm"}, json={}
                )
                assert r.json()["redelivered"] == [dead["id"]]
            assert await worker.run_once() == 1
            (again,) = (await deliveries(api, "delivered"))["items"]
    assert (retry["attempts"], retry["last_status_code"]) == (1, 451)
    assert "try again later" in retry["last_error"]
    assert (dead["attempts"], dead["last_status_code"]) == (2, 550)
    assert "no such mailbox" in dead["last_error"] and dead["failed_at"] is not None
    assert (again["id"], again["redeliveries"]) == (dead["id"], 1)
    assert len(mx.mails) == 1


async def test_a_message_accepted_for_some_recipients_is_delivered_naming_the_others(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SmtpServer() as mx:
        mx.rcpt_answers = ["550 5.1.1 no such mailbox"]  # the first recipient only
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            settings = email_settings(tls="none", to=["gone@example.com", TO])
            await add_webhook(api, f"smtp://127.0.0.1:{mx.port}", "email", email=settings)
            await spend_6000(api)
            assert await mail_worker(store, None, None).run_once() == 1
            (done,) = (await deliveries(api, "delivered"))["items"]
    (mail,) = mx.mails
    assert mail.rcpt_tos == [TO]
    assert done["last_status_code"] == 250
    assert done["last_error"] == (
        "refused for some recipients: gone@example.com (550 5.1.1 no such mailbox)"
    )


async def test_a_refused_login_is_a_dead_letter_and_never_shows_the_password(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    names = mail_names(monkeypatch)
    with SmtpServer(starttls=pki.server, login=("ledger", "the-right-one")) as mx:
        async with ledger(clean_redis, monkeypatch, QUIET) as api, store_of(clean_redis) as store:
            await add_webhook(
                api, f"smtp://mail.test:{mx.port}", "email", secret=PASSWORD,
                email=email_settings(username="ledger"),
            )  # fmt: skip
            await spend_6000(api)
            assert await mail_worker(store, names, pki).run_once() == 1
            (dead,) = (await deliveries(api, "failed"))["items"]
    assert dead["attempts"] == 1 and dead["last_status_code"] == 535
    assert mx.mails == []
    assert PASSWORD not in json.dumps(dead) and PASSWORD not in caplog.text


# --- where an email webhook may point (SSRF) ---------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("smtp://127.0.0.1:25", "loopback"),
        ("smtp://10.0.0.5", "private"),
        ("smtps://169.254.169.254", "link-local"),
        ("smtp://[fd00::1]", "unique-local"),
        ("smtp://0x7f.1", "unusual IPv4 spelling"),
        ("smtp://inside.test", "resolves to 10.1.2.3, a private (RFC 1918) address"),
        ("smtp://user:pw@public.test", "credentials"),
    ],
)
async def test_registration_refuses_unsafe_smtp_servers(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch, url: str, why: str
) -> None:
    names = Names({"inside.test": [["10.1.2.3"]], "public.test": [[PUBLIC_V4]]})
    monkeypatch.setattr(targets, "resolver", names)
    async with strict_ledger(clean_redis, monkeypatch) as api, api.client() as c:
        r = await c.post(
            "/v1/webhooks", json={"url": url, "format": "email", "email": email_settings()}
        )
        assert r.status_code == 422, r.text
        problem = r.json()
        assert problem["errors"][0]["field"] == "$.url", problem
        assert why in problem["errors"][0]["reason"], problem
        assert (await c.get("/v1/webhooks")).json() == []


@contextlib.contextmanager
def counting_listener() -> Iterator[tuple[int, list[int]]]:
    """A TCP listener on loopback that counts the connections it accepts."""
    accepted: list[int] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1]), accepted
    finally:
        stop.set()
        thread.join(timeout=10)
        server.close()


async def test_dns_rebinding_to_loopback_at_delivery_sends_nothing(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Public when registered, loopback when sent: the attempt is refused before any
    connection, and the address is checked on every attempt."""
    monkeypatch.setattr(targets, "resolver", Names({"mail.test": [[PUBLIC_V4]]}))
    with counting_listener() as (port, accepted):
        async with (
            strict_ledger(clean_redis, monkeypatch) as api,
            store_of(clean_redis) as store,
        ):
            await add_webhook(api, f"smtp://mail.test:{port}", "email", email=email_settings())
            await spend_6000(api)
            rebound = Names({"mail.test": [["127.0.0.1"]]})
            worker = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, resolver=rebound, sealer=TEST_SEALER
            )
            assert [await worker.run_once() for _ in range(2)] == [1, 1]
            (pending,) = (await deliveries(api, "pending"))["items"]
    assert accepted == []
    assert pending["last_error"] == (
        "target refused: mail.test resolves to 127.0.0.1, a loopback address"
    )
    assert rebound.asked == ["mail.test", "mail.test"]
    assert ipaddress.ip_address(PUBLIC_V4).is_global
