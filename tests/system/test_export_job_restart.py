"""An export job survives its worker process: `trainledger serve` stopped while the job waits
behind a lease a dead worker still holds, started again, runs the job once the lease has run
out, and the file it serves is byte for byte the streamed export."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis
from trainledger.storage.keys import Keys

from tests.conftest import TEST_CARD, event
from tests.system.test_restart import MAX_POLLS, POLL_INTERVAL, data_dir, http, serve

__all__ = ["data_dir", "serve"]  # the fixtures, used by name

pytestmark = pytest.mark.slow

DEAD_LEASE_MS = 3_000  # the dead worker's lease: runs out while serve is down or soon after


def test_an_export_job_survives_a_restart(data_dir: Path, serve: Any) -> None:
    first = serve(data_dir)
    admin = (data_dir / "admin-token").read_text().strip()
    with http(first.base_url, admin) as c:
        assert c.put("/v1/rate-cards/default", json=TEST_CARD).status_code == 201
        for b in range(5):
            batch = [event(f"b{b}-{i}", "1.5", experiment=f"x{i % 4}") for i in range(60)]
            assert c.post("/v1/events", json=batch).json()["accepted"] == 60
    # A worker took the project's lease and died: nobody runs its jobs until the lease ends.
    client = redis.Redis.from_url((data_dir / "valkey.url").read_text().strip())
    try:
        assert client.set(Keys.job_lease("llm"), "dead", px=DEAD_LEASE_MS)
    finally:
        client.close()
    with http(first.base_url, admin) as c:
        r = c.post("/v1/export/focus/jobs", params={"project": "llm"})
        assert r.status_code == 202, r.text
        href = r.headers["location"]
        assert c.get(href).json()["state"] == "queued"
    assert first.stop() == 0

    second = serve(data_dir)
    with http(second.base_url, admin) as c:
        for _ in range(MAX_POLLS):
            job = c.get(href).json()
            if job["state"] not in ("queued", "running"):
                break
            time.sleep(POLL_INTERVAL)
        assert job["state"] == "succeeded", (job, second.log())
        assert job["progress"] == {"done": 300, "total": 300} and job["attempts"] == 1
        streamed = c.get("/v1/export/focus", params={"project": "llm"})
        got = c.get(job["download"]["href"])
        assert got.status_code == 200 and got.content == streamed.content
        assert job["download"]["rows"] == 300
    assert second.stop() == 0
