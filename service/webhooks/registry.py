"""Webhook registrations: validating one, sealing its URL and secret for Redis, opening them
again, listing them and choosing which webhooks want an alert."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from ..errors import Invalid
from ..events.model import SAFE_TEXT_PATTERN, ProjectName
from ..storage.sealing import Sealer, Unsealable
from .formats.build import build_request
from .formats.mail import EmailSettings, build_email
from .formats.message import AlertMessage
from .formats.signing import generate_secret
from .formats.table import NAMES, format_of
from .targets.checks import (
    RESOLVE_TIMEOUT_S,
    AllowList,
    Resolver,
    Target,
    UnresolvedTarget,
    UnsafeTarget,
    check_smtp_target,
    resolve_target,
)
from .targets.checks import check_target as _check_target
from .targets.redaction import redacted_url

if TYPE_CHECKING:
    from ..stores import Stores

log = logging.getLogger("trainledger.webhooks")

if TYPE_CHECKING:
    WebhookFormat = str
else:  # the API's enum: the names of `formats.table.FORMATS`, in its order
    WebhookFormat = Literal[NAMES]
AlertKindName = Literal["threshold", "forecast", "growth", "evaluation_regression"]


# --- targets --------------------------------------------------------------------------------


def check_target(url: str, allowlist: AllowList | Sequence[str] = ()) -> Target:
    """Raise `UnsafeTarget` unless `url` may be a webhook target as written: http(s), a
    valid host, no credentials, https unless the host is allow-listed, and a literal address
    public unless allow-listed. `service.webhooks.targets.checks` has the rules; resolving the host
    (`resolve_target`) happens at registration and again before every attempt."""
    allow = allowlist if isinstance(allowlist, AllowList) else AllowList.parse(allowlist)
    return _check_target(url, allow)


# --- webhooks -------------------------------------------------------------------------------


class WebhookIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of `POST /v1/webhooks`: the URL, the message format, an optional signing secret, the
    projects and alert kinds it receives."""

    url: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
    format: WebhookFormat = "standard"
    # standard: a whsec_ secret (generated when absent); feishu/dingtalk: the bot's signing
    # secret, if it has one; slack/wecom/teams: none (the URL is the secret); email: the
    # SMTP password (with email.username).
    secret: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    email: EmailSettings | None = None  # format email only: sender, recipients, TLS, login
    projects: Annotated[list[ProjectName], msgspec.Meta(min_length=1, max_length=1000)] | None = (
        None  # None: every project
    )
    kinds: Annotated[list[AlertKindName], msgspec.Meta(min_length=1)] | None = None  # None: all
    description: Annotated[str, msgspec.Meta(max_length=500, pattern=SAFE_TEXT_PATTERN)] = ""


class WebhookRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A webhook with its URL and secret in the clear (in memory only: `StoredWebhook` is
    what Redis holds)."""

    id: str
    url: str
    format: WebhookFormat
    secret: str | None = None
    projects: list[str] | None = None
    kinds: list[str] | None = None
    created_at: datetime
    description: str = ""
    email: EmailSettings | None = None
    # Why the stored URL and secret could not be opened (another key): then `url` is "".
    unsealable: str | None = None


class _Credentials(msgspec.Struct, omit_defaults=True):
    """What is sealed: the URL (for the chat formats it is the credential; for `standard`
    it may carry tokens) and the signing secret, with the webhook's id (so a sealed value
    copied into another webhook's record is refused, not sent that webhook's alerts)."""

    id: str
    url: str
    secret: str | None = None


class StoredWebhook(msgspec.Struct, kw_only=True, omit_defaults=True):
    """As stored in Redis: `sealed` is the URL and the secret, encrypted and authenticated
    (`service.storage.sealing`); the rest is what filters and listings need."""

    id: str
    format: WebhookFormat
    sealed: str
    projects: list[str] | None = None
    kinds: list[str] | None = None
    created_at: datetime
    description: str = ""
    email: EmailSettings | None = None  # the password is sealed (the secret)


class WebhookView(msgspec.Struct, kw_only=True):
    """As listed: never the secret, and chat-bot URLs shortened to their origin."""

    id: str
    url: str
    format: WebhookFormat
    has_secret: bool
    projects: list[str] | None
    kinds: list[str] | None
    created_at: datetime
    description: str
    # format email: sender, recipients, TLS mode and login user (never the password).
    email: EmailSettings | None = None
    # Set when the configured key cannot open the stored URL and secret (they were
    # encrypted with another TRAINLEDGER_SECRET_KEY): `url` is then empty, and deliveries
    # to it fail with this reason until the key is configured again.
    unreadable: str | None = None


class WebhookCreated(WebhookView, kw_only=True, omit_defaults=True):
    """The answer to a registration: the webhook as listed, and the signing secret of a
    `standard` webhook, this one time."""

    secret: str | None = None


class WebhookError(Invalid, ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason


_stored_decoder = msgspec.json.Decoder(StoredWebhook)
_credentials_decoder = msgspec.json.Decoder(_Credentials)


def seal_webhook(record: WebhookRecord, sealer: Sealer) -> bytes:
    """The webhook as Redis keeps it: its URL and secret sealed."""
    sealed = sealer.seal(msgspec.json.encode(_Credentials(record.id, record.url, record.secret)))
    return msgspec.json.encode(
        StoredWebhook(
            id=record.id,
            format=record.format,
            sealed=sealed,
            projects=record.projects,
            kinds=record.kinds,
            created_at=record.created_at,
            description=record.description,
            email=record.email,
        )
    )


def open_webhook(raw: bytes, sealer: Sealer) -> WebhookRecord:
    """A stored webhook with its URL and secret opened; `unsealable` says why not when the
    key cannot open them (`msgspec.DecodeError` when the record itself is unreadable)."""
    stored = _stored_decoder.decode(raw)
    url, secret, why = "", None, None
    try:
        credentials = _credentials_decoder.decode(sealer.open(stored.sealed))
        if credentials.id != stored.id:
            why = "its sealed URL and secret belong to another webhook"
        else:
            url, secret = credentials.url, credentials.secret
    except Unsealable as exc:
        why = f"its URL and secret cannot be decrypted: {exc}"
    return WebhookRecord(
        id=stored.id,
        url=url,
        format=stored.format,
        secret=secret,
        projects=stored.projects,
        kinds=stored.kinds,
        created_at=stored.created_at,
        description=stored.description,
        email=stored.email,
        unsealable=why,
    )


_SAMPLE_ALERT = AlertMessage(
    id="bud_sample:2026-01:t100",
    kind="threshold",
    project="sample",
    budget_id="bud_sample",
    budget_name="sample",
    scope={},
    period="2026-01",
    threshold_pct=100,
    amount="1.00",
    spent="1.00",
    limit="1.00",
    over_by="0.00",
    currency="USD",
    occurred_at=datetime(1970, 1, 1, tzinfo=UTC),
)


def webhook_target(url: str, fmt: str, email: EmailSettings | None, allowlist: AllowList) -> Target:
    """The checked target of a webhook: its SMTP server for `email`, else its HTTP URL."""
    spec = format_of(fmt)
    if spec is not None and spec.over_smtp:
        return check_smtp_target(url, allowlist, (email.tls or "") if email else "")
    return check_target(url, allowlist)


def _email_settings(data: WebhookIn) -> EmailSettings | None:
    """The email settings of a registration, the TLS mode made explicit (WebhookError)."""
    if data.format != "email":
        if data.email is not None:
            raise WebhookError("$.email", "only an email webhook has email settings")
        return None
    if data.email is None:
        raise WebhookError("$.email", "an email webhook needs email settings (from, to)")
    if (data.email.username is None) != (data.secret is None):
        raise WebhookError("$.secret", "an SMTP login needs both email.username and secret")
    tls = data.email.tls or ("implicit" if data.url.lower().startswith("smtps:") else "starttls")
    settings = msgspec.structs.replace(data.email, tls=tls)
    try:  # a dry run: the addresses as the message will carry them
        build_email(_SAMPLE_ALERT, settings, webhook_id="wh_sample", now=datetime.now(UTC))
    except ValueError as exc:
        raise WebhookError("$.email", f"not a usable address: {exc}") from exc
    return settings


def new_webhook(
    data: WebhookIn, now: datetime | None = None, allowlist: AllowList | None = None
) -> WebhookRecord:
    """Validate a registration and give it an id (and a secret, for `standard`)."""
    email = _email_settings(data)
    try:
        webhook_target(data.url, data.format, email, allowlist or AllowList())
    except UnsafeTarget as exc:
        raise WebhookError("$.url", str(exc)) from exc
    spec = format_of(data.format)
    assert spec is not None  # WebhookIn's enum holds only the names of the formats
    secret = data.secret
    if spec.secret == "generated" and secret is None:
        secret = generate_secret()
    if spec.secret == "none" and secret is not None:
        raise WebhookError(
            "$.secret", f"{data.format} webhooks are not signed; the URL is the secret"
        )
    try:  # a dry run validates the URL and the secret the way every delivery will use them
        if not spec.over_smtp:
            build_request(_SAMPLE_ALERT, data.format, data.url, secret)
    except ValueError as exc:
        field = "$.secret" if "secret" in str(exc) else "$.url"
        raise WebhookError(field, str(exc)) from exc
    return WebhookRecord(
        id="wh_" + secrets.token_hex(8),
        url=data.url,
        format=data.format,
        secret=secret,
        projects=sorted(set(data.projects)) if data.projects is not None else None,
        kinds=sorted(set(data.kinds)) if data.kinds is not None else None,
        created_at=now or datetime.now(UTC),
        description=data.description,
        email=email,
    )


def webhook_view(record: WebhookRecord) -> WebhookView:
    return WebhookView(
        id=record.id,
        url=redacted_url(record.url, record.format) if record.unsealable is None else "",
        format=record.format,
        has_secret=record.secret is not None,
        projects=record.projects,
        kinds=record.kinds,
        created_at=record.created_at,
        description=record.description,
        email=record.email,
        unreadable=record.unsealable,
    )


def created_view(record: WebhookRecord) -> WebhookCreated:
    spec = format_of(record.format)
    generated = spec is not None and spec.secret == "generated"
    secret = record.secret if generated else None
    return WebhookCreated(**msgspec.structs.asdict(webhook_view(record)), secret=secret)


async def create_webhook(
    store: Stores,
    data: WebhookIn,
    allowlist: AllowList | Sequence[str] = (),
    resolver: Resolver | None = None,
    *,
    sealer: Sealer,
) -> WebhookRecord:
    """Register a webhook. Its host is resolved now, and refused if any address it resolves
    to is not public (unless allow-listed); a name that does not resolve yet is accepted,
    since every delivery resolves and checks it again before sending."""
    allow = allowlist if isinstance(allowlist, AllowList) else AllowList.parse(allowlist)
    record = new_webhook(data, allowlist=allow)
    target = webhook_target(record.url, record.format, record.email, allow)
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            await resolve_target(target, allow, resolver)
    except UnsafeTarget as exc:
        raise WebhookError("$.url", str(exc)) from exc
    except (UnresolvedTarget, TimeoutError):
        pass
    await store.webhooks.put_webhook(record.id, seal_webhook(record, sealer))
    origin = f"{target.scheme}://{target.host}:{target.port}"  # never the path or query
    log.info("webhook %s registered (%s, %s)", record.id, record.format, origin)
    return record


# Webhooks whose URL and secret this process could not open and has said so (once each).
_reported_unsealable: set[str] = set()


async def load_webhooks(store: Stores, sealer: Sealer) -> list[WebhookRecord]:
    """Every webhook, its URL and secret opened. One the key cannot open is kept (listed,
    deletable; its deliveries fail with the reason) and logged once per process."""
    out = []
    for webhook_id, raw in (await store.webhooks.webhooks()).items():
        try:
            record = open_webhook(raw, sealer)
        except msgspec.DecodeError:
            log.error("webhook %s is stored in an unreadable form; ignored", webhook_id)
            continue
        if record.unsealable is not None and record.id not in _reported_unsealable:
            _reported_unsealable.add(record.id)
            log.error("webhook %s: %s", record.id, record.unsealable)
        out.append(record)
    return out


async def reseal_webhooks(store: Stores, sealer: Sealer) -> tuple[int, int]:
    """Seal every stored webhook still sealed with an older key again with the first one
    (key rotation). Returns (resealed, unopenable). A webhook changed or deleted meanwhile
    is left as it is now."""
    resealed = unopenable = 0
    for webhook_id, raw in (await store.webhooks.webhooks()).items():
        try:
            stored = _stored_decoder.decode(raw)
        except msgspec.DecodeError:
            continue
        if sealer.sealed_with_first_key(stored.sealed):
            continue
        try:
            fresh = msgspec.structs.replace(stored, sealed=sealer.reseal(stored.sealed))
        except Unsealable:
            unopenable += 1
            continue
        if await store.webhooks.replace_webhook(webhook_id, raw, msgspec.json.encode(fresh)):
            resealed += 1
    return resealed, unopenable


def wants(webhook: WebhookRecord, project: str, kind: str) -> bool:
    return (webhook.projects is None or project in webhook.projects) and (
        webhook.kinds is None or kind in webhook.kinds
    )
