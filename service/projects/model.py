"""A project's settings: its meta hash read into one typed value, and the rules on them.

Pure: no Redis, no clock. `ProjectSettings.of` reads the hash `Store.project_meta` returns;
`settings_fields` writes the fields a change sets. The attribution tags are kept in the hash
as one comma-separated field, and the ingest script compares the fields as stored, so the
raw text is kept beside its meaning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated

import msgspec

from ..events.model import TagKey
from ..ratecards.model import NAME_PATTERN

# The rate card of a project that never chose one.
DEFAULT_RATE_CARD = "default"
# The meta field that holds the waste policy.
WASTE_POLICY_FIELD = "waste_policy"
# Tags that costs are attributed by unless the project names others (`attribution_tags`).
DEFAULT_ATTRIBUTION_TAGS = frozenset({"rework", "team"})


class ProjectSettings(msgspec.Struct):
    """The project's meta hash. A field that is None is not set in the hash.

    Mutable: the ingest keeps one per project as last read and updates it with what its own
    script wrote (`first_priced`, `budgets_rev`)."""

    chosen_rate_card: str | None = None
    # The ledger's currency: fixed by the first priced batch (the card's), "" when that card
    # named none.
    currency: str | None = None
    # `attribution_tags` as stored: comma-separated keys ("" names none).
    tags_field: str | None = None
    accepted: int = 0
    duplicates: int = 0
    # Bumped by every budget change; the ingest script refuses a batch priced with another.
    budgets_rev: str = "0"
    # The waste policy as stored (JSON; `waste.service` reads it).
    waste_policy: str | None = None

    @classmethod
    def of(cls, meta: Mapping[str, str]) -> ProjectSettings:
        return cls(
            chosen_rate_card=meta.get("rate_card"),
            currency=meta.get("currency"),
            tags_field=meta.get("attribution_tags"),
            accepted=int(meta.get("accepted", "0")),
            duplicates=int(meta.get("duplicates", "0")),
            budgets_rev=meta.get("budgets_rev", "0"),
            waste_policy=meta.get(WASTE_POLICY_FIELD),
        )

    @property
    def rate_card(self) -> str:
        """The rate card that prices the project's events."""
        return DEFAULT_RATE_CARD if self.chosen_rate_card is None else self.chosen_rate_card

    @property
    def attribution_tags(self) -> frozenset[str]:
        """The tags costs are attributed by."""
        return parse_attribution_tags(self.tags_field)

    @property
    def as_priced(self) -> tuple[str | None, str | None, str | None]:
        """The fields a batch priced with these settings expects unchanged (as stored)."""
        return self.chosen_rate_card, self.currency, self.tags_field

    def first_priced(self, rate_card: str, currency: str | None) -> None:
        """What the ingest script's HSETNXs write when a batch lands: a project's first
        priced batch fixes its rate card and currency (set ones stay)."""
        if self.currency is None:
            self.currency = currency or ""
        if self.chosen_rate_card is None:
            self.chosen_rate_card = rate_card

    def ledger_currency(self, card_currency: str | None) -> str:
        """The currency its money is shown in: the ledger's once fixed, else the card's."""
        if self.currency:
            return self.currency
        return card_currency or ""

    def conflicts_with(self, card_currency: str | None) -> bool:
        """A ledger kept in one currency cannot move to a rate card priced in another."""
        return bool(self.currency) and self.currency != card_currency


def parse_attribution_tags(field: str | None) -> frozenset[str]:
    """The tags a stored `attribution_tags` field names (None: the defaults)."""
    if field is None:
        return DEFAULT_ATTRIBUTION_TAGS
    return frozenset(t for t in field.split(",") if t)


def encode_attribution_tags(tags: Iterable[str]) -> str:
    return ",".join(sorted(set(tags)))


def settings_fields(
    rate_card: str | None, card_currency: str | None, attribution_tags: Iterable[str] | None
) -> dict[str, str]:
    """The meta fields a settings change writes: a chosen rate card brings its currency."""
    fields: dict[str, str] = {}
    if attribution_tags is not None:
        fields["attribution_tags"] = encode_attribution_tags(attribution_tags)
    if rate_card is not None:
        fields["rate_card"] = rate_card
        if card_currency:
            fields["currency"] = card_currency
    return fields


class ProjectIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Body of `PUT /v1/projects/{project}`: the rate card and the attribution tags (a field left
    out is kept)."""

    rate_card: Annotated[str, msgspec.Meta(pattern=NAME_PATTERN)] | None = None
    # Tags that costs are attributed by (filter and group by them); a rebuild applies a
    # change to events already accepted.
    attribution_tags: Annotated[list[TagKey], msgspec.Meta(max_length=8)] | None = None


class ProjectView(msgspec.Struct):
    """A project's settings and counters: its rate card and currency, events accepted and
    duplicates, attribution tags."""

    project: str
    rate_card: str
    currency: str | None
    accepted_events: int
    duplicate_events: int
    attribution_tags: list[str]

    @classmethod
    def of(cls, project: str, settings: ProjectSettings) -> ProjectView:
        return cls(
            project=project,
            rate_card=settings.rate_card,
            currency=settings.currency,
            accepted_events=settings.accepted,
            duplicate_events=settings.duplicates,
            attribution_tags=sorted(settings.attribution_tags),
        )
