"""Webhook target safety (SSRF): which URLs and addresses the ledger sends to, and how.

The rules are in `service/webhooks/targets/checks.py`. Everything here runs for real: the ledger
over HTTP, receivers on loopback (plain HTTP, or TLS with a certificate from a CA made for the
test with the ``openssl`` command), and the delivery worker. The one thing replaced is the
resolver, through its seam (`service.webhooks.targets.checks.resolver`, or a worker's `resolver=`):
a plain function answering the addresses a test chooses, since no test can own public DNS.
The ``.test`` names used resolve nowhere else (RFC 6761), so a request that reaches a
receiver under such a name went to the address the seam gave, not to a lookup of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainledger.config import Settings, delivery_settings
from trainledger.webhooks.delivery.config import DeliveryConfig
from trainledger.webhooks.delivery.worker import DeliveryWorker
from trainledger.webhooks.registry import check_target
from trainledger.webhooks.targets import checks as targets
from trainledger.webhooks.targets.checks import (
    AllowList,
    IPAddress,
    UnresolvedTarget,
    UnsafeTarget,
    inet_aton,
    refusal_reason,
    resolve_target,
)

from tests.api.test_budgets import this_month
from tests.api.test_ingest import post, put_card
from tests.api.test_webhooks import (
    PUBLIC_URL,
    QUIET,
    add_budget,
    delivered_count,
    deliveries,
    store_of,
    wait_until,
)
from tests.conftest import TEST_SEALER, Api, ServerThread, event, make_admin_token

PUBLIC_V4 = "93.184.215.14"  # a public address; nothing is ever sent to it (see `Names`)
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
# A worker driven by hand: every retry due at once.
BY_HAND = DeliveryConfig(max_attempts=3, base_delay_s=0, lease_s=10.0, timeout_s=5.0)


# --- the resolver seam ----------------------------------------------------------------------


class Names:
    """A resolver for the tests: each name answers its list of addresses, in turn (the last
    list repeats), and every question is recorded. Unknown names do not resolve."""

    def __init__(self, answers: dict[str, Sequence[Sequence[str]]]) -> None:
        self.answers = {name: [list(a) for a in lists] for name, lists in answers.items()}
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        lists = self.answers.get(host)
        if not lists:
            raise UnresolvedTarget(f"{host} does not resolve")
        current = lists.pop(0) if len(lists) > 1 else lists[0]
        return [ipaddress.ip_address(a) for a in current]


# --- a real receiver, plain or TLS ------------------------------------------------------------


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes


class Sink:
    """An HTTP(S) server on a loopback port that counts every TCP connection it accepts
    (whatever is or is not sent on it) and records every request. `answers[path]` queues
    (status, headers, body) answers, then it answers 200."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.connections = 0
        self.hits: list[Hit] = []
        self.answers: dict[str, list[tuple[int, dict[str, str], bytes]]] = {}
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                path = self.path.split("?", 1)[0]
                with sink._lock:
                    sink.hits.append(
                        Hit(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    queue = sink.answers.get(path)
                    status, extra, payload = queue.pop(0) if queue else (200, {}, b"ok")
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, addr = super().get_request()
                with sink._lock:
                    sink.connections += 1
                if sink.tls is not None:
                    sock.settimeout(5)
                    sock = sink.tls.wrap_socket(sock, server_side=True)
                return sock, addr

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def at(self, path: str) -> list[Hit]:
        with self._lock:
            return [h for h in self.hits if h.path.split("?", 1)[0] == path]


@dataclass
class Pki:
    server: ssl.SSLContext  # the receiver's: a certificate for receiver.test and rebind.test
    client: ssl.SSLContext  # the sender's: trusts the test CA only


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA and a server certificate made with the openssl command, for real TLS."""
    d = tmp_path_factory.mktemp("pki")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    try:
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=trainledger test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
        run("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=receiver.test")
        (d / "ext.cnf").write_text("subjectAltName=DNS:receiver.test,DNS:rebind.test\n")
        run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"openssl cannot make test certificates: {exc}")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(Path(d / "leaf.pem"), Path(d / "leaf.key"))
    client = ssl.create_default_context(cafile=str(d / "ca.pem"))
    return Pki(server, client)


# --- the ledger with chosen settings -----------------------------------------------------------


@contextlib.asynccontextmanager
async def ledger(
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    allowlist: tuple[str, ...] = (),
    config: DeliveryConfig = QUIET,
) -> AsyncIterator[Api]:
    settings = Settings(
        redis_url=redis_url,
        public_url=PUBLIC_URL,
        webhook_allowlist=allowlist,
        **delivery_settings(config),
    )
    server = ServerThread(redis_url, settings)
    await asyncio.to_thread(server.start)
    try:
        yield Api(server.base_url, await make_admin_token(redis_url), redis_url)
    finally:
        await asyncio.to_thread(server.stop)
        assert not server.thread.is_alive(), "the ledger did not stop"


async def register(api: Api, url: str, fmt: str = "standard", **extra: Any) -> Any:
    async with api.client() as c:
        return await c.post("/v1/webhooks", json={"url": url, "format": fmt, **extra})


async def an_alert(api: Api) -> None:
    """A budget and the spend that crosses its threshold: one alert to deliver."""
    await put_card(api)
    await add_budget(api)
    await post(api, [event("t1", "3", time=this_month())])


# --- the classifier ---------------------------------------------------------------------------

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "10.0.0.1": "private",
    "172.16.5.4": "private",
    "172.31.255.255": "private",
    "192.168.0.1": "private",
    "169.254.169.254": "link-local",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.254": "carrier-grade NAT",
    "0.0.0.0": "unspecified",
    "0.1.2.3": "unspecified",
    "224.0.0.251": "multicast",
    "239.255.255.250": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    "192.0.2.10": "documentation",
    "198.18.0.1": "benchmarking",
    "::": "unspecified",
    "::1": "loopback",
    "fc00::1": "unique-local",
    "fd12:3456::1": "unique-local",
    "fe80::1": "link-local",
    "febf::1": "link-local",
    "fec0::1": "site-local",
    "ff02::1": "multicast",
    "2001:db8::1": "documentation",
    "2001::1": "IETF",  # Teredo
    "::ffff:127.0.0.1": "IPv4-mapped form of a loopback",
    "::ffff:169.254.169.254": "IPv4-mapped form of a link-local",
    "::ffff:10.1.1.1": "IPv4-mapped form of a private",
    "64:ff9b::7f00:1": "NAT64 form of a loopback",
    "64:ff9b::a9fe:a9fe": "NAT64 form of a link-local",
    "64:ff9b:1::1": "NAT64",
    "2002:7f00:1::": "6to4 form of a loopback",
    "2002:c0a8:101::1": "6to4 form of a private",
    "::7f00:1": "reserved",  # the deprecated IPv4-compatible form
    "100::1": "discard",
}
PUBLIC = ["8.8.8.8", "1.1.1.1", PUBLIC_V4, "2606:4700:4700::1111", PUBLIC_V6, "::ffff:8.8.8.8",
          "64:ff9b::808:808", "2002:808:808::1"]  # fmt: skip


@pytest.mark.parametrize(("address", "why"), sorted(REFUSED.items()))
def test_non_public_addresses_are_refused_with_the_reason(address: str, why: str) -> None:
    reason = refusal_reason(ipaddress.ip_address(address))
    assert reason is not None and why in reason, (address, reason)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is None


# The ranges the issue names, each refused wherever an address falls inside it.
NAMED_V4 = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
            "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4"]  # fmt: skip
NAMED_V6 = ["::1/128", "fc00::/7", "fe80::/10", "ff00::/8"]  # mapped forms: the v4 tests


@given(st.sampled_from(NAMED_V4), st.integers(min_value=0, max_value=2**32 - 1))
def test_every_address_in_a_named_v4_range_is_refused_in_every_form(
    network: str, offset: int
) -> None:
    net = ipaddress.IPv4Network(network)
    addr = net[offset % net.num_addresses]
    assert refusal_reason(addr) is not None
    mapped = ipaddress.IPv6Address(f"::ffff:{addr}")
    nat64 = ipaddress.IPv6Address((0x64FF9B << 96) | int(addr))
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(addr) << 80) | 1)
    for form in (mapped, nat64, sixtofour):
        assert refusal_reason(form) is not None, form


@given(st.sampled_from(NAMED_V6), st.integers(min_value=0, max_value=2**128 - 1))
def test_every_address_in_a_named_v6_range_is_refused(network: str, offset: int) -> None:
    net = ipaddress.IPv6Network(network)
    assert refusal_reason(net[offset % net.num_addresses]) is not None


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_ipv4_verdicts_agree_with_the_standard_library_and_every_embedding(value: int) -> None:
    addr = ipaddress.IPv4Address(value)
    verdict = refusal_reason(addr)
    if verdict is None:  # never looser than the standard library
        assert addr.is_global and not addr.is_multicast and not addr.is_reserved
    # The IPv6 forms that reach the same IPv4 host get the same verdict.
    mapped = ipaddress.IPv6Address(f"::ffff:{addr}")
    nat64 = ipaddress.IPv6Address((0x64FF9B << 96) | value)
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (value << 80))
    for form in (mapped, nat64, sixtofour):
        assert (refusal_reason(form) is None) == (verdict is None), form


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_ipv6_passes_only_global_unicast(value: int) -> None:
    addr = ipaddress.IPv6Address(value)
    if refusal_reason(addr) is None and targets.embedded_ipv4(addr) is None:
        assert addr in ipaddress.IPv6Network("2000::/3") and addr.is_global


def _spell(value: int, parts: int, styles: list[str]) -> str:
    """`value` written in `parts` inet_aton parts, each in decimal, octal or hex."""
    chunks = [(value >> (8 * (3 - i))) & 0xFF for i in range(parts - 1)]
    chunks.append(value & ((1 << (8 * (5 - parts))) - 1))
    out = []
    for chunk, style in zip(chunks, styles, strict=False):
        out.append({"dec": str(chunk), "oct": "0" + format(chunk, "o"), "hex": hex(chunk)}[style])
    return ".".join(out)


@given(
    st.integers(min_value=0, max_value=2**32 - 1),
    st.integers(min_value=1, max_value=4),
    st.lists(st.sampled_from(["dec", "oct", "hex"]), min_size=4, max_size=4),
)
def test_odd_ipv4_spellings_mean_what_the_c_library_says_and_are_refused(
    value: int, parts: int, styles: list[str]
) -> None:
    spelled = _spell(value, parts, styles)
    expected = ipaddress.IPv4Address(socket.inet_aton(spelled))  # the C library's reading
    assert inet_aton(spelled) == expected
    if spelled == str(expected):
        return  # the canonical dotted quad is an address like any other
    with pytest.raises(UnsafeTarget, match="unusual IPv4 spelling"):
        check_target(f"https://{spelled}/hook", ("0.0.0.0/0",))  # even if allow-listed


# --- URLs, without the network ------------------------------------------------------------------


BAD_URLS = {
    "http://public.test/hook": "only https",
    "ftp://public.test/hook": "only http and https",
    "file:///etc/passwd": "only http and https",
    "gopher://127.0.0.1:6379/_FLUSHALL": "only http and https",
    "https:///nohost": "no host",
    "https://user:pw@public.test/": "credentials",
    "https://public.test\\@127.0.0.1/": "backslash",
    "https://public.test /x": "whitespace",
    "https://127.0.0.1/": "loopback",
    "https://127.0.0.1:6379/": "loopback",
    "https://169.254.169.254/latest/meta-data/": "link-local",
    "https://10.1.2.3/": "private",
    "https://192.168.1.1/": "private",
    "https://100.64.0.1/": "carrier-grade NAT",
    "https://0.0.0.0/": "unspecified",
    "https://224.0.0.1/": "multicast",
    "https://[::1]/": "loopback",
    "https://[::]/": "unspecified",
    "https://[fd00::1]/": "unique-local",
    "https://[fe80::1]/": "link-local",
    "https://[fe80::1%25eth0]/": "zone id",
    "https://[::ffff:169.254.169.254]/": "IPv4-mapped form of a link-local",
    "https://[::ffff:7f00:1]/": "IPv4-mapped form of a loopback",
    "https://[64:ff9b::a00:1]/": "NAT64 form of a private",
    "https://[2002:a9fe:a9fe::]/": "6to4 form of a link-local",
    "https://2130706433/": "unusual IPv4 spelling '2130706433' (it means 127.0.0.1)",
    "https://0x7f.1/": "unusual IPv4 spelling",
    "https://0x7f000001/": "unusual IPv4 spelling",
    "https://017700000001/": "unusual IPv4 spelling",
    "https://0177.0.0.1/": "unusual IPv4 spelling",
    "https://127.1/": "unusual IPv4 spelling",
    "https://169.254.43518/": "unusual IPv4 spelling '169.254.43518' (it means 169.254.169.254)",
    "https://1.2.3.4.5/": "neither a valid IPv4 address nor a host name",
    "https://bad..name/": "not a valid host name",
    "https://-bad.test/": "not a valid host name",
}


@pytest.mark.parametrize(("url", "why"), sorted(BAD_URLS.items()))
def test_bad_urls_are_refused_as_written(url: str, why: str) -> None:
    with pytest.raises(UnsafeTarget) as caught:
        check_target(url)
    assert why in str(caught.value)


def test_the_allow_list() -> None:
    allow = AllowList.parse(
        ["Receiver.Test.", "10.0.0.0/8", "192.168.7.7", "fd00::/8", " ", "[::1]"]
    )
    assert allow.hosts == {"receiver.test"}
    # http, and non-public addresses, for listed hosts and addresses only.
    for ok in ("http://receiver.test:8080/x", "http://RECEIVER.test./x", "http://10.9.8.7/x",
               "http://192.168.7.7/", "http://[fd00::5]/", "http://[::1]:9/",
               "http://[::ffff:10.0.0.1]/", "https://10.0.0.1/"):  # fmt: skip
        check_target(ok, allow)
    for bad, why in (
        ("http://receiver.test.evil.test/", "only https"),
        ("http://sub.receiver.test/", "only https"),  # exact names: no subdomains
        ("http://192.168.7.8/", "only https"),
        ("https://192.168.7.8/", "private"),
        ("https://11.0.0.1:99999/", "port"),
        ("https://receiver.test:0/", "port"),
    ):
        with pytest.raises(UnsafeTarget, match=why):
            check_target(bad, allow)
    for entry in ("not a host!", "10.0.0.0/33", "0x7f.1", "a/b"):
        with pytest.raises(ValueError, match="allow-list entry"):
            AllowList.parse([entry])


def test_the_allow_list_setting_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINLEDGER_WEBHOOK_ALLOWLIST", " hooks.internal , 10.0.0.0/8,,fd00::/8")
    assert Settings.from_env().webhook_allowlist == ("hooks.internal", "10.0.0.0/8", "fd00::/8")
    monkeypatch.setenv("TRAINLEDGER_WEBHOOK_ALLOWLIST", "")
    assert Settings.from_env().webhook_allowlist == ()
    monkeypatch.setenv("TRAINLEDGER_WEBHOOK_ALLOWLIST", "10.0.0.0/99")
    with pytest.raises(SystemExit, match="TRAINLEDGER_WEBHOOK_ALLOWLIST"):
        Settings.from_env()


async def test_every_resolved_address_is_checked() -> None:
    names = Names({
        "public.test": [[PUBLIC_V4, PUBLIC_V6]],
        "mixed.test": [[PUBLIC_V4, "10.0.0.1"]],  # one bad answer among good ones
        "metadata.test": [["169.254.169.254"]],
        "mapped.test": [["::ffff:127.0.0.1"]],
        "internal.test": [["10.2.3.4"]],
    })  # fmt: skip

    async def resolve(url: str, allow: AllowList | None = None) -> list[IPAddress]:
        return await resolve_target(check_target(url, allow or AllowList()), allow, names)

    assert [str(a) for a in await resolve("https://public.test/")] == [PUBLIC_V4, PUBLIC_V6]
    for url, why in (
        ("https://mixed.test/", "mixed.test resolves to 10.0.0.1, a private"),
        ("https://metadata.test/", "resolves to 169.254.169.254, a link-local"),
        ("https://mapped.test/", "IPv4-mapped form of a loopback"),
    ):
        with pytest.raises(UnsafeTarget, match=why):
            await resolve(url)
    with pytest.raises(UnresolvedTarget):
        await resolve("https://nowhere.test/")
    # A listed network admits its addresses; a listed name admits wherever it points.
    net = AllowList.parse(["10.0.0.0/8"])
    assert [str(a) for a in await resolve("https://internal.test/", net)] == ["10.2.3.4"]
    assert len(await resolve("https://mixed.test/", net)) == 2
    with pytest.raises(UnsafeTarget, match="link-local"):
        await resolve("https://metadata.test/", net)
    named = AllowList.parse(["metadata.test"])
    assert [str(a) for a in await resolve("http://metadata.test/", named)] == ["169.254.169.254"]


# --- registration over HTTP ---------------------------------------------------------------------


REGISTRATION_REFUSED = {
    **{url: why for url, why in BAD_URLS.items() if "://" in url and not url.startswith("file")},
    "https://localhost/hook": "localhost resolves to 127.0.0.1, a loopback address",
    "https://metadata.test/latest": "metadata.test resolves to 169.254.169.254, a link-local",
    "https://mixed.test/hook": "mixed.test resolves to 10.0.0.1, a private",
    "https://ula.test/hook": "resolves to fd00::1, a unique-local",
    "https://cgnat.test/hook": "resolves to 100.64.1.1, a shared (carrier-grade NAT",
    "https://internal.test/hook": "resolves to 10.2.3.4, a private",
}
REGISTRATION_NAMES = {
    "localhost": [["127.0.0.1", "::1"]],
    "public.test": [[PUBLIC_V4]],
    "metadata.test": [["169.254.169.254"]],
    "mixed.test": [[PUBLIC_V4, "10.0.0.1"]],
    "ula.test": [["fd00::1"]],
    "cgnat.test": [["100.64.1.1"]],
    "internal.test": [["10.2.3.4"]],
    "receiver.test": [["127.0.0.1"]],
}


async def test_registration_refuses_unsafe_targets_with_422_naming_the_url(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = Names(REGISTRATION_NAMES)
    monkeypatch.setattr(targets, "resolver", names)
    async with ledger(clean_redis, monkeypatch) as api:
        for url, why in sorted(REGISTRATION_REFUSED.items()):
            r = await register(api, url)
            assert r.status_code == 422, (url, r.text)
            problem = r.json()
            assert r.headers["content-type"].startswith("application/problem+json")
            assert problem["errors"] == [
                {"field": "$.url", "reason": problem["errors"][0]["reason"]}
            ]
            assert why in problem["errors"][0]["reason"], (url, problem)
        # Public names and addresses are fine; so is a name that does not resolve yet
        # (every delivery resolves and checks it again).
        for url in ("https://public.test/hook", "https://8.8.8.8/hook", "https://later.test/h"):
            r = await register(api, url)
            assert r.status_code == 201, (url, r.text)
        async with api.client() as c:
            assert len((await c.get("/v1/webhooks")).json()) == 3
    assert "metadata.test" in names.asked and "public.test" in names.asked


async def test_registration_with_an_allow_list(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(targets, "resolver", Names(REGISTRATION_NAMES))
    allow = ("receiver.test", "10.0.0.0/8")
    async with ledger(clean_redis, monkeypatch, allow) as api:
        for url in ("http://receiver.test:8080/hook", "http://10.1.2.3/hook",
                    "https://internal.test/hook", "https://mixed.test/hook"):  # fmt: skip
            r = await register(api, url)
            assert r.status_code == 201, (url, r.text)
        for url, why in (
            ("http://internal.test/hook", "only https is allowed for internal.test"),
            ("http://public.test/hook", "only https"),
            ("https://192.168.1.1/hook", "private"),
            ("https://metadata.test/", "link-local"),
            ("https://localhost/", "loopback"),
        ):
            r = await register(api, url)
            assert r.status_code == 422 and why in r.json()["errors"][0]["reason"], r.text


# --- delivery ---------------------------------------------------------------------------------


async def test_an_allow_listed_loopback_receiver_gets_http_deliveries(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's own worker, with the allow-list from its Settings and the module's resolver:
    http to an allow-listed name (pinned to the address the resolver gave) and to an
    allow-listed address both work."""
    fast = DeliveryConfig(max_attempts=5, base_delay_s=0.05, max_delay_s=0.2, lease_s=2.0,
                          poll_s=0.05, claim_idle_s=1.0, timeout_s=1.0)  # fmt: skip
    names = Names({"receiver.test": [["127.0.0.1"]]})
    monkeypatch.setattr(targets, "resolver", names)
    with Sink() as rx:
        async with ledger(clean_redis, monkeypatch, ("receiver.test", "127.0.0.1"), fast) as api:
            for url in (
                f"http://receiver.test:{rx.port}/by-name",
                f"http://127.0.0.1:{rx.port}/by-ip",
            ):
                assert (await register(api, url)).status_code == 201
            await an_alert(api)

            async def both() -> bool:
                return await delivered_count(api) == 2

            await wait_until(both, "both deliveries")
    (by_name,) = rx.at("/by-name")
    (by_ip,) = rx.at("/by-ip")
    # Sent to the address, under the original name.
    assert by_name.headers["host"] == f"receiver.test:{rx.port}"
    assert by_ip.headers["host"] == f"127.0.0.1:{rx.port}"
    assert by_name.headers["webhook-id"] == by_ip.headers["webhook-id"]
    assert names.asked.count("receiver.test") >= 2  # at registration and before the send


async def test_dns_rebinding_public_at_registration_loopback_at_delivery_sends_nothing(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch, pki: Pki
) -> None:
    """The name answers a public address when registered, then 127.0.0.1, where a TLS
    receiver with a valid certificate for that very name listens: a sender that looked the
    name up again itself, or skipped the check, would deliver. None arrives, not even a
    connection; the attempts fail with the reason and end as a dead letter."""
    names = Names({"rebind.test": [[PUBLIC_V4], ["127.0.0.1"]]})
    monkeypatch.setattr(targets, "resolver", names)
    with Sink(pki.server) as rx:
        async with ledger(clean_redis, monkeypatch) as api, store_of(clean_redis) as store:
            r = await register(api, f"https://rebind.test:{rx.port}/hook")
            assert r.status_code == 201, r.text
            await an_alert(api)
            worker = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, ssl_context=pki.client, sealer=TEST_SEALER
            )
            assert [await worker.run_once() for _ in range(4)] == [1, 1, 1, 0]
            (dead,) = (await deliveries(api, "failed"))["items"]
            assert dead["attempts"] == 3 and dead["last_status_code"] is None
            assert dead["last_error"] == (
                "target refused: rebind.test resolves to 127.0.0.1, a loopback address"
            )
    assert rx.connections == 0 and rx.hits == []
    assert names.asked == ["rebind.test"] * 4  # registration, then each attempt


async def test_tls_is_pinned_to_the_checked_address_with_the_name_verified(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch, pki: Pki
) -> None:
    """The control for the test above: with 127.0.0.1 allow-listed the same set-up
    delivers, over TLS to the checked address, with SNI and certificate verification for
    the name (no system resolver knows rebind.test). The same receiver under a name its
    certificate does not cover is refused by certificate verification."""
    registering = Names({"rebind.test": [[PUBLIC_V4]], "other.test": [[PUBLIC_V4]]})
    monkeypatch.setattr(targets, "resolver", registering)
    with Sink(pki.server) as rx:
        async with (
            ledger(clean_redis, monkeypatch, ("127.0.0.1",)) as api,
            store_of(clean_redis) as store,
        ):
            for url in (f"https://rebind.test:{rx.port}/ok", f"https://other.test:{rx.port}/no"):
                assert (await register(api, url)).status_code == 201
            await an_alert(api)
            # Each name answers 127.0.0.1 once, then a documentation address nothing listens
            # on: had anything looked the name up a second time, the send would fail.
            names = Names(
                {
                    "rebind.test": [["127.0.0.1"], ["192.0.2.1"]],
                    "other.test": [["127.0.0.1"], ["192.0.2.1"]],
                }
            )
            worker = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, allowlist=("127.0.0.1",), resolver=names,
                ssl_context=pki.client,
                sealer=TEST_SEALER,
            )  # fmt: skip
            assert await worker.run_once() == 2
            assert sorted(names.asked) == ["other.test", "rebind.test"]
            (delivered,) = (await deliveries(api, "delivered"))["items"]
            (pending,) = (await deliveries(api, "pending"))["items"]
    assert "certificate" in pending["last_error"].lower(), pending["last_error"]
    assert delivered["webhook_id"] != pending["webhook_id"]
    (ok,) = rx.at("/ok")
    assert ok.headers["host"] == f"rebind.test:{rx.port}"
    assert rx.at("/no") == [] and rx.connections == 2  # the refused one got only a handshake


