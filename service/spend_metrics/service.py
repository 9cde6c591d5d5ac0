"""The spend gauges' use case: pick the projects a scrape shows (at most
`SpendConfig.projects`: those with the largest spend to date, by the ranking each fold keeps),
read their totals and budgets in a few pipelines, keep the figures a short while per token
scope, and write them for a scrape without holding it up.

Nothing here runs on the ingest path: the figures are read when a scrape asks (at most once
per `SpendConfig.ttl_seconds` and scope), from the totals as folded and the budget counters.
The work of a read is bounded by the cap, not by the number of projects
(docs/reference/metrics.md, "How many projects a scrape shows").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess, values
from prometheus_client.registry import Collector

from ..budgets.firing import spend_field
from ..budgets.model import Budget, amount_nano, forecast, shown_period
from ..costs.plan import plan_reads
from ..costs.query import CostQuery, day_key
from ..ledger.rollups import ROLLUP_VERSION
from ..ledger.store import KeptState
from ..projects.model import ProjectSettings
from ..projects.service import project_currency
from ..ratecards.catalog import RateCards
from .model import (
    BudgetFigures,
    ProjectSpend,
    Snapshot,
    cost_cells,
    month_of,
    spend_families,
)
from .settings import SpendConfig

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from ..auth.model import Principal
    from ..stores import Stores

log = logging.getLogger("trainledger.metrics")
_budget_decoder = msgspec.json.Decoder(Budget)
# A read still going this long after it started is left behind: the next scrape starts another
# (scrapes stop waiting for a read after `deadline_seconds`).
_READ_LIMIT_SECONDS = 60.0


def _month_reads(
    project: str, state: KeptState, config: SpendConfig, now: datetime
) -> list[tuple[tuple[str, ...], str, tuple[str, ...], list[str]]]:
    """(wanted dims, source, source dims, periods) of the month's cost by stage and, when
    opted in, by experiment and owner: the smallest kept totals that hold them."""
    first, nxt = month_of(now)
    lo, hi = day_key(first), day_key(nxt)
    days = sorted(d for d in state.daily if lo <= d < hi)
    if not days:
        return []
    groups = [config.stage_dims()]
    if {"experiment", "owner"} & set(config.dimensions):
        groups.append(("experiment", "owner"))
    reads = []
    for dims in groups:
        query = CostQuery(project, from_day=first, to_day=nxt, group_by=dims)
        plan = plan_reads(query, days, state.rollups_complete)
        reads.append((dims, plan.source, plan.dims, [*plan.days, *plan.months]))
    return reads


async def _month_costs(
    store: Stores,
    projects: Sequence[str],
    states: Sequence[KeptState],
    config: SpendConfig,
    now: datetime,
) -> list[dict[tuple[str, ...], dict[tuple[str, ...], int]]]:
    """Per project: wanted dims -> their exact month cost per cell, in one pipeline."""
    plans = [_month_reads(p, s, config, now) for p, s in zip(projects, states, strict=True)]
    flat = [
        (p, source, periods)
        for p, reads in zip(projects, plans, strict=True)
        for _, source, _, periods in reads
    ]
    hashes = iter(await store.ledger.many_totals_hashes(flat) if flat else [])
    return [
        {dims: cost_cells(next(hashes), source_dims, dims) for dims, _, source_dims, _ in reads}
        for reads in plans
    ]


async def _budget_figures(
    store: Stores, projects: Sequence[str], now: datetime
) -> list[list[BudgetFigures]]:
    """Per project: each budget's amount, spend in the period shown, and forecast."""
    raw = await store.budgets.many_budgets(projects)
    budgets = [[_budget_decoder.decode(b) for b in raws] for raws in raw]
    bounds = [[shown_period(b, now) for b in bs] for bs in budgets]
    reads = [
        (p, [spend_field(b.id, at.name) for b, at in zip(bs, ats, strict=True)])
        for p, bs, ats in zip(projects, budgets, bounds, strict=True)
        if bs
    ]
    spends = iter(await store.budgets.many_spends(reads) if reads else [])
    out = []
    for bs, ats in zip(budgets, bounds, strict=True):
        spent = next(spends) if bs else []
        out.append(
            [
                BudgetFigures(
                    b.id,
                    b.name,
                    b.period,
                    amount_nano(b),
                    s,
                    forecast(b, s, at, now),
                )
                for b, at, s in zip(bs, ats, spent, strict=True)
            ]
        )
    return out


