"""Prometheus metrics, request ids and JSON logs, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from trainledger.http.observability import JsonFormatter, request_id
from trainledger.metrics import rejection_reason

from tests.api.test_ingest import post, put_card
from tests.conftest import (
    TEST_CARD,
    TEST_SECRET_KEY,
    Api,
    event,
    free_port,
    make_admin_token,
    wait_until_ready,
)

REPO = Path(__file__).resolve().parents[2]


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a /metrics page, keyed by name and sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def scrape(base_url: str) -> Samples:
    async with httpx.AsyncClient(base_url=base_url) as c:  # no token: /metrics is public
        r = await c.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        return samples(r.text)


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_count_what_ingestion_answered(api: Api) -> None:
    await put_card(api)
    before = await scrape(api.base_url)
    batch = [event(f"m-{i}", "2") for i in range(5)]
    batch.append(event("m-bad-sku", "1", sku="no.such.sku"))
    batch.append(event("m-bad-qty", "-1"))
    report = await post(api, batch)
    assert report["accepted"] == 5 and len(report["rejected"]) == 2  # type: ignore[arg-type]
    report = await post(api, batch[:3])
    assert report["duplicates"] == 3
    after = await scrape(api.base_url)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("trainledger_events_accepted_total") == 5
    assert delta("trainledger_events_duplicate_total") == 3
    assert delta("trainledger_events_rejected_total", reason="sku") == 1
    assert delta("trainledger_events_rejected_total", reason="quantity") == 1
    # Litestar's HTTP metrics, by path template; and the Redis round trips, by command.
    assert delta("trainledger_requests_total", **_http_labels(after, "/v1/events")) == 2
    # Single commands only: on a cluster the ingest script goes out in a pipeline with WAIT.
    commands = {
        dict(labels)["command"]
        for (name, labels), count in after.items()
        if name == "trainledger_redis_command_seconds_count"
        and count > value(before, name, **dict(labels))
    }
    assert commands, "every post sends some Redis commands on its own"
    if "cluster" not in api.redis_url:
        assert delta("trainledger_redis_command_seconds_count", command="EVALSHA") >= 2


def _http_labels(found: Samples, path: str) -> dict[str, str]:
    for name, labels in found:
        if name == "trainledger_requests_total" and ("path", path) in labels:
            return dict(labels)
    raise AssertionError(f"no request metric for {path}")


async def test_every_answer_carries_a_request_id(api: Api) -> None:
    async with api.client() as c:
        chosen = await c.get("/healthz", headers={"X-Request-ID": "job-42.retry:1"})
        fresh = await c.get("/healthz")
        hostile = await c.get("/healthz", headers={"X-Request-ID": "a b\tc<script>"})
        refused = await c.get("/v1/projects", headers={"Authorization": "Bearer nope"})
    assert chosen.headers["x-request-id"] == "job-42.retry:1"
    assert len(fresh.headers["x-request-id"]) == 32
    assert hostile.headers["x-request-id"] != "a b\tc<script>"
    assert refused.status_code == 401 and refused.headers["x-request-id"]


def test_json_log_lines_carry_the_request_id_and_fields() -> None:
    record = logging.LogRecord("tl", logging.WARNING, __file__, 1, "hello %s", ("x",), None)
    record.fields = {"status": 201}
    token = request_id.set("abc")
    try:
        line = JsonFormatter().format(record)
    finally:
        request_id.reset(token)
    doc = json.loads(line)
    assert doc["message"] == "hello x" and doc["level"] == "warning"
    assert doc["request_id"] == "abc" and doc["status"] == 201
    assert doc["time"].endswith("+00:00")


def test_rejection_reasons_are_a_bounded_set() -> None:
    assert rejection_reason("$[12].sku") == "sku"
    assert rejection_reason("$.tags.team") == "tags"
    assert rejection_reason("$[3]") == "body"
    assert rejection_reason(None) == "body"
    assert rejection_reason("$[1].whatever-a-client-sent") == "other"


@pytest.mark.slow
async def test_two_workers_share_metrics_and_log_json(clean_redis: str, tmp_path: Path) -> None:
    """`serve --workers 2`: /metrics sums both workers, and stderr is JSON with request ids."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLEDGER_", "PROMETHEUS"))}
    env.update(TRAINLEDGER_REDIS_URL=clean_redis, TRAINLEDGER_DATA_DIR=str(tmp_path))
    env["TRAINLEDGER_SECRET_KEY"] = TEST_SECRET_KEY  # an external Redis needs one given
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainledger.cli",
                "serve",
                "--port",
                str(port),
                "--workers",
                "2",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(proc, base, log_path.read_text)
        token = await make_admin_token(clean_redis)
        # A new connection per request: each is accepted by whichever worker is free.
        headers = {
            "Authorization": f"Bearer {token}",
            "X-Request-ID": "trace-7",
            "Connection": "close",
        }
        sent = 0
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as c:
            assert (await c.put("/v1/rate-cards/default", json=TEST_CARD)).status_code == 201
            # Rounds of concurrent posts until both workers have answered some (the kernel
            # spreads connections; the rounds are bounded).
            for round_ in range(20):
                posts = [
                    c.post("/v1/events", json=[event(f"w-{round_}-{i}-{j}", "1") for j in range(3)])
                    for i in range(20)
                ]
                answers = await asyncio.gather(*posts)
                assert all(a.status_code == 200 for a in answers)
                sent += 60
                if len(_event_pids(log_path)) == 2:
                    break
            assert len(_event_pids(log_path)) == 2, "both workers should have answered"
            found = await scrape(base)
            assert value(found, "trainledger_events_accepted_total") == sent
            # With a token, whichever worker answers adds the spend read from the totals (as
            # the folding process left them: a cost query folds what is pending first).
            assert (await c.get("/v1/costs", params={"project": "llm"})).status_code == 200
            for _ in range(4):
                page = await c.get("/metrics")  # a new connection each: either worker
                spend = samples(page.text)
                assert value(spend, "trainledger_events_accepted_total") == sent
                to_date = value(spend, "trainledger_spend_to_date", project="llm", currency="USD")
                assert to_date == float(Decimal("2.50") * sent)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    access = _access_lines(log_path)
    assert any(a["request_id"] == "trace-7" and a["path"] == "/v1/events" for a in access)
    assert all({"time", "level", "status", "duration_ms", "pid"} <= set(a) for a in access)


