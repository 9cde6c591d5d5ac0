"""The cap on the projects a scrape shows: the read's work does not grow with the number of
projects, the ones shown are the largest by spend within the token's own list, and the ranking
a fold moves is the one a rebuild sets (service/spend_metrics, keys.py `spend_rank`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trainledger.ledger.folding import settle
from trainledger.ratecards.catalog import RateCards
from trainledger.spend_metrics.service import SpendGauges, read_snapshot
from trainledger.spend_metrics.settings import SpendConfig
from trainledger.stores import Stores

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event

NOW = datetime(2026, 11, 15, 12, tzinfo=UTC)


@dataclass
class Work:
    commands: int = 0  # Redis commands sent, each command of a pipeline counted
    round_trips: int = 0  # single commands and pipeline executions


@contextmanager
def counted(store: Stores) -> Iterator[Work]:
    """Count what the store's client sends, at the client (no MONITOR): every single command
    through `execute_command`, every pipeline by the commands it holds when executed."""
    client: Any = store.connection.client
    work = Work()
    single, make_pipeline = client.execute_command, client.pipeline

    async def execute_command(*args: Any, **options: Any) -> Any:
        work.commands += 1
        work.round_trips += 1
        return await single(*args, **options)

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = make_pipeline(*args, **kwargs)
        run = pipe.execute

        async def execute(*a: Any, **k: Any) -> Any:
            stack = getattr(pipe, "command_stack", None) or getattr(pipe, "_command_stack", [])
            work.commands += len(stack)
            work.round_trips += 1
            return await run(*a, **k)

        pipe.execute = execute
        return pipe

    client.execute_command, client.pipeline = execute_command, pipeline
    try:
        yield work
    finally:
        client.execute_command, client.pipeline = single, make_pipeline


async def make_projects(store: Stores, count: int) -> list[str]:
    """`count` projects with settings (a currency) and a spend ranking of `i` nano each (the
    ranking marked seeded, as the first scrape over the cap leaves it)."""
    names = [f"p{i:05d}" for i in range(count)]
    for i, name in enumerate(names):
        await store.projects.set_project_fields(name, {"currency": "USD"})
        await store.ledger.set_spend_rank(name, i)
    await store.projects.seed_spend_rank({})
    return names


async def scrape_work(store: Stores, config: SpendConfig, scope: frozenset[str] | None) -> Work:
    with counted(store) as work:
        await read_snapshot(store, RateCards(store), config, now=NOW, scope=scope)
    return work


async def test_a_scrape_reads_the_same_whatever_the_number_of_projects(store: Stores) -> None:
    config = SpendConfig(projects=4)
    await make_projects(store, 10)
    at_10 = await scrape_work(store, config, None)
    await make_projects(store, 100)  # the first 10 again, and 90 more
    at_100 = await scrape_work(store, config, None)
    assert at_100 == at_10
    # Three commands pick the projects (SCARD, EXISTS, ZREVRANGE); then a few pipelines of
    # the 4 only.
    assert at_10.round_trips <= 7
    assert at_10.commands <= 3 + 4 * 6


async def test_a_scoped_token_reads_the_same_whatever_its_list(store: Stores) -> None:
    config = SpendConfig(projects=3)
    names = await make_projects(store, 200)
    small = await scrape_work(store, config, frozenset(names[:10]))
    large = await scrape_work(store, config, frozenset(names))
    assert large == small  # SMISMEMBER and ZMSCORE of the list: one command each


async def test_the_largest_spenders_are_shown_and_the_rest_counted(store: Stores) -> None:
    names = await make_projects(store, 30)
    snapshot = await read_snapshot(store, RateCards(store), SpendConfig(projects=5), now=NOW)
    assert [p.project for p in snapshot.projects] == names[25:]
    assert snapshot.omitted == 25
    under = await read_snapshot(store, RateCards(store), SpendConfig(projects=30), now=NOW)
    assert [p.project for p in under.projects] == names and under.omitted == 0


async def test_a_token_is_ranked_within_its_own_list_only(store: Stores) -> None:
    names = await make_projects(store, 30)
    mine = frozenset([names[0], names[3], names[7], names[9], "not-a-project"])
    config = SpendConfig(projects=2)
    snapshot = await read_snapshot(store, RateCards(store), config, now=NOW, scope=mine)
    assert [p.project for p in snapshot.projects] == [names[7], names[9]]
    assert snapshot.omitted == 2  # p00000 and p00003: the unknown name is not counted
    everything = await read_snapshot(store, RateCards(store), SpendConfig(), now=NOW, scope=mine)
    assert {p.project for p in everything.projects} == {names[0], names[3], names[7], names[9]}


async def test_each_token_scope_keeps_its_own_figures(store: Stores) -> None:
    names = await make_projects(store, 6)
    gauges = SpendGauges(SpendConfig(ttl_seconds=3600, deadline_seconds=30, projects=2))
    everything, _ = await gauges.figures(store, RateCards(store))
    mine, _ = await gauges.figures(store, RateCards(store), frozenset(names[:2]))
    assert everything is not None and [p.project for p in everything.projects] == names[4:]
    assert mine is not None and [p.project for p in mine.projects] == names[:2]
    again, _ = await gauges.figures(store, RateCards(store))
    assert again is everything  # within the TTL: kept for its scope


async def test_the_ranking_a_fold_moves_is_the_one_a_rebuild_sets(api: Api, store: Stores) -> None:
    await put_card(api)
    await post(api, [event(f"a{i}", str(i + 1)) for i in range(40)])  # llm: 820 h x 2.50
    await post(api, [event(f"b{i}", "0.5", project="small") for i in range(7)])
    await post(api, [event(f"c{i}", "3", project="llm") for i in range(40, 60)])  # a 2nd batch
    for project in ("llm", "small"):
        await settle(store, project)
    client: Any = store.connection.client

    async def ranking() -> dict[str, float]:
        raw = await client.zrange("tl:spendrank", 0, -1, withscores=True)
        return {name.decode(): float(score) for name, score in raw}

    incremental = await ranking()
    for project in ("llm", "small"):
        exact = sum((await store.ledger.daily_costs(project)).values())
        assert incremental[project] == float(exact)
    assert incremental["llm"] == float(2_200_000_000_000)  # (820 + 60) h x 2.50 = 2,200.00
    await client.zadd("tl:spendrank", {"llm": 1.0, "small": 999.0})  # drifted (a lost ZINCRBY)
    async with api.client() as c:
        for project in ("llm", "small"):
            r = await c.post(f"/v1/projects/{project}/rebuild")
            assert r.status_code == 200, r.text
    assert await ranking() == incremental


async def test_data_folded_before_the_ranking_is_ranked_once_seeded(
    api: Api, store: Stores
) -> None:
    await put_card(api)
    await post(api, [event(f"a{i}", "4") for i in range(5)])  # llm: 20 h x 2.50 = 50.00
    await post(api, [event(f"b{i}", "1", project="small") for i in range(2)])  # 5.00
    for project in ("llm", "small"):
        await settle(store, project)
    client: Any = store.connection.client
    await client.delete("tl:spendrank")  # as a deployment upgraded with its data already folded
    await post(api, [event("b-late", "1", project="small")])  # one fold after the upgrade
    await settle(store, "small")
    snapshot = await read_snapshot(store, RateCards(store), SpendConfig(projects=1), now=NOW)
    assert [p.project for p in snapshot.projects] == ["llm"] and snapshot.omitted == 1
    raw = await client.zrange("tl:spendrank", 0, -1, withscores=True)
    assert {n.decode(): s for n, s in raw} == {"llm": 50e9, "small": 7.5e9}
