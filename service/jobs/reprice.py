"""A past-dated rate-card version: which projects' figures it changes, and the `PUT` that
either refuses it or stores it and queues their repricing.

A version effective before events already priced would price the next event at its price and
leave the earlier identical ones at the old one: the figures (and the budget alerts on them)
would mix two prices until someone rebuilt. So the `PUT` looks first: the projects priced by
the card that hold events in the version's span (from its `effective_from` to the next
version's, to the hour: the hourly totals are the finest index by time) of a SKU whose
pricing the version changes (a version that only adds a SKU, or edits a description,
changes no figure) are named, and the
version is refused unless the body has `reprice: true`; then it is stored and each such
project gets a repricing job (a rebuild of the project, which settles its budget alerts once).
Each such project's budget alert decisions are held from before the version is stored until
its job ends (the ingest script reads the hold): no alert fires on the mixed figure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import Conflict
from ..ledger.folding import settle
from ..projects.service import project_settings
from ..ratecards.model import RateCardIn, RateCardVersion, Sku, pricing_facts
from ..ratecards.service import SharedCardForbidden, add_version, check_version
from .model import HOLD_MS, AffectedProject, Job, JobParams
from .service import new_job_id, queue_job

if TYPE_CHECKING:
    from ..auth.model import Principal
    from ..ratecards.catalog import RateCards
    from ..stores import Stores

__all__ = ["RepricingNeeded", "SharedCardForbidden", "VersionAdded", "put_version"]


class RepricingNeeded(Conflict):
    """The version changes figures already priced, and the card did not ask to `reprice`."""

    title = "Repricing needed"
    kind = "repricing-needed"

    def __init__(self, affected: list[AffectedProject], effective_from: datetime) -> None:
        super().__init__(", ".join(a.project for a in affected))
        self.affected = affected
        self.effective_from = effective_from

    def problem_detail(self) -> str:
        return (
            f"version effective {self.effective_from.isoformat()} changes figures already "
            f"priced in {len(self.affected)} project(s): send it with reprice: true to store "
            "it and reprice them"
        )

    def problem_members(self) -> dict[str, Any]:
        return {
            "field": "effective_from",
            "affected": [msgspec.to_builtins(a) for a in self.affected],
        }


class VersionAdded:
    """What the `PUT` did: the version stored, the projects it reprices and their jobs."""

    def __init__(
        self, version: RateCardVersion, affected: list[AffectedProject], jobs: list[Job]
    ) -> None:
        self.version = version
        self.affected = affected
        self.jobs = jobs


def _span(versions: list[RateCardVersion], start: datetime) -> tuple[datetime, datetime | None]:
    """The span the new version prices: from its start to the next later start (a version
    with the same start is overridden by the new one, created later)."""
    later = [v.effective_from for v in versions if v.effective_from > start]
    return start, min(later) if later else None


def _hour_in_span(day: str, hour: int, span: tuple[datetime, datetime | None]) -> bool:
    begin = datetime(int(day[:4]), int(day[4:6]), int(day[6:8]), hour, tzinfo=UTC)
    start, end = span
    return begin + timedelta(hours=1) > start and (end is None or begin < end)


def _pricing(sku: Sku) -> tuple[object, ...]:
    """What of a SKU prices an event (its description and source do not)."""
    return pricing_facts(sku)


def changed_skus(
    versions: list[RateCardVersion], card: RateCardIn, start: datetime
) -> set[str] | None:
    """The SKU codes whose pricing the new version changes against the version that priced
    its span until now (the latest starting at or before `start`); None for all of them (a
    new currency, or no earlier version)."""
    earlier = [v for v in versions if v.effective_from <= start]
    if not earlier:
        return None
    old = max(earlier, key=lambda v: (v.effective_from, v.version))
    if old.currency != card.currency:
        return None
    before = {s.code: _pricing(s) for s in old.skus}
    after = {s.code: _pricing(s) for s in card.skus}
    return {c for c in before.keys() | after.keys() if before.get(c) != after.get(c)}


def _sku_of(raw_field: bytes) -> str:
    # `n|stage\x1fexperiment\x1fcategory\x1fsku\x1f...` (docs/internals/key-layout.md)
    return raw_field.split(b"\x1f", 4)[3].decode()


async def _affected_days(
    store: Stores, project: str, span: tuple[datetime, datetime | None], skus: set[str] | None
) -> AffectedProject | None:
    await settle(store, project)  # batches still queued for the fold count too
    start, end = span
    first, last = start.strftime("%Y%m%d"), end.strftime("%Y%m%d") if end else "99999999"
    days = sorted(d for d in await store.ledger.daily_costs(project) if first <= d <= last)
    counts: dict[str, int] = {}
    for day, fields in zip(days, await store.ledger.hour_totals(project, days), strict=True):
        for raw_field, raw_value in fields.items():
            kind, hour, _ = raw_field.decode().split("|", 2)
            if kind == "n" and _hour_in_span(day, int(hour), span):
                counts[day] = counts.get(day, 0) + int(raw_value)
    if skus is not None:  # only the events of a changed SKU: the day's totals know the SKU
        days = [d for d in sorted(counts) if counts[d]]
        for day, fields in zip(days, await store.ledger.day_totals(project, days), strict=True):
            of_changed = sum(
                int(v) for f, v in fields.items() if f[:2] == b"n|" and _sku_of(f[2:]) in skus
            )
            # The hours say how many fall in the span, the day how many are of a changed SKU.
            counts[day] = min(counts[day], of_changed)
    shown = [f"{d[:4]}-{d[4:6]}-{d[6:]}" for d in sorted(counts) if counts[d]]
    if not shown:
        return None
    events = sum(counts[d] for d in counts if counts[d])
    return AffectedProject(project=project, days=shown, events=events)


async def affected_projects(
    store: Stores,
    name: str,
    versions: list[RateCardVersion],
    start: datetime,
    skus: set[str] | None = None,
) -> list[AffectedProject]:
    """The projects priced by card `name` with events a version starting at `start` prices
    differently: those of the SKUs `skus` (None: of any SKU)."""
    span = _span(versions, start)
    if skus is not None and not skus:
        return []
    out = []
    for project in await store.projects.projects():
        settings = await project_settings(store, project)
        if settings.rate_card != name or settings.accepted == 0:
            continue
        affected = await _affected_days(store, project, span, skus)
        if affected is not None:
            out.append(affected)
    return out


async def put_version(
    store: Stores,
    rate_cards: RateCards,
    principal: Principal,
    name: str,
    card: RateCardIn,
) -> VersionAdded:
    """Add a version to card `name`. A version that changes figures already priced is
    refused (RepricingNeeded, nothing written) unless the card asks to `reprice`; then it is
    stored and every affected project gets a repricing job. Raises SharedCardForbidden or
    RateCardError as `add_version` does, before anything is written."""
    check_version(principal, card)
    start = card.effective_from.astimezone(UTC)
    versions = await rate_cards.versions(name)
    skus = changed_skus(versions, card, start)
    affected = await affected_projects(store, name, versions, start, skus)
    if affected and not card.reprice:
        raise RepricingNeeded(affected, card.effective_from)
    # Held before the version is stored: a batch priced at the new price never decides alerts
    # on a figure that still holds the old one.
    job_ids = [new_job_id() for _ in affected]
    for a, job_id in zip(affected, job_ids, strict=True):
        await store.jobs.hold(a.project, job_id, HOLD_MS)
    try:
        version = await add_version(rate_cards, principal, name, card)
    except BaseException:
        for a, job_id in zip(affected, job_ids, strict=True):
            await store.jobs.release(a.project, job_id)
        raise
    jobs = [
        await queue_job(
            store,
            a.project,
            "reprice",
            JobParams(rate_card=name, version=version.version, days=a.days),
            job_id=job_id,
        )
        for a, job_id in zip(affected, job_ids, strict=True)
    ]
    return VersionAdded(version, affected, jobs)
