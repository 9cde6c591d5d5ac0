"""Usage events in, exact totals out: content types, exactly-once, atomicity, dead letters."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import msgspec
from trainledger.ingest.store import IngestPlan
from trainledger.storage.keys import Keys
from trainledger.stores import Stores

from tests.conftest import TEST_CARD, Api, ServerThread, event, sync_client


async def put_card(api: Api, name: str = "default", card: dict[str, object] | None = None) -> None:
    async with api.client() as c:
        r = await c.put(f"/v1/rate-cards/{name}", json=card or TEST_CARD)
        assert r.status_code == 201, r.text


async def total(api: Api, project: str = "llm", group_by: str = "category") -> dict[str, object]:
    async with api.client() as c:
        r = await c.get("/v1/costs", params={"project": project, "group_by": group_by})
        assert r.status_code == 200, r.text
        return dict(r.json())


async def post(
    api: Api, body: bytes | object, content_type: str = "application/json"
) -> dict[str, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with api.client() as c:
        r = await c.post("/v1/events", content=data, headers={"content-type": content_type})
        assert r.status_code in (200, 422), r.text
        return dict(r.json())


# --- content types -----------------------------------------------------------------------------


async def test_every_content_type_is_priced_the_same(api: Api) -> None:
    await put_card(api)
    now = datetime.now(UTC) - timedelta(hours=1)
    single = event("json-1", "2")
    batch = [event("json-2", "1"), event("json-3", "1")]
    ndjson = b"\n".join(json.dumps(e).encode() for e in [event("nd-1", "1"), event("nd-2", "1")])
    packed = msgspec.msgpack.encode([event("mp-1", "1"), {**event("mp-2"), "quantity": 1.5}])
    ce_one = {
        "specversion": "1.0",
        "id": "ce-1",
        "source": "slurm://cluster-a",
        "type": "dev.trainledger.usage",
        "subject": "llm",
        "time": now.isoformat(),
        "data": {"sku": "gpu.h100.hour", "quantity": "1", "stage": "pretrain"},
    }
    ce_batch = [
        {**ce_one, "id": "ce-2"},
        {
            **ce_one,
            "id": "ce-3",
            "data": {"sku": "gpu.h100.hour", "quantity": 0.5, "project": "llm"},
        },
    ]
    assert (await post(api, single))["accepted"] == 1
    assert (await post(api, batch))["accepted"] == 2
    assert (await post(api, ndjson, "application/x-ndjson"))["accepted"] == 2
    assert (await post(api, packed, "application/msgpack"))["accepted"] == 2
    assert (await post(api, ce_one, "application/cloudevents+json"))["accepted"] == 1
    assert (await post(api, ce_batch, "application/cloudevents-batch+json"))["accepted"] == 2
    # 2 + 1 + 1 + 1 + 1 + 1 + 1.5 + 1 + 1 + 0.5 = 11 GPU hours at 2.50
    report = await total(api, group_by="sku")
    assert report["total_cost"] == "27.50"
    assert report["rows"][0]["quantity"] == "11"  # type: ignore[index]
    assert report["total_events"] == 10
    # CloudEvents keep their source and type as tags, and their stage from data.
    stages = await total(api, group_by="stage")
    assert {r["key"]["stage"]: r["cost"] for r in stages["rows"]} == {  # type: ignore[attr-defined]
        "other": "22.50",  # 9 hours
        "pretrain": "5.00",  # ce-1 and ce-2: 2 hours
    }


async def test_each_format_has_its_own_route_read_as_post_events_reads_it(api: Api) -> None:
    """`POST /v1/events/{cloudevents,cloudevent,ndjson,msgpack}`: the format their path names,
    sent under its content type, an alias of it or none; any other type is a 415 naming the
    route's, and changes nothing. The same events cost what `POST /v1/events` makes them."""
    await put_card(api)
    now = (datetime.now(UTC) - timedelta(hours=1)).isoformat()

    def cloud(event_id: str) -> dict[str, object]:
        return {
            "specversion": "1.0",
            "id": event_id,
            "source": "//slurm/cluster-a",
            "type": "dev.trainledger.usage",
            "subject": "llm",
            "time": now,
            "data": {"sku": "gpu.h100.hour", "quantity": "1"},
        }

    def lines(*ids: str) -> bytes:
        return b"".join(json.dumps(event(i, "1")).encode() + b"\n" for i in ids)

    sent = [  # (route, content type or None, body, events accepted)
        ("cloudevents", "application/cloudevents-batch+json", [cloud("c-1"), cloud("c-2")], 2),
        ("cloudevents", None, [cloud("c-3")], 1),
        ("cloudevent", "application/cloudevents+json; charset=utf-8", cloud("c-4"), 1),
        ("cloudevent", None, cloud("c-5"), 1),
        ("ndjson", "application/x-ndjson", lines("n-1", "n-2"), 2),
        ("ndjson", "application/jsonl", lines("n-3"), 1),
        ("ndjson", None, lines("n-4"), 1),
        ("msgpack", "application/msgpack", msgspec.msgpack.encode([event("m-1", "1")]), 1),
        ("msgpack", "application/vnd.msgpack", msgspec.msgpack.encode(event("m-2", "1")), 1),
        ("msgpack", None, msgspec.msgpack.encode([event("m-3", "1")]), 1),
    ]
    answers = []
    async with api.client() as c:
        for route, media, body, _ in sent:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers = {} if media is None else {"content-type": media}
            r = await c.post(f"/v1/events/{route}", content=data, headers=headers)
            assert r.status_code == 200, (route, media, r.text)
            answers.append(r.json()["accepted"])
        refused = {}
        for route, media in (
            ("cloudevents", "application/json"),
            ("cloudevents", "application/cloudevents+json"),
            ("cloudevent", "application/cloudevents-batch+json"),
            ("ndjson", "application/json"),
            ("msgpack", "application/x-ndjson"),
            ("msgpack", "text/plain"),
        ):
            r = await c.post(
                f"/v1/events/{route}", content=lines("x-1"), headers={"content-type": media}
            )
            assert r.headers["content-type"].startswith("application/problem+json")
            refused[(route, media)] = (r.status_code, r.json()["detail"].rsplit("; ", 1)[1])
    assert answers == [n for *_, n in sent]
    assert refused == {
        ("cloudevents", "application/json"): (415, "use one of application/cloudevents-batch+json"),
        ("cloudevents", "application/cloudevents+json"): (
            415,
            "use one of application/cloudevents-batch+json",
        ),
        ("cloudevent", "application/cloudevents-batch+json"): (
            415,
            "use one of application/cloudevents+json",
        ),
        ("ndjson", "application/json"): (415, "use one of application/x-ndjson"),
        ("msgpack", "application/x-ndjson"): (415, "use one of application/msgpack"),
        ("msgpack", "text/plain"): (415, "use one of application/msgpack"),
    }
    # 12 one-hour events at 2.50; the refused bodies counted nothing.
    report = await total(api, group_by="sku")
    assert (report["total_events"], report["total_cost"]) == (12, "30.00")
    # `POST /v1/events` still reads every format under its content type.
    assert (await post(api, lines("old-1"), "application/x-ndjson"))["accepted"] == 1
    old_cloud = [cloud("old-2")]
    assert (await post(api, old_cloud, "application/cloudevents-batch+json"))["accepted"] == 1
    assert (await total(api))["total_events"] == 14