async def _currency(store: Stores, rate_cards: RateCards, project: str, state: KeptState) -> str:
    currency = ProjectSettings.of(state.meta).currency
    if currency is not None:
        return currency
    return await project_currency(store, rate_cards, project)  # no event priced yet


# The projects a scrape may see: None for a token of every project, else the token's list.
Scope = frozenset[str] | None


async def shown_projects(store: Stores, cap: int, scope: Scope) -> tuple[list[str], int]:
    """The projects of `scope` a scrape shows, sorted, and how many more it could see.

    At most `cap`: when the scope holds more, the `cap` largest by spend to date (the ranking
    each fold keeps: keys.py `spend_rank`). Three commands whatever the number of projects
    (after the ranking's one-time seed, `_seeded`), and never a project outside `scope`."""
    if scope is None:
        count = await store.projects.project_count()
        if count <= cap:
            return await store.projects.projects(), 0
        await _seeded(store)
        top = [name for name, _ in await store.projects.top_spenders(cap)]
        return sorted(top), count - len(top)
    known = await store.projects.known_projects(sorted(scope))
    if len(known) <= cap:
        return known, 0
    await _seeded(store)
    ranks = await store.projects.spend_ranks(known)
    ranked = sorted(zip(ranks, known, strict=True), key=lambda rn: (-rn[0], rn[1]))
    return sorted(name for _, name in ranked[:cap]), len(known) - cap


async def _seeded(store: Stores) -> None:
    """Seed the ranking once from every project's daily index, for data folded before the
    ranking existed: one read of every project, the first time a scrape needs the ranking."""
    if await store.projects.spend_rank_seeded():
        return
    projects = await store.projects.projects()
    costs = await store.ledger.spends_to_date(projects) if projects else []
    await store.projects.seed_spend_rank(dict(zip(projects, costs, strict=True)))


async def read_snapshot(
    store: Stores,
    rate_cards: RateCards,
    config: SpendConfig,
    now: datetime | None = None,
    scope: Scope = None,
) -> Snapshot:
    """The spend figures of the projects `shown_projects` picks, read in a few pipelines of at
    most `config.projects` projects each, whatever the number of projects."""
    started = time.monotonic()
    now = now or datetime.now(UTC)
    projects, omitted = await shown_projects(store, config.projects, scope)
    states, budgets = await asyncio.gather(
        store.ledger.kept_states(projects, ROLLUP_VERSION), _budget_figures(store, projects, now)
    )
    months = await _month_costs(store, projects, states, config, now)
    spends = []
    for project, state, month, figures in zip(projects, states, months, budgets, strict=True):
        currency = await _currency(store, rate_cards, project, state)
        spend = ProjectSpend(project, currency, sum(state.daily.values()), budgets=figures)
        spend.by_stage = month.get(config.stage_dims(), {})
        by_person = month.get(("experiment", "owner"), {})
        for (experiment, owner), cost in by_person.items():
            spend.by_experiment[experiment] = spend.by_experiment.get(experiment, 0) + cost
            spend.by_owner[owner] = spend.by_owner.get(owner, 0) + cost
        spends.append(spend)
    return Snapshot(spends, now.timestamp(), time.monotonic() - started, omitted)


