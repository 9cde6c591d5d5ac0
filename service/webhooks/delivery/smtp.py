"""Sending an ``email`` webhook's message over SMTP (aiosmtplib), to an address that was
checked, never to what a resolver says later (the SMTP half of `service.webhooks.delivery.sending`).

The server's host passes the webhook target rules (`targets.check_smtp_target`) and is
resolved again before every attempt, every answer checked; the TCP connection is opened to
a checked address and handed to the SMTP client, which verifies the server's certificate for
the name in the URL (implicit TLS from the first byte, or STARTTLS, which the server must
offer). AUTH happens only after that, with the webhook's username and sealed password.

An attempt's outcome: delivered (the server accepted the message for at least one
recipient), a failure worth retrying (no connection, a timeout, a 4xx reply: RFC 5321's
transient negative completion), or a permanent one (a 5xx reply: a refused login, sender
or recipient), which makes the delivery a dead letter at once; it can be redelivered over
the API once the cause is fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage

import aiosmtplib

from ..formats.mail import EmailSettings, build_email
from ..formats.message import Message
from ..registry import WebhookRecord
from ..targets.checks import (
    AllowList,
    IPAddress,
    Resolver,
    Target,
    UnresolvedTarget,
    UnsafeTarget,
    check_smtp_target,
    resolve_target,
)
from ..targets.redaction import scrub, secret_parts


@dataclass(frozen=True)
class MailOutcome:
    code: int | None  # the SMTP reply code that decided it, when there was one
    error: str | None = None  # None: the server accepted the message
    permanent: bool = False  # a 5xx reply: retrying the same message cannot help
    note: str | None = None  # delivered, but some recipients were refused


async def _connect_pinned(
    addresses: Sequence[IPAddress], port: int, timeout_s: float
) -> socket.socket:
    """A TCP connection to the first of `addresses` that accepts one."""
    if not addresses:
        raise UnresolvedTarget("no address to send to")
    loop = asyncio.get_running_loop()
    last: OSError | None = None
    for addr in addresses:
        family = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(timeout_s):
                await loop.sock_connect(sock, (addr.compressed, port))
        except (OSError, TimeoutError) as exc:
            sock.close()
            last = exc if isinstance(exc, OSError) else OSError(f"connecting to {addr} timed out")
            continue
        return sock
    assert last is not None
    raise last


async def send_email(
    target: Target,
    addresses: Sequence[IPAddress],
    message: EmailMessage,
    settings: EmailSettings,
    password: str | None,
    *,
    timeout_s: float,
    ssl_context: ssl.SSLContext,
) -> MailOutcome:
    """One SMTP session to a checked address: TLS as `settings.tls` says, AUTH when a
    username is set, the message to every recipient. Raises the client's errors."""
    mode = settings.tls or ("implicit" if target.scheme == "smtps" else "starttls")
    sock = await _connect_pinned(addresses, target.port, timeout_s)
    try:
        client = aiosmtplib.SMTP(
            hostname=target.host,  # TLS: SNI and certificate verification for the name
            sock=sock,
            use_tls=mode == "implicit",
            start_tls=mode == "starttls",  # True: no STARTTLS offered is an error, never plain
            tls_context=ssl_context,
            username=settings.username,
            password=password if settings.username is not None else None,
            timeout=timeout_s,
            local_hostname=settings.sender.rsplit("@", 1)[-1],
        )
    except ValueError:
        sock.close()
        raise
    try:  # from here the client's transport owns the socket, and closes it
        await client.connect()
        refused, _ = await client.send_message(message)
        with contextlib.suppress(aiosmtplib.SMTPException, OSError):
            await client.quit()
    finally:
        client.close()
    # send_message raises unless the server answered the message's end with 250.
    if refused:
        who = ", ".join(f"{to} ({r.code} {r.message})" for to, r in sorted(refused.items()))
        return MailOutcome(250, note=f"refused for some recipients: {who}")
    return MailOutcome(250)


def _failure(exc: BaseException) -> MailOutcome:
    """An SMTP client error as the outcome of an attempt."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [r.code for r in exc.recipients]
        text = "; ".join(f"{r.recipient}: {r.code} {r.message}" for r in exc.recipients)
        permanent = bool(codes) and min(codes) >= 500  # a 4xx for anyone: worth a retry
        return MailOutcome(max(codes, default=None), f"every recipient refused: {text}", permanent)
    if isinstance(exc, aiosmtplib.SMTPResponseException) and exc.code > 0:
        name = type(exc).__name__
        return MailOutcome(exc.code, f"{name}: {exc.code} {exc.message}", exc.code >= 500)
    return MailOutcome(None, type(exc).__name__ + (f": {exc}" if str(exc) else ""))


async def deliver_email(
    webhook: WebhookRecord,
    alert: Message,
    *,
    allowlist: AllowList,
    resolver: Resolver | None,
    ssl_context: ssl.SSLContext,
    timeout_s: float,
) -> MailOutcome:
    """One attempt of `alert` to an ``email`` webhook: the target checked, resolved and
    every address checked, then one SMTP session, within `timeout_s` in all. The error
    never shows the password."""
    hidden = secret_parts(webhook.url, webhook.format, webhook.secret)
    settings = webhook.email
    if settings is None:
        return MailOutcome(None, "the webhook has no email settings", permanent=True)
    try:
        target = check_smtp_target(webhook.url, allowlist, settings.tls or "")
        message = build_email(alert, settings, webhook_id=webhook.id, now=datetime.now(UTC))
    except UnsafeTarget as exc:  # nothing is sent
        return MailOutcome(None, scrub(f"target refused: {exc}", hidden))
    except ValueError as exc:
        return MailOutcome(None, f"cannot build the message: {exc}", permanent=True)
    try:
        async with asyncio.timeout(timeout_s):
            addresses = await resolve_target(target, allowlist, resolver)
            return await send_email(
                target,
                addresses,
                message,
                settings,
                webhook.secret,
                timeout_s=timeout_s,
                ssl_context=ssl_context,
            )
    except UnsafeTarget as exc:  # nothing was sent
        return MailOutcome(None, scrub(f"target refused: {exc}", hidden))
    except UnresolvedTarget as exc:  # nothing was sent
        return MailOutcome(None, scrub(f"target not resolved: {exc}", hidden))
    except (aiosmtplib.SMTPException, OSError, TimeoutError, ssl.SSLError) as exc:
        outcome = _failure(exc)
        error = scrub(outcome.error or "", hidden)
        return MailOutcome(outcome.code, error, outcome.permanent)
