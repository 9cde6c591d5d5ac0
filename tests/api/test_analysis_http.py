"""The design-decision analyses over HTTP."""

from __future__ import annotations

import msgspec

from tests.conftest import Api
from tests.unit.analysis.test_analysis import _ckpt, _data, _mixes, _storage


async def test_checkpoint_interval_over_http(api: Api) -> None:
    body = msgspec.to_builtins(_ckpt(restart_seconds="180", current_interval_hours="6"))
    async with api.client() as c:
        r = await c.post("/v1/analysis/checkpoint-interval", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    # Worked in tests/unit/analysis/test_analysis.py:
    # Young sqrt(2 × 0.1 h × 20 h) = 2 h; cost 20 500.
    assert out["young_interval_hours"] == "2"
    assert [o["total_cost"] for o in out["options"] if o["name"] == "optimum"] == ["20500.00"]


async def test_every_analysis_answers_with_options_and_assumptions(api: Api) -> None:
    bodies = {
        "data-strategy": _data(),
        "domain-mix": _mixes(),
        "checkpoint-interval": _ckpt(),
        "storage-lifecycle": _storage(
            [
                {
                    "name": "ckpt",
                    "initial_gb": "1000",
                    "growth_gb_per_month": "500",
                    "warm_after_days": 30,
                    "archive_after_days": 60,
                    "delete_after_days": 120,
                }
            ],
            6,
        ),
    }
    async with api.client() as c:
        for name, body in bodies.items():
            r = await c.post(f"/v1/analysis/{name}", json=msgspec.to_builtins(body))
            assert r.status_code == 200, (name, r.text)
            out = r.json()
            assert out["options"] and out["assumptions"] and "recommended" in out, name


async def test_analysis_errors_name_the_field(api: Api) -> None:
    async with api.client() as c:
        r = await c.post("/v1/analysis/checkpoint-interval", json={"accelerators": 0})
    assert r.status_code == 400
    assert r.json()["errors"][0]["field"].startswith("$.")
    read_token = await api.token("read")
    async with api.client(read_token) as c:
        ok = await c.post("/v1/analysis/checkpoint-interval", json=msgspec.to_builtins(_ckpt()))
    assert ok.status_code == 200