class _Reads:
    """The last figures read of one scope, and at most one read in flight (scrapes that come
    while it runs wait for the same one)."""

    def __init__(self, config: SpendConfig, scope: Scope) -> None:
        self.config = config
        self.scope = scope
        self.snapshot: Snapshot | None = None
        self._read_at = float("-inf")  # monotonic time of the figures kept
        # The read in flight and when it started (monotonic).
        self._reading: tuple[asyncio.Task[None], float] | None = None
        self._ok = True

    @property
    def reading(self) -> bool:
        """Whether a read is in flight."""
        return self._reading is not None and not self._reading[0].done()

    async def figures(self, store: Stores, rate_cards: RateCards) -> tuple[Snapshot | None, bool]:
        now = time.monotonic()
        if self.snapshot is not None and now - self._read_at < self.config.ttl_seconds:
            return self.snapshot, self._ok
        if self._reading is None or now - self._reading[1] > _READ_LIMIT_SECONDS:
            # A read stuck past the limit is left to itself, not cancelled: a cancellation
            # inside redis-py's cluster client closes every connection (http/deadline.py).
            task = asyncio.create_task(self._read(store, rate_cards))
            self._reading = (task, now)
        reading = self._reading[0]
        # asyncio.wait never cancels what it waits for: the scrape leaves, the read goes on.
        await asyncio.wait({reading}, timeout=self.config.deadline_seconds)
        if not reading.done():
            self._ok = False
        return self.snapshot, self._ok

    async def _read(self, store: Stores, rate_cards: RateCards) -> None:
        mine = asyncio.current_task()
        try:
            snapshot = await read_snapshot(store, rate_cards, self.config, scope=self.scope)
        except Exception as exc:  # Redis away: the scrape says so (read_ok 0)
            log.warning("reading the spend figures failed: %r", exc)
            self._ok = False
            return
        finally:
            if self._reading is not None and self._reading[0] is mine:
                self._reading = None
        if self.snapshot is None or snapshot.taken_at >= self.snapshot.taken_at:
            self.snapshot, self._read_at, self._ok = snapshot, time.monotonic(), True


# Token scopes whose figures are kept at once (a scrape of another drops the oldest kept).
_SCOPES_KEPT = 32


class SpendGauges:
    """The figures of each token scope that scraped lately (a scope picks its own top
    projects, so figures are kept per scope, not filtered from one read of every project)."""

    def __init__(self, config: SpendConfig) -> None:
        self.config = config
        self._scopes: dict[Scope, _Reads] = {}

    @property
    def reading(self) -> bool:
        """Whether a read is in flight."""
        return any(r.reading for r in self._scopes.values())

    async def figures(
        self, store: Stores, rate_cards: RateCards, scope: Scope = None
    ) -> tuple[Snapshot | None, bool]:
        """The figures to show `scope` and whether they are fresh: a read within the TTL, or
        one that finished within the deadline. Otherwise the last figures, marked not ok (the
        read goes on in the background for the next scrape)."""
        reads = self._scopes.pop(scope, None) or _Reads(self.config, scope)
        self._scopes[scope] = reads  # the most recent last
        while len(self._scopes) > _SCOPES_KEPT:
            del self._scopes[next(iter(self._scopes))]
        return await reads.figures(store, rate_cards)


class _Figures(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def process_metrics() -> bytes:
    """The ledger's own metrics in the text format: this process's, or with several workers
    (PROMETHEUS_MULTIPROC_DIR set) the sum over all of them."""
    registry: Any = REGISTRY
    if values.ValueClass is not values.MutexValue:  # prometheus_client's multiprocess mode
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


async def exposition(
    gauges: SpendGauges,
    store: Stores,
    rate_cards: RateCards,
    principal: Principal | None,
) -> bytes:
    """The /metrics page: the process metrics, and with `principal` (a scrape with a token
    that may read) the spend gauges of its projects (at most `SpendConfig.projects`)."""
    page = process_metrics()
    if principal is None:
        return page
    visible = principal.can_access
    snapshot, ok = await gauges.figures(store, rate_cards, principal.projects)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Figures(spend_families(snapshot, gauges.config, visible, ok)))
    return page + generate_latest(registry)
