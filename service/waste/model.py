"""The waste policy, experiments' progress reports and the waste report: the wire models.

The rules that turn a project's events into findings are in `report` (days, window, reference
time, and the entry point `find_waste`) and one module per kind of waste: `reserved`
(`reserved_idle`), `experiments` (`experiment_no_progress`, `experiment_stalled`), `storage`
(`storage_past_retention`, `checkpoint_growth`), `cross_region` (`cross_region_repull`) and
`logs` (`log_ingest_over_cap`, `log_past_retention`). `scan` holds what they share: the events
in time order and the cost already claimed by a finding, so that no cost is counted twice.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Final, Literal

import msgspec

from costcore.money import parse_quantity

from ..ratecards.model import DecimalString, SkuCode

__all__ = [
    "CROSS_REGION_PREFIX",
    "DATA_CLASSES",
    "DEFAULT_WINDOW_DAYS",
    "KINDS",
    "MAX_EVIDENCE_IDS",
    "CheckpointPolicy",
    "DayLine",
    "Evidence",
    "Finding",
    "FindingWindow",
    "Kind",
    "LogPolicy",
    "ProgressPoint",
    "RetentionDays",
    "WastePolicy",
    "WasteReport",
]

DEFAULT_WINDOW_DAYS: Final = 30
MAX_EVIDENCE_IDS: Final = 20
DATA_CLASSES: Final = ("raw", "intermediate", "checkpoint", "other")
CROSS_REGION_PREFIX: Final = "network.cross_region"

Kind = Literal[
    "reserved_idle",
    "experiment_no_progress",
    "experiment_stalled",
    "storage_past_retention",
    "checkpoint_growth",
    "cross_region_repull",
    "log_ingest_over_cap",
    "log_past_retention",
]
KINDS: Final = (
    "reserved_idle",
    "experiment_no_progress",
    "experiment_stalled",
    "storage_past_retention",
    "checkpoint_growth",
    "cross_region_repull",
    "log_ingest_over_cap",
    "log_past_retention",
)

RetentionDaysValue = Annotated[int, msgspec.Meta(ge=0, le=36_500)] | None
PolicyDays = Annotated[int, msgspec.Meta(ge=1, le=3_650)]


def _check_quantity(value: str | None, what: str) -> None:
    if value is None:
        return
    try:
        parse_quantity(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what}: {exc}") from None


# --------------------------------------------------------------------------------------
# Policy and inputs
# --------------------------------------------------------------------------------------


class RetentionDays(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Days each data class is kept; `None` turns the check off for that class."""

    raw: RetentionDaysValue = 365
    intermediate: RetentionDaysValue = 30
    checkpoint: RetentionDaysValue = 14
    other: RetentionDaysValue = None


class CheckpointPolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Expected checkpoint footprint: `size_gb` x `keep_last` GB-days per day."""

    size_gb: DecimalString | None = None  # None: growth check off
    keep_last: PolicyDays = 3
    tolerance_pct: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 20

    def __post_init__(self) -> None:
        _check_quantity(self.size_gb, "size_gb")


class LogPolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The log thresholds of the waste policy: a cap on ingest per day and the retention."""

    max_ingest_gb_per_day: DecimalString | None = None  # None: no cap
    retention_days: RetentionDaysValue = 30

    def __post_init__(self) -> None:
        _check_quantity(self.max_ingest_gb_per_day, "max_ingest_gb_per_day")


class WastePolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A project's waste policy. Every field has a documented default."""

    # fixed SKU -> the SKUs its use is posted on (default: `usage_sku_of(code)`)
    usage_skus: dict[SkuCode, list[SkuCode]] = {}
    idle_days: PolicyDays = 2
    stall_days: PolicyDays = 3
    min_improvement_pct: DecimalString = "0"
    check_unreported: bool = True
    ignore_experiments: list[str] = []
    retention_days: RetentionDays = msgspec.field(default_factory=RetentionDays)
    checkpoint: CheckpointPolicy = msgspec.field(default_factory=CheckpointPolicy)
    logs: LogPolicy = msgspec.field(default_factory=LogPolicy)
    rate_days: PolicyDays = 7

    def __post_init__(self) -> None:
        try:
            Decimal(self.min_improvement_pct)
        except ArithmeticError:
            raise ValueError("min_improvement_pct is not a decimal number") from None


class ProgressPoint(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One progress report of an experiment (e.g. eval loss at a time)."""

    time: Annotated[datetime, msgspec.Meta(tz=True)]
    metric: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    value: Decimal
    higher_is_better: bool = False

    def __post_init__(self) -> None:
        if self.time.tzinfo is None:
            raise ValueError("time must carry a UTC offset")
        if not self.value.is_finite():
            raise ValueError("value must be a finite number")


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------


class DayLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One day of a finding's evidence. `quantity` and `cost` are the waste of that day."""

    day: date
    cost: str
    quantity: str | None = None  # wasted quantity in the SKU's unit (absent for experiments)
    paid: str | None = None  # reserved: quantity paid
    used: str | None = None  # reserved: quantity used
    expected: str | None = None  # checkpoint: expected GB-days; log ingest: the cap
    actual: str | None = None  # checkpoint: GB-days stored; log ingest: GB ingested


class Evidence(msgspec.Struct, kw_only=True):
    """What a finding rests on: its keys, the first event ids, the event count and the waste of
    each day."""

    keys: dict[str, str]
    event_ids: list[str]  # the first MAX_EVIDENCE_IDS, in time order
    event_count: int
    days: list[DayLine]


class FindingWindow(msgspec.Struct, kw_only=True):
    """First and last day with waste cost (for experiments: the span counted)."""

    start: date
    end: date


class Finding(msgspec.Struct, kw_only=True):
    """One waste finding: its kind, its cost so far and per day if left alone, the evidence and
    what to do."""

    kind: Kind
    title: str
    cost_so_far: str
    cost_per_day_if_left: str
    currency: str
    evidence: Evidence
    action: str
    window: FindingWindow


class WasteReport(msgspec.Struct, kw_only=True):
    """Answer of `GET /v1/reports/waste`: the findings over a window, largest cost first, and their
    totals."""

    project: str
    currency: str
    window_from: date
    window_to: date
    as_of: datetime
    total_waste: str
    total_per_day_if_left: str
    findings: list[Finding]  # by cost so far, largest first
    policy: WastePolicy
