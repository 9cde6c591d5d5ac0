"""The spend gauges' rules: which series a scrape shows, capped, from exact figures.

Pure: no Redis, no clock. Every figure is an integer in nano-currency (the ledger's exact
sums); it becomes a float once, here, as the sample is written (`as_float`), and a ratio is
the float of the exact fraction. Sums are formed over integers before that, never over floats.

Series and their cardinality:

* `trainledger_spend_month_to_date{project, currency, stage}`: one per project and stage
  (a fixed set), and per category (a fixed set) with the opt-in dimension `category`;
* `trainledger_experiment_spend_month_to_date{project, currency, experiment}` and
  `trainledger_owner_spend_month_to_date{project, currency, owner}` (opt-in): at most `top`
  per project: the `top - 1` largest, the rest summed into `_other`, so a family's sum over a
  project is still the project's spend;
* `trainledger_spend_to_date{project, currency}`: one per project;
* `trainledger_budget_*{project, currency, budget, name, period}`: one per budget;
* all of them for at most `SpendConfig.projects` projects per scrape (the largest by spend to
  date), the number left out in `trainledger_spend_projects_omitted`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from fractions import Fraction

from prometheus_client.core import GaugeMetricFamily, Metric

from ..ledger.fields import dims_of
from .settings import SpendConfig

# The label value of what the cap folds together, and of an empty experiment or owner (an
# empty label value is the same as no label to Prometheus).
OTHER = "_other"
NONE = "_none"


def month_of(now: datetime) -> tuple[date, date]:
    """The first day of `now`'s (UTC) month and of the next."""
    first = date(now.year, now.month, 1)
    return first, date(first.year + first.month // 12, first.month % 12 + 1, 1)


def as_float(nano: int) -> float:
    """Nano-currency as a float of currency units: rounded once, from the exact figure."""
    return float(Decimal(nano).scaleb(-9))


def cost_cells(
    hashes: Iterable[dict[bytes, bytes]], source_dims: Sequence[str], wanted: Sequence[str]
) -> dict[tuple[str, ...], int]:
    """The exact cost (``c|`` fields) of `hashes` summed per `wanted` dims (a subset of the
    source's `source_dims`)."""
    positions = [source_dims.index(name) for name in wanted]
    sums: dict[tuple[str, ...], int] = {}
    for fields in hashes:
        for raw, value in fields.items():
            if not raw.startswith(b"c|"):
                continue
            dims = dims_of(raw[2:].decode())
            key = tuple(dims[i] if i < len(dims) else "" for i in positions)
            sums[key] = sums.get(key, 0) + int(value)
    return sums


def capped(rows: dict[str, int], top: int) -> dict[str, int]:
    """At most `top` rows: the `top - 1` largest (ties by name) and the rest summed into
    `OTHER`. An empty name shows as `NONE`."""
    named = {(name or NONE): cost for name, cost in rows.items()}
    if len(named) <= top:
        return named
    ranked = sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = dict(ranked[: top - 1])
    kept[OTHER] = kept.get(OTHER, 0) + sum(cost for _, cost in ranked[top - 1 :])
    return kept


@dataclass(frozen=True)
class BudgetFigures:
    budget_id: str
    name: str
    period: str  # monthly, weekly or window
    limit: int  # nano
    spent: int  # nano, in the period shown
    forecast: int | None  # nano (budgets.model.forecast); None before the period starts

    @property
    def use_ratio(self) -> float:
        return float(Fraction(self.spent, self.limit))


@dataclass
class ProjectSpend:
    project: str
    currency: str
    to_date: int = 0
    by_stage: dict[tuple[str, ...], int] = field(default_factory=dict)
    by_experiment: dict[str, int] = field(default_factory=dict)
    by_owner: dict[str, int] = field(default_factory=dict)
    budgets: list[BudgetFigures] = field(default_factory=list)


@dataclass(frozen=True)
class Snapshot:
    projects: list[ProjectSpend]
    taken_at: float  # seconds since the epoch, when the read started
    read_seconds: float
    omitted: int = 0  # projects the scrape could see beyond the cap (SpendConfig.projects)


def _family(name: str, doc: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def spend_families(
    snapshot: Snapshot | None, config: SpendConfig, visible: Callable[[str], bool], ok: bool
) -> list[Metric]:
    """The gauges of the projects `visible` accepts, and the state of the reads."""
    read_ok = _family(
        "trainledger_spend_read_ok",
        "1 when the last read of the spend totals finished within the scrape deadline",
        [],
    )
    read_ok.add_metric([], 1.0 if ok else 0.0)
    families: list[Metric] = [read_ok]
    if snapshot is None:
        return families
    taken = _family(
        "trainledger_spend_read_timestamp_seconds",
        "When the spend figures shown were read (seconds since the epoch)",
        [],
    )
    taken.add_metric([], snapshot.taken_at)
    seconds = _family(
        "trainledger_spend_read_seconds", "How long the read of the figures shown took", []
    )
    seconds.add_metric([], snapshot.read_seconds)
    shown = [p for p in snapshot.projects if visible(p.project)]
    count = _family(
        "trainledger_spend_projects_shown",
        f"Projects whose spend series this scrape shows (at most {config.projects}: those with"
        " the largest spend to date)",
        [],
    )
    count.add_metric([], float(len(shown)))
    omitted = _family(
        "trainledger_spend_projects_omitted",
        "Projects this token may read whose series are not shown (past the cap)",
        [],
    )
    omitted.add_metric([], float(snapshot.omitted))
    families += [taken, seconds, count, omitted]
    return [*families, *_spend(shown, config), *_budgets(shown)]


def _spend(projects: Sequence[ProjectSpend], config: SpendConfig) -> list[Metric]:
    base = ["project", "currency"]
    to_date = _family(
        "trainledger_spend_to_date", "The project's spend since its first event", base
    )
    stage = _family(
        "trainledger_spend_month_to_date",
        "Spend in the current calendar month (UTC), by stage",
        [*base, *config.stage_dims()],
    )
    experiment = _family(
        "trainledger_experiment_spend_month_to_date",
        f"Spend in the current calendar month (UTC), by experiment (the largest {config.top - 1}"
        f" per project, the rest as {OTHER})",
        [*base, "experiment"],
    )
    owner = _family(
        "trainledger_owner_spend_month_to_date",
        f"Spend in the current calendar month (UTC), by owner (the largest {config.top - 1}"
        f" per project, the rest as {OTHER})",
        [*base, "owner"],
    )
    for p in projects:
        to_date.add_metric([p.project, p.currency], as_float(p.to_date))
        for dims, cost in sorted(p.by_stage.items()):
            stage.add_metric([p.project, p.currency, *dims], as_float(cost))
        for name, cost in sorted(capped(p.by_experiment, config.top).items()):
            experiment.add_metric([p.project, p.currency, name], as_float(cost))
        for name, cost in sorted(capped(p.by_owner, config.top).items()):
            owner.add_metric([p.project, p.currency, name], as_float(cost))
    families: list[Metric] = [to_date, stage]
    if "experiment" in config.dimensions:
        families.append(experiment)
    if "owner" in config.dimensions:
        families.append(owner)
    return families


def _budgets(projects: Sequence[ProjectSpend]) -> list[Metric]:
    labels = ["project", "currency", "budget", "name", "period"]
    limit = _family("trainledger_budget_limit", "The budget's amount for its period", labels)
    spent = _family(
        "trainledger_budget_spend", "Spend in the budget's scope in its current period", labels
    )
    use = _family(
        "trainledger_budget_use_ratio", "The budget's spend over its amount (1 = all used)", labels
    )
    forecast = _family(
        "trainledger_budget_forecast",
        "The budget's forecast: a plan's budget by earned value, others linear to the period's end",
        labels,
    )
    for p in projects:
        for b in p.budgets:
            values = [p.project, p.currency, b.budget_id, b.name, b.period]
            limit.add_metric(values, as_float(b.limit))
            spent.add_metric(values, as_float(b.spent))
            use.add_metric(values, b.use_ratio)
            if b.forecast is not None:
                forecast.add_metric(values, as_float(b.forecast))
    return [limit, spent, use, forecast]
