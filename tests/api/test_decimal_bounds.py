"""Every decimal the API accepts is held to one bound at the door (24 digits before the point,
18 after, as evaluation values always were), and the reports over values stored before that
bound still answer: a progress value of `1E+1000000` once broke a project's waste report and
dashboard for good (`decimal.Overflow`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import msgspec
import pytest
from trainledger.stores import Stores

from costcore.money import decimal_bound_problem
from tests.api.test_ingest import post, put_card
from tests.api.test_plans_http import plan_body
from tests.conftest import Api, event

REFUSED_VALUES = ("1e1000000", "1E+1000000", "-1e25", "1e24", "1e-19", "1" * 25)


@pytest.mark.parametrize(
    ("text", "bounded"),
    [
        ("0", True),
        ("0E+1000000", True),
        ("1.5e-3", True),
        ("999999999999999999999999.999999999999999999", True),
        ("1.500000000000000000000000", True),  # trailing zeros carry nothing
        ("1e24", False),
        ("1e-19", False),
        ("1E+1000000", False),
        ("-1E-1000000", False),
        ("Infinity", False),
        ("NaN", False),
    ],
)
def test_the_one_decimal_bound(text: str, bounded: bool) -> None:
    assert (decimal_bound_problem(Decimal(text)) is None) is bounded


async def test_a_huge_exponent_progress_value_is_refused(api: Api) -> None:
    async with api.client() as c:
        for value in REFUSED_VALUES:
            r = await c.post(
                "/v1/experiments/progress",
                params={"project": "pw"},
                json={"experiment": "e1", "metric": "loss", "value": value},
            )
            assert r.status_code == 400, (value, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "value" in r.text, r.text
        ok = await c.post(
            "/v1/experiments/progress",
            params={"project": "pw"},
            json={"experiment": "e1", "metric": "loss", "value": "1.5e-3"},
        )
        assert ok.status_code == 200, ok.text
        # The other doors of decimals: a rate card's price, a budget's growth, a tolerance.
        card = {
            "currency": "USD",
            "effective_from": "2020-01-01T00:00:00Z",
            "skus": [{"code": "a", "category": "compute", "unit": "h", "unit_price": "1" * 25}],
        }
        r = await c.put("/v1/rate-cards/huge", json=card)
        assert r.status_code == 400 and "unit_price" in r.text, r.text
        r = await c.put(
            "/v1/evaluations/settings", params={"project": "pw"}, json={"tolerance": "1" * 25}
        )
        assert r.status_code == 400 and "tolerance" in r.text, r.text


async def test_the_reports_answer_over_stored_extreme_values(api: Api) -> None:
    """Values written straight into the store, as an older service let them in: the waste
    report and the dashboard answer, the extreme point counts as a report (its time) and
    never as an improvement."""
    await put_card(api)
    now = datetime.now(UTC)
    await post(
        api,
        [
            event(
                f"x{k}", "2", time=(now - timedelta(days=k, hours=2)).isoformat(), experiment="e1"
            )
            for k in (0, 4, 5)
        ],
    )
    stores = Stores.from_url(api.redis_url)
    try:
        points = (  # hours ago, metric, value, higher is better
            (120, "score", "1.0", True),
            (24, "score", "1E+1000000", True),
            (20, "score", "0.5", True),
            (19, "loss", "-1E+1000000", False),
            (18, "loss", "1E-1000000", False),
        )
        for hours, metric, value, higher in points:
            point = {
                "time": (now - timedelta(hours=hours)).isoformat(),
                "metric": metric,
                "value": value,
                "higher_is_better": higher,
            }
            await stores.waste.add_experiment_progress("llm", "e1", msgspec.json.encode(point))
    finally:
        await stores.close()
    async with api.client() as c:
        r = await c.get("/v1/reports/waste", params={"project": "llm"})
        assert r.status_code == 200, r.text
        stalled = [f for f in r.json()["findings"] if f["kind"] == "experiment_stalled"]
        # The last improvement is the one bounded point, five days ago: the extreme ones
        # after it are not improvements.
        assert [f["evidence"]["keys"]["best_value"] for f in stalled] == ["1.0"], r.json()
        page = await c.get("/ui/llm")
        assert page.status_code == 200, page.text[:500]


async def test_a_plan_figure_with_a_huge_exponent_is_refused_naming_it(api: Api) -> None:
    await put_card(api)
    model = {
        "parameters": 7_000_000_000,
        "tokens": 1_000_000_000_000,
        "accelerator_sku": "gpu.h100.hour",
        "peak_flops_per_accelerator": "1e999",
        "mfu": "0.5",
    }
    async with api.client() as c:
        r = await c.post(
            "/v1/plans/estimate", json=plan_body(stages=[{"stage": "pretrain", "model": model}])
        )
        assert 400 <= r.status_code < 500, r.text
        assert "$.stages[0].model.peak_flops_per_accelerator" in r.text, r.text
        model["peak_flops_per_accelerator"] = "1e15"
        r = await c.post(
            "/v1/plans/estimate", json=plan_body(stages=[{"stage": "pretrain", "model": model}])
        )
        assert r.status_code == 200, r.text