async def test_unsupported_media_type_and_malformed_bodies(api: Api) -> None:
    await put_card(api)
    async with api.client() as c:
        r = await c.post("/v1/events", content=b"x", headers={"content-type": "text/plain"})
        assert r.status_code == 415
        assert r.headers["content-type"].startswith("application/problem+json")
        r = await c.post(
            "/v1/events", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert r.status_code == 400
        body = r.json()
        assert body["errors"][0]["field"] == "$"
        assert "JSON" in body["detail"]
        bad_ce = {"specversion": "0.3", "id": "x", "source": "s", "type": "t"}
        r = await c.post(
            "/v1/events", json=bad_ce, headers={"content-type": "application/cloudevents+json"}
        )
        assert r.status_code == 400
        assert r.json()["errors"][0]["field"] == "$.specversion"
    assert (await total(api))["total_events"] == 0


async def test_bad_events_are_rejected_by_field_and_the_rest_accepted(api: Api) -> None:
    await put_card(api)
    old = (datetime.now(UTC) - timedelta(days=40)).isoformat()
    future = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    body = [
        event("ok-1", "4"),
        event("neg", "-1"),
        event("nan", "NaN"),
        event("snan", "sNaN"),
        event("precise", "0.0000001"),
        {**event("typed"), "quantity": {"x": 1}},
        event("old", "1", time=old),
        event("future", "1", time=future),
        event("nosku", "1", sku="gpu.unknown.hour"),
        {**event("naive"), "time": "2026-01-01T00:00:00"},
        {**event("extra"), "colour": "red"},
        event("ok-2", "2"),
    ]
    report = await post(api, body)
    assert report["accepted"] == 2
    reasons = {r["id"]: (r["field"], r["reason"]) for r in report["rejected"]}  # type: ignore[attr-defined]
    assert reasons["neg"][0] == "$[1].quantity" and "negative" in reasons["neg"][1]
    assert reasons["nan"][0] == "$[2].quantity"
    assert reasons["snan"][0] == "$[3].quantity"
    assert "decimal places" in reasons["precise"][1]
    assert reasons["typed"][0] == "$[5].quantity"
    assert reasons["old"][0] == "$[6].time" and "window" in reasons["old"][1]
    assert reasons["future"][0] == "$[7].time"
    assert reasons["nosku"][0] == "$[8].sku" and "gpu.unknown.hour" in reasons["nosku"][1]
    assert reasons["naive"][0] == "$[9].time"
    assert reasons["extra"][0] == "$[10]" or "colour" in reasons["extra"][1]
    assert (await total(api))["total_cost"] == "15.00"
    # Every rejected event with a project and id is kept as a dead letter.
    async with api.client() as c:
        r = await c.get("/v1/events/rejected", params={"project": "llm"})
    assert r.status_code == 200
    assert {i["id"] for i in r.json()["items"]} == set(reasons)


async def test_identifiers_cannot_escape_their_key_space(api: Api) -> None:
    """A project, label or tag that breaks its pattern is rejected and builds no Redis key."""
    await put_card(api)
    body = [
        event("p1", "1", project="llm}:x"),
        event("p2", "1", project="llm\n"),
        event("p3", "1", experiment="a\x1fb"),
        event("p4", "1", tags={"team": "x\x1ey"}),
        event("p5", "1", tags={"bad key": "v"}),
        event("p6/../x", "1"),  # ids may hold '/', '.', ':' — this one is fine
        {**event("p7", "1"), "id": "{p:other}"},
    ]
    report = await post(api, body)
    fields = {r["index"]: r["field"] for r in report["rejected"]}  # type: ignore[attr-defined]
    assert fields == {
        0: "$[0].project",
        1: "$[1].project",
        2: "$[2].experiment",
        3: "$[3].tags.team",
        4: "$[4].tags",
        6: "$[6].id",
    }
    assert report["accepted"] == 1
    client = sync_client(api.redis_url)
    assert [k for k in client.keys("*") if b"llm}:x" in k or b"\n" in k or b"other" in k] == []


async def test_a_single_event_body_names_fields_from_its_root(api: Api) -> None:
    await put_card(api)
    async with api.client() as c:
        r = await c.post("/v1/events", json=event("s", "-1"))
    assert r.status_code == 422
    assert r.json()["errors"] == [
        {"field": "$.quantity", "reason": r.json()["rejected"][0]["reason"]}
    ]


async def test_all_rejected_is_a_422_problem(api: Api) -> None:
    await put_card(api)
    async with api.client() as c:
        r = await c.post("/v1/events", json=[event("a", "-1")])
    assert r.status_code == 422
    body = r.json()
    assert r.headers["content-type"].startswith("application/problem+json")
    assert body["errors"] == [{"field": "$[0].quantity", "reason": body["rejected"][0]["reason"]}]


# --- exactly once ------------------------------------------------------------------------------


async def test_duplicates_across_batches_are_counted_once(api: Api) -> None:
    await put_card(api)
    first = [event(f"e{i}", "1") for i in range(10)]
    overlapping = [event(f"e{i}", "1") for i in range(5, 15)]
    r1 = await post(api, first)
    r2 = await post(api, overlapping)
    r3 = await post(api, overlapping)  # a retry of the whole batch
    within = await post(api, [event("w", "1"), event("w", "1")])
    assert (r1["accepted"], r1["duplicates"]) == (10, 0)
    assert (r2["accepted"], r2["duplicates"]) == (5, 5)
    assert (r3["accepted"], r3["duplicates"]) == (0, 10)
    assert (within["accepted"], within["duplicates"]) == (1, 1)
    report = await total(api)
    assert report["total_events"] == 16
    assert report["total_cost"] == "40.00"


async def test_concurrent_posts_from_two_workers_count_each_event_once(api: Api) -> None:
    """Two server instances (separate loops and connection pools) race on overlapping batches."""
    await put_card(api)
    second = await asyncio.to_thread(lambda: ServerThread(api.redis_url).start())
    try:
        other = Api(second.base_url, api.admin_token, api.redis_url)
        batches = [[event(f"c{j}", "1") for j in range(i, i + 50)] for i in range(0, 300, 25)]

        async def send(target: Api, batch: list[dict[str, object]]) -> dict[str, object]:
            return await post(target, batch)

        results = await asyncio.gather(
            *[send(api if k % 2 else other, b) for k, b in enumerate(batches) for _ in range(2)]
        )
        accepted = sum(int(r["accepted"]) for r in results)  # type: ignore[call-overload]
        dups = sum(int(r["duplicates"]) for r in results)  # type: ignore[call-overload]
        distinct = len({e["id"] for b in batches for e in b})
        assert accepted == distinct == 325
        assert accepted + dups == 2 * sum(len(b) for b in batches)
        report = await total(api)
        assert report["total_events"] == 325
        assert report["total_cost"] == str(Decimal("2.50") * 325)
    finally:
        await asyncio.to_thread(second.stop)


async def test_tiers_stay_exact_under_concurrent_writers(api: Api) -> None:
    """Graduated storage price across three tiers, written by two servers at once.

    Whatever the interleaving, the month's cost is the graduated price of the month's total
    quantity: 1,500 GB-days = 100 × 0.002 + 900 × 0.0015 + 500 × 0.001 = 0.20 + 1.35 + 0.50.
    """
    await put_card(api)
    second = await asyncio.to_thread(lambda: ServerThread(api.redis_url).start())
    try:
        other = Api(second.base_url, api.admin_token, api.redis_url)
        when = datetime.now(UTC).replace(day=1, hour=0, minute=30).isoformat()

        # 150 events of 10 GB-days each, every event its own request, alternating servers.
        # A 503 says the outcome is unknown; as the API asks, the client sends the same event
        # again, and a retry that finds it applied answers it as a duplicate.
        async def send(target: Api, body: object) -> int:
            for _ in range(10):
                async with target.client() as c:
                    r = await c.post("/v1/events", json=body)
                if r.status_code != 503:
                    assert r.status_code == 200, r.text
                    answer = r.json()
                    return int(answer["accepted"]) + int(answer["duplicates"])
                await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
            raise AssertionError(f"still 503 after 10 tries: {r.text}")

        sends = [
            send(
                api if i % 2 else other, [event(f"s{i}", "10", sku="storage.hot.gb_day", time=when)]
            )
            for i in range(150)
        ]
        counted = await asyncio.gather(*sends)
        assert sum(counted) == 150
        report = await total(api, group_by="sku")
        assert report["total_cost"] == "2.05"
        assert report["rows"][0]["quantity"] == "1500"  # type: ignore[index]
    finally:
        await asyncio.to_thread(second.stop)


async def test_duplicate_inside_the_script_leaves_nothing_behind(api: Api, store: Stores) -> None:
    """The ingest script finds an id already seen: it must undo its own marks and write nothing."""
    await put_card(api)
    await post(api, [event("seen", "1")])
    client = sync_client(api.redis_url)
    before = {k: client.dump(k) for k in client.keys("tl:{p:llm}:*")}
    plan = IngestPlan(
        project="llm",
        event_ids=["fresh-1", "seen", "fresh-2"],
        seen_shards=[0, _shard("seen"), 1],
        expiry_days=[99999, 99999, 99999],
        tier_checks=[],
        increments=[(Keys.daily("llm"), "20990101", 5)],
        log_blob=b"x",
        currency="USD",
        rate_card="default",
        duplicates_seen=0,
        log_min_id="",
    )
    outcome = await store.ingest.apply_batch(plan)
    assert outcome.status == 1 and outcome.duplicate_positions == (1,)
    after = {k: client.dump(k) for k in client.keys("tl:{p:llm}:*")}
    assert after == before
    # A moved tier counter is refused before anything is written, too.
    moved = IngestPlan(
        **{
            **plan.__dict__,
            "event_ids": ["fresh-1"],
            "seen_shards": [0],
            "expiry_days": [99999],
            "tier_checks": [("209901", "x", 7)],
        }
    )
    assert (await store.ingest.apply_batch(moved)).status == 2
    assert {k: client.dump(k) for k in client.keys("tl:{p:llm}:*")} == before


def _shard(event_id: str) -> int:
    from trainledger.storage.keys import seen_shard

    return seen_shard(event_id)


# --- dead letters ------------------------------------------------------------------------------


async def test_rejected_events_are_listed_fixed_and_replayed(api: Api) -> None:
    await put_card(api)
    report = await post(
        api, [event("r1", "3", sku="gpu.b200.hour"), event("r2", "1", sku="gpu.b200.hour")]
    )
    assert report["accepted"] == 0
    async with api.client() as c:
        page = (await c.get("/v1/events/rejected", params={"project": "llm", "limit": 1})).json()
        assert page["total"] == 2 and len(page["items"]) == 1 and page["next_offset"] == 1
        # Nothing changes by replaying before the cause is fixed.
        again = await c.post("/v1/events/rejected/replay", params={"project": "llm"}, json={})
        assert again.status_code == 422
        # Fix the cause: a new card version that knows the SKU, effective from before the events.
        card = json.loads(json.dumps(TEST_CARD))
        card["skus"].append(
            {"code": "gpu.b200.hour", "category": "compute", "unit": "hour", "unit_price": "5.00"}
        )
        card["effective_from"] = (datetime.now(UTC) - timedelta(days=7)).isoformat()
        assert (await c.put("/v1/rate-cards/default", json=card)).status_code == 201
        replay = await c.post(
            "/v1/events/rejected/replay", params={"project": "llm"}, json={"ids": ["r1"]}
        )
        assert replay.status_code == 200 and replay.json()["accepted"] == 1
        # The other is fixed by posting a corrected event with the same id.
        fixed = await c.post("/v1/events", json=event("r2", "2", sku="gpu.b200.hour"))
        assert fixed.json()["accepted"] == 1
        page = (await c.get("/v1/events/rejected", params={"project": "llm"})).json()
        assert page["total"] == 0
    assert (await total(api))["total_cost"] == "25.00"


async def test_dropping_dead_letters(api: Api) -> None:
    await put_card(api)
    await post(api, [event("d1", "-1"), event("d2", "-2")])
    async with api.client() as c:
        r = await c.request(
            "DELETE", "/v1/events/rejected", params={"project": "llm"}, json={"ids": ["d1"]}
        )
        assert r.json() == {"deleted": 1}
        page = (await c.get("/v1/events/rejected", params={"project": "llm"})).json()
    assert [i["id"] for i in page["items"]] == ["d2"]


async def test_expired_ids_are_swept_and_live_ones_kept(api: Api, store: Stores) -> None:
    await put_card(api)
    old = (datetime.now(UTC) - timedelta(days=30)).isoformat()
    await post(api, [event("old", "1", time=old), event("new", "1")])
    today = (datetime.now(UTC) - datetime(1970, 1, 1, tzinfo=UTC)).days
    # Nothing has expired yet: both ids stay and still deduplicate.
    assert await store.ingest.sweep_seen("llm", today) == 0
    # A week on, the 30-day-old event is past the 35-day window (ids are kept one spare day).
    assert await store.ingest.sweep_seen("llm", today + 6) == 0
    assert await store.ingest.sweep_seen("llm", today + 7) == 1
    again = await post(api, [event("new", "1")])
    assert again["duplicates"] == 1
