"""What every importer shares: the event shape, day slicing and exact GPU-hour arithmetic.

GPU hours are ``gpus × seconds / 3600``: a rational number that often has no finite decimal
form (1 GPU for 1 s is 0.000277…), while an event quantity has at most 6 decimal places. So a
run's total is rounded once, half to even, to the micro GPU-hour (an error below 1.8 ms of
one GPU), and split over UTC days by *cumulative* rounding: the day slices of one run always
sum exactly to that once-rounded total, and a run that ends at a whole number of GPU-seconds
divisible by 9 (e.g. whole minutes) is exact to the last digit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ..events.model import LABEL_PATTERN, PROJECT_PATTERN, STAGES

MICRO = 10**6
PROJECT_RE = re.compile(PROJECT_PATTERN)
LABEL_RE = re.compile(LABEL_PATTERN)
DAY = timedelta(days=1)


@dataclass(frozen=True)
class ImportEvent:
    """One usage event to post. ``quantity`` is GPU hours, at most 6 decimal places."""

    id: str
    time: datetime
    project: str
    sku: str
    quantity: Decimal
    stage: str | None = None
    experiment: str | None = None
    owner: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def day(self) -> str:
        return self.time.astimezone(UTC).date().isoformat()

    def as_json(self) -> dict[str, Any]:
        """The body of one event for `POST /v1/events` (optional fields only when known)."""
        body: dict[str, Any] = {
            "id": self.id,
            "time": self.time.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "project": self.project,
            "sku": self.sku,
            "quantity": str(self.quantity),
        }
        if self.stage:
            body["stage"] = self.stage
        if self.experiment:
            body["experiment"] = self.experiment
        if self.owner:
            body["owner"] = self.owner
        if self.tags:
            body["tags"] = dict(self.tags)
        return body


@dataclass(frozen=True)
class Skipped:
    """A record that gave no event, and why (``line`` is 1-based in the input, when known)."""

    source: str
    reason: str
    line: int | None = None


@dataclass
class Unmapped:
    """GPU usage whose GPU type/partition has no SKU in the mapping: reported, never dropped."""

    key: str
    records: int = 0
    gpu_hours: Decimal = Decimal(0)


@dataclass
class ImportResult:
    events: list[ImportEvent] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    unmapped: dict[str, Unmapped] = field(default_factory=dict)
    # How the input's records were classified (records = data lines or list items read).
    records: int = 0
    counted: int = 0  # jobs/pods that gave events
    steps: int = 0  # Slurm job steps, ignored (the job's allocation is counted instead)
    not_finished: int = 0  # running or pending: import again once they have ended
    without_gpus: int = 0  # finished, but held no GPU
    repeated: int = 0  # the same run seen again in the input (e.g. overlapping sacct windows)
    warnings: list[str] = field(default_factory=list)

    def add_unmapped(self, key: str, hours: Decimal) -> None:
        entry = self.unmapped.setdefault(key, Unmapped(key))
        entry.records += 1
        entry.gpu_hours += hours

    def by_sku_and_day(self) -> dict[tuple[str, str], Decimal]:
        return totals_by_sku_and_day(self.events)


def totals_by_sku_and_day(events: Iterable[ImportEvent]) -> dict[tuple[str, str], Decimal]:
    """GPU hours per (SKU, UTC day), exact sums of the event quantities, sorted by key."""
    totals: dict[tuple[str, str], Decimal] = {}
    for e in events:
        key = (e.sku, e.day)
        totals[key] = totals.get(key, Decimal(0)) + e.quantity
    return dict(sorted(totals.items()))


def day_slices(start: datetime, end: datetime) -> list[tuple[datetime, int]]:
    """[start, end) cut at every 00:00 UTC: (slice start, whole seconds in the slice).

    The first slice starts at ``start`` itself, the others at midnight. A run with
    ``end <= start`` gives one empty slice at ``start``.
    """
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if end <= start:
        return [(start, 0)]
    slices: list[tuple[datetime, int]] = []
    cursor = start
    while cursor < end:
        midnight = datetime(cursor.year, cursor.month, cursor.day, tzinfo=UTC) + DAY
        stop = min(midnight, end)
        slices.append((cursor, int((stop - cursor).total_seconds())))
        cursor = stop
    return slices


def gpu_hours(gpus: int, seconds: int) -> Fraction:
    return Fraction(gpus * seconds, 3600)


def to_micro_decimal(value: Fraction) -> Decimal:
    """Round half to even to 6 decimal places (``round`` on a Fraction is banker's rounding)."""
    return Decimal(round(value * MICRO)).scaleb(-6)


def spread(total: Fraction, weights: list[int]) -> list[Decimal]:
    """Split ``total`` over slices in proportion to ``weights`` by cumulative rounding.

    Slice i gets round(total × W(i+1)/W) − round(total × W(i)/W), where W(i) is the sum of
    the first i weights, so the parts sum exactly to round(total) and each is within one
    micro unit of its exact share. With no weight at all the total goes to the first slice.
    """
    whole = sum(weights)
    if whole == 0:
        return [to_micro_decimal(total)] + [Decimal(0)] * (len(weights) - 1)
    parts: list[Decimal] = []
    done = 0
    previous = 0
    for w in weights:
        done += w
        current = round(total * done / whole * MICRO)
        parts.append(Decimal(current - previous).scaleb(-6))
        previous = current
    return parts


def usage_slices(
    start: datetime, end: datetime, gpus: int, elapsed_seconds: int
) -> list[tuple[datetime, Decimal]]:
    """GPU hours per UTC day for ``gpus`` GPUs held ``elapsed_seconds`` between start and end.

    The elapsed time is what is charged (Slurm's ElapsedRaw excludes time suspended); it is
    spread over the days in proportion to the wall-clock seconds of [start, end) in each, so
    when elapsed = end − start (the usual case) every day gets exactly its own seconds.
    Slices that round to zero are left out.
    """
    slices = day_slices(start, end)
    parts = spread(gpu_hours(gpus, elapsed_seconds), [s for _, s in slices])
    return [(when, q) for (when, _), q in zip(slices, parts, strict=True) if q > 0]


def parse_mapping(
    pairs: Iterable[str], from_file: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """``KEY=SKU`` pairs (later ones win) over a JSON object {KEY: SKU}. Raises ValueError."""
    mapping: dict[str, str] = {}
    for key, value in (from_file or {}).items():
        if not isinstance(value, str) or not value:
            raise ValueError(f"mapping file: the SKU for {key!r} must be a non-empty string")
        mapping[str(key)] = value
    for pair in pairs:
        key, sep, sku = pair.partition("=")
        if not sep or not key.strip() or not sku.strip():
            raise ValueError(f"--map wants KEY=SKU, got {pair!r}")
        mapping[key.strip()] = sku.strip()
    return mapping


def clean_project(raw: str) -> str | None:
    """A scheduler's account/namespace as a project name (lower case), or None if invalid."""
    name = raw.strip().lower()
    return name if PROJECT_RE.match(name) else None


def clean_label(raw: str | None) -> str | None:
    if not raw:
        return None
    return raw if LABEL_RE.match(raw) else None


COMMENT_KEYS = ("stage", "experiment")
_PAIR_RE = re.compile(r"([A-Za-z_]+)=([^\s,;]+)")


def labels_from_text(text: str) -> tuple[dict[str, str], list[str]]:
    """``stage=pretrain experiment=mix-a`` (separated by spaces, commas or semicolons).

    Returns the recognised, valid labels and a problem per invalid one; unknown keys are
    ignored, so a comment that says other things is fine.
    """
    found: dict[str, str] = {}
    problems: list[str] = []
    for key, value in _PAIR_RE.findall(text or ""):
        key = key.lower()
        if key == "stage":
            if value in STAGES:
                found["stage"] = value
            else:
                problems.append(f"stage {value!r} is not one of {', '.join(STAGES)}")
        elif key == "experiment":
            if LABEL_RE.match(value) and len(value) <= 128:
                found["experiment"] = value
            else:
                problems.append(f"experiment {value!r} must match {LABEL_PATTERN}")
    return found, problems
