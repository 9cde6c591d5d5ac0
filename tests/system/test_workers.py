"""Several worker processes (`trainledger serve --workers 2`) sharing one Redis.

Exact totals and exactly one alert per threshold, with the requests spread over processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.test_budgets import alerts, make_budget, this_month
from tests.api.test_ingest import post, put_card
from tests.conftest import TEST_SECRET_KEY, Api, event, free_port, wait_until_ready

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def start_workers(
    redis_url: str, data_dir: Path, workers: int
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env["TRAINLEDGER_REDIS_URL"] = redis_url
    env["TRAINLEDGER_DATA_DIR"] = str(data_dir)
    env["TRAINLEDGER_SECRET_KEY"] = TEST_SECRET_KEY  # an external Redis needs one given
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainledger.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(proc, base)
    except AssertionError:
        proc.kill()
        raise
    return proc, base


async def test_two_worker_processes_count_exactly_and_alert_once(api: Api, tmp_path: Path) -> None:
    await put_card(api)
    await make_budget(api)  # 100.00 a month; 50 / 80 / 100 %
    proc, base = await asyncio.to_thread(start_workers, api.redis_url, tmp_path, 2)
    try:
        workers = Api(base, api.admin_token, api.redis_url)
        # 80 requests of 1 hour (2.50), each id sent twice, over separate connections so that
        # uvicorn spreads them over both processes; plus a tiered SKU to contend on counters.
        sends = []
        for i in range(80):
            body = [
                event(f"w{i}", "1", time=this_month()),
                event(f"s{i}", "10", sku="storage.hot.gb_day", time=this_month()),
            ]
            sends += [post(workers, body), post(workers, body)]
        results = await asyncio.gather(*sends)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
    assert sum(int(r["accepted"]) for r in results) == 160  # type: ignore[call-overload]
    assert sum(int(r["duplicates"]) for r in results) == 160  # type: ignore[call-overload]
    async with api.client() as c:
        by_sku = (await c.get("/v1/costs", params={"project": "llm", "group_by": "sku"})).json()
    costs = {r["key"]["sku"]: r["cost"] for r in by_sku["rows"]}
    # 80 GPU hours at 2.50; 800 GB-days graduated: 100 × 0.002 + 700 × 0.0015 = 1.25.
    assert costs == {"gpu.h100.hour": "200.00", "storage.hot.gb_day": "1.25"}
    fired = await alerts(api)
    assert sorted(a["threshold_pct"] for a in fired) == [50, 80, 100]
