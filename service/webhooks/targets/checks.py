"""Where a webhook may be sent: URL checks, address classification, resolving (SSRF).

A webhook URL is chosen by whoever registers it, and the ledger POSTs to it from inside the
network it runs in. Without care that is a server-side request forgery: a URL naming
``localhost``, ``169.254.169.254`` (the cloud metadata service) or a host on the private
network, or a public name whose DNS answer later changes to one of those, would make the
ledger send requests wherever the registrant likes. The rules:

* **Parse once, with httpx** (the sender's own parser), and refuse what parsers disagree on:
  credentials, backslashes, whitespace, IPv6 zone ids, and IPv4 addresses in any spelling
  but the dotted quad (``2130706433``, ``0x7f.1``, ``127.1``, ``0177.0.0.1`` all mean
  127.0.0.1 to ``inet_aton`` and to many resolvers).
* **https only**, unless the URL's host is on the allow-list (`AllowList`, from
  ``TRAINLEDGER_WEBHOOK_ALLOWLIST``: host names matched exactly and case-insensitively, IP
  addresses, CIDR networks).
* **Every resolved address must be global** (`refusal_reason`): loopback, RFC 1918 private,
  link-local (the metadata service), shared CGNAT space, unspecified, multicast, reserved,
  documentation and benchmarking ranges, IPv6 unique-local and link-local are refused, and
  so are the IPv4-mapped, NAT64 and 6to4 forms of those. An address inside an allow-listed
  network, or any address of an allow-listed host name, is accepted.
* **Checked when sent, and pinned** (`sending.send_pinned`): the host is resolved again before every
  attempt, every answer is checked, and the connection goes to the checked address itself
  (the request keeps the original ``Host`` header and, for TLS, the original name as SNI and
  for certificate verification). A second DNS answer (DNS rebinding) has nothing to swap.
  Each attempt uses a fresh connection, so a connection opened for one name and address is
  never reused for another name. Redirects are never followed: a 3xx is a failed attempt.
* **The same for SMTP** (`check_smtp_target`, `smtp.send_email`): an ``email`` webhook's
  server passes the same host and address rules, plain text only when allow-listed, and
  the connection goes to the checked address with the name verified by TLS.

Nothing here logs, and no error message carries the URL's path or query (they hold the chat
tools' secrets); `service.webhooks.redaction` removes them from text that came from elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import httpx
import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> the addresses the host resolves to. The seam tests replace.
Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]

ALLOWLIST_ENV: Final = "TRAINLEDGER_WEBHOOK_ALLOWLIST"
RESOLVE_TIMEOUT_S: Final = 5.0  # registration's lookup; a delivery uses its own timeout


class UnsafeTarget(ValueError):
    """A webhook URL the service must not send to (the message names the reason, never the
    URL's path or query)."""


class UnresolvedTarget(OSError):
    """The host did not resolve (now): not unsafe, but nothing can be sent."""


# --- address classification -------------------------------------------------------------

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# IANA's special-purpose registries, each with the reason given when refused. The standard
# library's `is_global` is consulted too, but its tables changed between patch releases, so
# the ranges the issue names are listed here explicitly.
_V4_RANGES: Final[tuple[tuple[ipaddress.IPv4Network, str], ...]] = (
    (_V4("0.0.0.0/8"), "an unspecified ('this network') address"),
    (_V4("10.0.0.0/8"), "a private (RFC 1918) address"),
    (_V4("100.64.0.0/10"), "a shared (carrier-grade NAT, RFC 6598) address"),
    (_V4("127.0.0.0/8"), "a loopback address"),
    (_V4("169.254.0.0/16"), "a link-local address (cloud metadata lives there)"),
    (_V4("172.16.0.0/12"), "a private (RFC 1918) address"),
    (_V4("192.0.0.0/24"), "an IETF protocol assignment address"),
    (_V4("192.0.2.0/24"), "a documentation address"),
    (_V4("192.88.99.0/24"), "a 6to4 relay anycast address"),
    (_V4("192.168.0.0/16"), "a private (RFC 1918) address"),
    (_V4("198.18.0.0/15"), "a benchmarking address"),
    (_V4("198.51.100.0/24"), "a documentation address"),
    (_V4("203.0.113.0/24"), "a documentation address"),
    (_V4("224.0.0.0/4"), "a multicast address"),
    (_V4("240.0.0.0/4"), "a reserved address"),
)
_V6_RANGES: Final[tuple[tuple[ipaddress.IPv6Network, str], ...]] = (
    (_V6("::/128"), "an unspecified address"),
    (_V6("::1/128"), "a loopback address"),
    (_V6("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_V6("100::/64"), "a discard-only address"),
    (_V6("2001::/23"), "an IETF protocol assignment address (Teredo, benchmarking, ORCHID)"),
    (_V6("2001:db8::/32"), "a documentation address"),
    (_V6("3fff::/20"), "a documentation address"),
    (_V6("5f00::/16"), "a segment-routing address"),
    (_V6("fc00::/7"), "a unique-local address"),
    (_V6("fe80::/10"), "a link-local address"),
    (_V6("fec0::/10"), "a site-local address"),
    (_V6("ff00::/8"), "a multicast address"),
)
_GLOBAL_UNICAST: Final = _V6("2000::/3")
_NAT64: Final = _V6("64:ff9b::/96")


def embedded_ipv4(addr: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address stands for, and how: IPv4-mapped (``::ffff:a.b.c.d``,
    which the socket layer connects to as IPv4), NAT64 (``64:ff9b::a.b.c.d``) or 6to4
    (``2002:aabb:ccdd::``)."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped, "IPv4-mapped"
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF), "NAT64"
    if addr.sixtofour is not None:
        return addr.sixtofour, "6to4"
    return None


def refusal_reason(addr: IPAddress) -> str | None:
    """Why a webhook must not be sent to `addr` (a phrase such as "a loopback address"), or
    None when it is a public, globally routable unicast address."""
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.scope_id:
            return "an address with a zone id"
        inner = embedded_ipv4(addr)
        if inner is not None:
            v4, how = inner
            reason = refusal_reason(v4)
            return f"the {how} form of {reason}" if reason is not None else None
        for net6, why in _V6_RANGES:
            if addr in net6:
                return why
        if addr not in _GLOBAL_UNICAST:
            return "a reserved address"  # outside 2000::/3 nothing is routable today
        if not addr.is_global:
            return "an address that is not globally routable"
        return None
    for net4, why in _V4_RANGES:
        if addr in net4:
            return why
    if not addr.is_global or addr.is_multicast or addr.is_reserved:
        return "an address that is not globally routable"
    return None


# --- host names and IPv4 spellings -------------------------------------------------------

_LABEL_RE: Final = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_NUMBER_RE: Final = re.compile(r"^(0[x][0-9a-f]*|[0-9]+)$")


def inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address `text` means to the C library's ``inet_aton`` (what most resolvers
    hand a numeric host to): one to four parts, each decimal, octal (leading 0) or hex (0x),
    the last filling the remaining bytes. None if it is not such a spelling."""
    parts = text.lower().split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        try:
            if part.startswith("0x"):
                values.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                values.append(int(part[1:], 8))
            elif part.isdigit():
                values.append(int(part))
            else:
                return None
        except ValueError:
            return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last
    for i, v in enumerate(head):
        value += v << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def normalize_host(host: str) -> str:
    """A host name as compared with the allow-list: lower-case ASCII (IDNA), no final dot."""
    host = host.strip().rstrip(".").lower()
    if not host.isascii():
        host = httpx.URL(f"http://{host}/").raw_host.decode("ascii")
    return host


def parse_literal(host: str) -> IPAddress | None:
    """`host` as an IP address if it is one in canonical spelling; `UnsafeTarget` if it is
    an IPv4 address in another spelling, or names no valid host at all."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in bare:
        if "%" in bare:
            raise UnsafeTarget("IPv6 zone ids are not allowed in webhook URLs")
        try:
            return ipaddress.IPv6Address(bare)
        except ValueError as exc:
            raise UnsafeTarget("the URL's host is not a valid IPv6 address") from exc
    try:
        return ipaddress.IPv4Address(bare)
    except ValueError:
        pass
    name = bare.rstrip(".").lower()
    last = name.rsplit(".", 1)[-1]
    if _NUMBER_RE.match(last):  # the WHATWG URL rule: a host ending in a number is IPv4
        means = inet_aton(name)
        if means is not None:
            raise UnsafeTarget(
                f"unusual IPv4 spelling {bare!r} (it means {means}); write the dotted quad"
            )
        raise UnsafeTarget("the URL's host is neither a valid IPv4 address nor a host name")
    return None


def _check_name(name: str) -> str:
    ascii_name = normalize_host(name)
    labels = ascii_name.split(".")
    if not ascii_name or len(ascii_name) > 253 or not all(_LABEL_RE.match(x) for x in labels):
        raise UnsafeTarget("the URL's host is not a valid host name")
    for label in labels:
        if label.startswith("xn--"):
            try:  # an A-label must decode (IDNA 2008), wherever it stands in the name
                idna.decode(label)
            except idna.IDNAError as exc:
                raise UnsafeTarget(
                    "the URL's host is not a valid internationalized domain name"
                ) from exc
    return ascii_name


# --- the allow-list -----------------------------------------------------------------------


@dataclass(frozen=True)
class AllowList:
    """Hosts and networks exempt from the https rule and the public-address rule."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Entries as in ``TRAINLEDGER_WEBHOOK_ALLOWLIST``: a host name, an IP address or a
        CIDR network. `ValueError` names a bad entry."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            bare = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
            try:
                networks.append(ipaddress.ip_network(bare, strict=False))
                continue
            except ValueError:
                pass
            try:
                if parse_literal(bare) is not None or "/" in bare:
                    raise UnsafeTarget("not a network")
                hosts.add(_check_name(bare))
            except (UnsafeTarget, UnicodeError, httpx.InvalidURL) as exc:
                raise ValueError(
                    f"webhook allow-list entry {entry!r} is not a host name, IP address or "
                    "CIDR network"
                ) from exc
        return cls(frozenset(hosts), tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.hosts or self.networks)

    def address_allowed(self, addr: IPAddress) -> bool:
        candidates: list[IPAddress] = [addr]
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            candidates.append(addr.ipv4_mapped)  # ::ffff:10.0.0.1 is 10.0.0.1 on the wire
        return any(
            a in net for a in candidates for net in self.networks if a.version == net.version
        )

    def host_allowed(self, target: Target) -> bool:
        """Whether the URL's host itself is listed (by name, or as an address inside a
        listed network)."""
        if target.ip is not None:
            return self.address_allowed(target.ip)
        return target.host in self.hosts


def parse_allowlist_env(raw: str) -> tuple[str, ...]:
    """``TRAINLEDGER_WEBHOOK_ALLOWLIST``: comma-separated entries, checked (`ValueError`)."""
    entries = tuple(e.strip() for e in raw.split(",") if e.strip())
    AllowList.parse(entries)
    return entries


# --- targets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A checked webhook URL: scheme, host (IDNA ASCII, lower-case, no final dot, or the
    canonical address), port, and the address when the host is a literal one."""

    url: str
    scheme: str
    host: str
    port: int
    ip: IPAddress | None


def check_target(url: str, allow: AllowList | None = None) -> Target:
    """Raise `UnsafeTarget` unless `url` may be a webhook target as written (without looking
    it up: `resolve_target` does that). A literal address must be public unless allowed;
    http is allowed only for an allow-listed host."""
    try:
        return _check_target(url, allow or AllowList())
    except UnicodeError as exc:  # idna.IDNAError: a malformed A-label ("xn--a") or U-label
        raise UnsafeTarget("the URL's host is not a valid internationalized domain name") from exc


def _check_target(url: str, allow: AllowList) -> Target:
    if any(ch.isspace() or ord(ch) < 0x20 or ch == "\\" for ch in url):
        raise UnsafeTarget("the URL contains whitespace, control characters or a backslash")
    try:
        split = urlsplit(url)
    except ValueError as exc:
        raise UnsafeTarget("not a valid URL") from exc
    if split.scheme.lower() not in ("http", "https"):
        raise UnsafeTarget("only http and https URLs are allowed")
    if split.username is not None or split.password is not None:
        raise UnsafeTarget("credentials in the URL are not allowed")
    if split.hostname:
        parse_literal(split.hostname)  # names odd IPv4 spellings before httpx's own error
    try:
        port_given = split.port
    except ValueError as exc:
        raise UnsafeTarget("the URL's port is not a number from 1 to 65535") from exc
    if port_given == 0:
        raise UnsafeTarget("the URL's port is not a number from 1 to 65535")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise UnsafeTarget("not a valid URL") from exc
    scheme = parsed.scheme.lower()
    if not parsed.host:
        raise UnsafeTarget("the URL has no host")
    if parsed.userinfo:
        raise UnsafeTarget("credentials in the URL are not allowed")
    ip = parse_literal(parsed.host)
    host = ip.compressed if ip is not None else _check_name(parsed.raw_host.decode("ascii"))
    port = parsed.port or (443 if scheme == "https" else 80)
    target = Target(url=url, scheme=scheme, host=host, port=port, ip=ip)
    listed = allow.host_allowed(target)
    if scheme != "https" and not listed:
        raise UnsafeTarget(
            f"only https is allowed for {host} (http needs the host on the allow-list)"
        )
    if ip is not None and not listed:
        reason = refusal_reason(ip)
        if reason is not None:
            raise UnsafeTarget(f"{ip} is {reason}")
    return target


SMTP_PORTS: Final = {"smtp": 587, "smtps": 465}


def check_smtp_target(url: str, allow: AllowList | None = None, tls: str = "") -> Target:
    """`check_target` for an ``email`` webhook's server, ``smtp://host[:port]`` (STARTTLS,
    port 587) or ``smtps://host[:port]`` (implicit TLS, 465): the same host and address rules;
    no credentials, path or query; and plain text (`tls` "none") only to an allow-listed host,
    as http is. Resolving and pinned sending are as for the HTTP formats."""
    allow = allow or AllowList()
    if any(ch.isspace() or ord(ch) < 0x20 or ch == "\\" for ch in url):
        raise UnsafeTarget("the URL contains whitespace, control characters or a backslash")
    try:
        split = urlsplit(url)
        port_given = split.port
    except ValueError as exc:
        raise UnsafeTarget("not a valid smtp:// or smtps:// URL (host and port)") from exc
    scheme = split.scheme.lower()
    if scheme not in SMTP_PORTS:
        raise UnsafeTarget("an email webhook's URL must be smtp://host[:port] or smtps://…")
    if split.username is not None or split.password is not None:
        raise UnsafeTarget("credentials in the URL are not allowed (use username and secret)")
    if split.path not in ("", "/") or split.query or split.fragment:
        raise UnsafeTarget("an smtp(s) URL names only the host and port")
    if not split.hostname or port_given == 0:
        raise UnsafeTarget("the URL has no host, or a port that is not from 1 to 65535")
    try:
        ip = parse_literal(split.hostname)
        host = ip.compressed if ip is not None else _check_name(split.hostname)
    except UnicodeError as exc:
        raise UnsafeTarget("the URL's host is not a valid internationalized domain name") from exc
    default_port = SMTP_PORTS["smtps" if tls == "implicit" else scheme]
    target = Target(url, scheme, host, port_given or default_port, ip)
    listed = allow.host_allowed(target)
    if scheme == "smtps" and tls not in ("", "implicit"):
        raise UnsafeTarget(f"smtps:// is implicit TLS; tls {tls!r} needs smtp://")
    if tls == "none" and not listed:
        raise UnsafeTarget(f"plain-text SMTP is allowed only for an allow-listed host, not {host}")
    if ip is not None and not listed:
        reason = refusal_reason(ip)
        if reason is not None:
            raise UnsafeTarget(f"{ip} is {reason}")
    return target


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The operating system's resolver (``getaddrinfo``), off the event loop."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UnresolvedTarget(f"{host} does not resolve ({exc.strerror})") from exc
    out: list[IPAddress] = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        text = str(sockaddr[0])
        if family == socket.AF_INET6 and len(sockaddr) >= 4 and sockaddr[3]:
            text = f"{text.split('%')[0]}%{sockaddr[3]}"  # keep the zone: it is refused
        addr = ipaddress.ip_address(text)
        if addr not in out:
            out.append(addr)
    return out


# The resolver used when none is passed in. Tests replace it (monkeypatch) with a function
# answering chosen addresses; everything here looks it up at call time.
resolver: Resolver = system_resolver


async def resolve_target(
    target: Target, allow: AllowList | None = None, using: Resolver | None = None
) -> list[IPAddress]:
    """The addresses to connect to, every one of them checked. `UnsafeTarget` if any answer
    is refused (one bad answer among good ones is how rebinding attacks hide), and
    `UnresolvedTarget` if there is no answer."""
    allow = allow or AllowList()
    if target.ip is not None:
        if refusal_reason(target.ip) is not None and not allow.host_allowed(target):
            raise UnsafeTarget(f"{target.ip} is {refusal_reason(target.ip)}")
        return [target.ip]
    lookup = using or resolver
    try:
        answers = list(await lookup(target.host, target.port))
    except UnresolvedTarget:
        raise
    except OSError as exc:
        raise UnresolvedTarget(f"{target.host} does not resolve ({exc})") from exc
    if not answers:
        raise UnresolvedTarget(f"{target.host} does not resolve")
    if target.host in allow.hosts:
        return answers  # the operator named this host: wherever it points is intended
    for addr in answers:
        reason = refusal_reason(addr)
        if reason is not None and not allow.address_allowed(addr):
            raise UnsafeTarget(f"{target.host} resolves to {addr}, {reason}")
    return answers