async def test_redirects_are_never_followed(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Sink() as rx:
        rx.answers = {
            "/metadata": [(302, {"location": "http://169.254.169.254/latest/meta-data/"}, b"")],
            "/moved": [(307, {"location": f"http://127.0.0.1:{rx.port}/landing"}, b"")],
        }
        async with (
            ledger(clean_redis, monkeypatch, ("127.0.0.1",)) as api,
            store_of(clean_redis) as store,
        ):
            for path in ("/metadata", "/moved"):
                assert (await register(api, f"http://127.0.0.1:{rx.port}{path}")).status_code == 201
            await an_alert(api)
            worker = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, allowlist=("127.0.0.1",), sealer=TEST_SEALER
            )
            assert await worker.run_once() == 2
            errors = {
                d["last_status_code"]: d["last_error"] for d in (await deliveries(api))["items"]
            }
    assert errors == {
        302: "HTTP 302: redirect not followed (to http://169.254.169.254/latest/meta-data/)",
        307: f"HTTP 307: redirect not followed (to http://127.0.0.1:{rx.port}/landing)",
    }
    assert rx.at("/landing") == [] and len(rx.hits) == 2


async def test_https_only_is_enforced_again_when_sending(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A webhook registered while its host was allow-listed, sent after the allow-list
    changed: refused before anything is sent, and retried as usual."""
    monkeypatch.setattr(targets, "resolver", Names({"receiver.test": [["127.0.0.1"]]}))
    with Sink() as rx:
        async with (
            ledger(clean_redis, monkeypatch, ("receiver.test",)) as api,
            store_of(clean_redis) as store,
        ):
            assert (await register(api, f"http://receiver.test:{rx.port}/x")).status_code == 201
            await an_alert(api)
            # This worker's allow-list has the address but not the name: http is refused.
            worker = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, allowlist=("127.0.0.1",), sealer=TEST_SEALER
            )
            assert await worker.run_once() == 1
            (pending,) = (await deliveries(api, "pending"))["items"]
            assert pending["attempts"] == 1
            assert pending["last_error"] == (
                "target refused: only https is allowed for receiver.test "
                "(http needs the host on the allow-list)"
            )
            assert rx.connections == 0
            # With the name listed again it is delivered, on the retry.
            worker = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, allowlist=("receiver.test",), sealer=TEST_SEALER
            )
            assert await worker.run_once() == 1
            assert await delivered_count(api) == 1
    assert len(rx.at("/x")) == 1


async def test_a_name_that_stops_resolving_fails_the_attempt_and_is_retried(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = Names({"receiver.test": [["127.0.0.1"], []]})  # resolves once, then no more
    monkeypatch.setattr(targets, "resolver", names)
    with Sink() as rx:
        async with (
            ledger(clean_redis, monkeypatch, ("receiver.test",)) as api,
            store_of(clean_redis) as store,
        ):
            assert (await register(api, f"http://receiver.test:{rx.port}/x")).status_code == 201
            await an_alert(api)
            worker = DeliveryWorker(
                store, BY_HAND, PUBLIC_URL, allowlist=("receiver.test",), sealer=TEST_SEALER
            )
            assert [await worker.run_once() for _ in range(4)] == [1, 1, 1, 0]
            (dead,) = (await deliveries(api, "failed"))["items"]
    assert dead["attempts"] == 3
    assert dead["last_error"] == "target not resolved: receiver.test does not resolve"
    assert rx.connections == 0


# --- secrets are never echoed or logged -------------------------------------------------------


@contextlib.contextmanager
def captured_logs() -> Iterator[list[str]]:
    """Every log record of the process, formatted with its arguments, at DEBUG."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(f"{record.name} {record.levelname} {record.getMessage()}")

    root = logging.getLogger()
    handler, level = Keep(logging.DEBUG), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_secrets_are_never_returned_or_logged(
    clean_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    slack_secret = "slack-path-secret-7Q2"
    query_secret = "std-query-secret-9K4"
    ding_token = "ding-token-secret-3Z8"
    ding_secret = "SECding0123456789abcdef0123456789ab"
    echo = DeliveryConfig(max_attempts=1, base_delay_s=0, lease_s=10.0, timeout_s=5.0)
    with Sink() as rx, contextlib.ExitStack() as stack:
        base = f"http://127.0.0.1:{rx.port}"
        urls = {
            "slack": f"{base}/services/T0/B0/{slack_secret}",
            "standard": f"{base}/std?token={query_secret}",
            "dingtalk": f"{base}/robot/send?access_token={ding_token}",
        }
        # Each receiver answers 500 with a body quoting the URL it was sent (tokens too).
        for url in urls.values():
            path = url[len(base) :].split("?", 1)[0]
            rx.answers[path] = [(500, {}, f"bad request to {url}".encode())]
        async with (
            ledger(clean_redis, monkeypatch, ("127.0.0.1",)) as api,
            store_of(clean_redis) as store,
        ):
            # Attached once the app has started (its logging set-up replaces the root
            # logger's handlers), at DEBUG: everything, httpx and httpcore included.
            capture = stack.enter_context(captured_logs())
            answers = []
            for fmt, url in urls.items():
                extra = {"secret": ding_secret} if fmt == "dingtalk" else {}
                r = await register(api, url, fmt, **extra)
                assert r.status_code == 201, r.text
                answers.append(r.text)
            standard_secret = [a for a in answers if "whsec_" in a]
            await an_alert(api)
            worker = DeliveryWorker(
                store, echo, PUBLIC_URL, allowlist=("127.0.0.1",), sealer=TEST_SEALER
            )
            assert await worker.run_once() == 3
            async with api.client() as c:
                listed = (await c.get("/v1/webhooks")).text
            failed = await deliveries(api, "failed")
            assert failed["total"] == 3
            shown = str(failed)
    assert len(rx.hits) == 3  # they were sent, and answered with the secrets in the body
    assert all(slack_secret in h.path or "token=" in h.path for h in rx.hits)
    logged = "\n".join(capture)
    assert "registered" in logged and "failed for good" in logged  # the capture works
    for secret in (slack_secret, query_secret, ding_token, ding_secret):
        assert secret not in logged, secret
        assert secret not in listed and secret not in shown, secret
        assert all(secret not in a for a in answers), secret  # not even when registered
    assert len(standard_secret) == 1  # the generated signing secret is shown that once
    whsec = standard_secret[0].split('"secret":"', 1)[1].split('"', 1)[0]
    assert whsec not in logged and whsec not in listed and whsec not in shown
    assert "HTTP 500: bad request to" in shown  # the receiver's answer is kept, scrubbed


@pytest.fixture(autouse=True)
def _own_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from the system resolver (a test replacing it is undone after)."""
    monkeypatch.setattr(targets, "resolver", targets.system_resolver)