def _access_lines(log_path: Path) -> list[dict[str, object]]:
    lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.startswith("{")]
    return [line for line in lines if line["logger"] == "trainledger.access"]


def _event_pids(log_path: Path) -> set[object]:
    return {a["pid"] for a in _access_lines(log_path) if a["path"] == "/v1/events"}


def _serve(
    redis_url: str, tmp_path: Path, log_format: str
) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLEDGER_", "PROMETHEUS"))}
    env.update(TRAINLEDGER_REDIS_URL=redis_url, TRAINLEDGER_DATA_DIR=str(tmp_path))
    env["TRAINLEDGER_SECRET_KEY"] = TEST_SECRET_KEY  # an external Redis needs one given
    log_path = tmp_path / f"serve-{log_format}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainledger.cli",
                "serve",
                "--port",
                str(port),
                "--log-format",
                log_format,
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    base = f"http://127.0.0.1:{port}"
    wait_until_ready(proc, base, log_path.read_text)
    return proc, base, log_path


FORGED = "FORGED 2099-01-01 00:00:00,000 ERROR trainledger: admin token leaked"
# Percent-encoded line breaks and separators a path may carry (the server decodes them).
FORGING_PATHS = (
    "/nowhere%0a" + FORGED.replace(" ", "%20"),  # no route: a 404 before any middleware
    "/v1/projects/x%0d%0a" + FORGED.replace(" ", "%20"),  # a route: 400 or 404 from a handler
    "/v1/projects/x%e2%80%a8" + FORGED.replace(" ", "%20"),  # U+2028
    "/v1/projects/x%c2%85" + FORGED.replace(" ", "%20"),  # U+0085 NEL
    "/v1/projects/x%e2%80%ae" + FORGED.replace(" ", "%20"),  # U+202E
)


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_request_path_cannot_forge_a_log_line(
    clean_redis: str, tmp_path: Path, log_format: str
) -> None:
    """`serve --log-format text|json`: a path with encoded line breaks, separators or bidi
    characters is one access line, its characters escaped; 404s are logged too."""
    proc, base, log_path = _serve(clean_redis, tmp_path, log_format)
    try:
        token = await make_admin_token(clean_redis)
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as c:
            for path in FORGING_PATHS:
                r = await c.get(path)
                assert 400 <= r.status_code < 500, (path, r.status_code)
                assert r.headers.get("x-request-id")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log_path.read_text(encoding="utf-8")
    lines = text.split("\n")
    # No line starts with the forged text, and no record spans a line break or a separator.
    assert not any(line.startswith("FORGED") for line in lines)
    for sep in ("\r", "\x85", "\u2028", "\u2029", "\u202e"):
        assert sep not in text, repr(sep)
    forged = [line for line in lines if "FORGED" in line]
    assert len(forged) == len(FORGING_PATHS), forged
    for line in forged:
        if log_format == "json":
            doc = json.loads(line)
            assert doc["logger"] == "trainledger.access" and doc["status"] in (400, 404)
        else:
            assert " INFO trainledger.access: GET /" in line
            assert ("\\x0a" in line) or ("\\x0d" in line) or ("\\u" in line) or ("\\x85" in line)
    assert any("/nowhere" in line and "404" in line for line in forged)  # 404s are logged


def test_text_log_lines_escape_every_field() -> None:
    from trainledger.http.observability import TextFormatter

    try:
        raise ValueError("boom\nFORGED line")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "tl", logging.ERROR, __file__, 1, "a %s", ("b\r\nc\u2028",), exc_info
    )
    record.fields = {"path": "/p\x1b[31m\u202e", "status": 404}
    token = request_id.set("r-1")
    try:
        line = TextFormatter().format(record)
    finally:
        request_id.reset(token)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "\u2028" not in line and "\u202e" not in line
    assert "a b\\x0d\\x0ac\\u2028" in line
    assert "path=/p\\x1b[31m\\u202e" in line and "request_id=r-1" in line
    assert "boom\\x0aFORGED line" in line
