"""The client commands: `events post`, `spool put|flush`, `agent`, and the on-call commands
`budgets`, `alerts`, `webhooks`, against a real service (the `api` fixture, or a rate-limited
one), run in-process through `trainledger.cli.main` (the agent as a real process, for its
signals)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from trainledger.cli import main
from trainledger.client import Spool
from trainledger.config import Settings

from tests.api.test_webhooks import Receiver, check_standard, receiving
from tests.conftest import TEST_CARD, Api, ServerThread, event, free_port, make_admin_token
from tests.small_fs import fill

REPO = Path(__file__).resolve().parents[2]
MAX_POLLS = 1200


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def conn(url: str, token: str) -> list[str]:
    return ["--url", url, "--token", token]


async def card(api: Api) -> None:
    async with api.client() as c:
        assert (await c.put("/v1/rate-cards/default", json=TEST_CARD)).status_code == 201


async def total_events(api: Api, project: str = "llm") -> int:
    async with api.client() as c:
        r = await c.get("/v1/costs", params={"project": project})
        return int(r.json()["total_events"])


def ndjson(events: list[dict[str, object]]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


async def test_events_post_ndjson_json_and_stdin(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await card(api)
    path = tmp_path / "events.ndjson"
    path.write_text(ndjson([event(f"n-{i}", "1") for i in range(7)]) + "\n")
    code, out, _ = run(
        capsys,
        "events",
        "post",
        str(path),
        "--batch-size",
        "3",
        *conn(api.base_url, api.admin_token),
    )
    assert code == 0 and "7 accepted, 0 duplicates (already counted), 0 rejected" in out
    array = json.dumps([event("n-0", "1"), event("j-1", 2.5), event("bad", "1", sku="nope")])
    monkeypatch.setattr("sys.stdin", io.StringIO(array))
    code, out, _ = run(capsys, "events", "post", "-", *conn(api.base_url, api.admin_token))
    assert code == 1  # one event was rejected
    assert "1 accepted, 1 duplicate (already counted), 1 rejected" in out
    assert "bad" in out
    assert await total_events(api) == 8
    path.write_text('{"id": "x"}\nnot json\n')
    code, _, err = run(capsys, "events", "post", str(path), *conn(api.base_url, api.admin_token))
    assert code == 1 and "line 2: not JSON" in err


async def test_cli_posts_ride_out_429s(
    clean_redis: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    settings = Settings(redis_url=clean_redis, rate_limit_per_second=2)
    server = await asyncio.to_thread(lambda: ServerThread(clean_redis, settings).start())
    token = await make_admin_token(clean_redis)
    try:
        # The test reads with a token of its own: the limit is per token.
        api = Api(server.base_url, await make_admin_token(clean_redis), clean_redis)
        await card(api)
        path = tmp_path / "events.ndjson"
        path.write_text(ndjson([event(f"r-{i}", "1") for i in range(8)]))
        code, out, err = run(
            capsys, "events", "post", str(path), "--batch-size", "1", *conn(api.base_url, token)
        )
        assert code == 0, err
        assert "8 accepted" in out
        assert "(HTTP 429)" in err  # said on stderr, and retried
        assert await total_events(api) == 8
    finally:
        await asyncio.to_thread(server.stop)


async def test_spool_put_then_flush(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await card(api)
    spool_dir = str(tmp_path / "spool")
    path = tmp_path / "events.ndjson"
    path.write_text(ndjson([event(f"s-{i}", "1.000001") for i in range(5)]))
    code, _, err = run(capsys, "spool", "put", str(path), "--spool", spool_dir)
    assert code == 0 and "5 events spooled" in err
    assert run(capsys, "spool", "put", str(path), "--spool", spool_dir)[0] == 0
    down = f"http://127.0.0.1:{free_port()}"
    code, _, err = run(
        capsys,
        "spool",
        "flush",
        "--spool",
        spool_dir,
        "--timeout",
        "1",
        *conn(down, api.admin_token),
    )
    # Unreachable (after the retries): the events stay for the next flush.
    assert code == 1 and "10 events stay spooled" in err
    code, out, _ = run(
        capsys, "spool", "flush", "--spool", spool_dir, *conn(api.base_url, api.admin_token)
    )
    assert code == 0 and "5 accepted, 5 duplicates" in out
    assert Spool(spool_dir).pending() == 0
    assert await total_events(api) == 5
    async with api.client() as c:
        cost = (await c.get("/v1/costs", params={"project": "llm"})).json()["total_cost"]
    assert cost.startswith("12.5000") and cost.endswith("25")  # 5 × 1.000001 × 2.50, exact


async def test_agent_stops_on_sigterm_and_loses_nothing(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await card(api)
    spool = Spool(tmp_path / "spool")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env.update(TRAINLEDGER_URL=f"http://127.0.0.1:{free_port()}", TRAINLEDGER_TOKEN=api.admin_token)
    log_path = tmp_path / "agent.log"
    with open(log_path, "w") as log:
        agent = subprocess.Popen(
            [
                *(sys.executable, "-m", "trainledger.cli", "agent"),
                *("--spool", str(spool.directory), "--interval", "0.05", "--max-backoff", "0.2"),
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        spool.put([event(f"g-{i}", "1") for i in range(4)])
        # Wait until it is retrying against a service that is not there, then stop it.
        for _ in range(MAX_POLLS):
            if agent.poll() is not None or "Connection refused" in log_path.read_text():
                break
            await asyncio.sleep(0.05)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    out = log_path.read_text()
    assert agent.returncode == 0, out
    assert "Connection refused" in out
    assert "agent: stopped; 4 events spooled" in out
    assert spool.pending() == 4
    # The events wait in the spool for the next drain.
    code, out, _ = run(
        capsys,
        "spool",
        "flush",
        "--spool",
        str(spool.directory),
        *conn(api.base_url, api.admin_token),
    )
    assert code == 0 and "4 accepted" in out
    assert await total_events(api) == 4


async def test_budgets_alerts_and_webhooks(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await card(api)
    c = conn(api.base_url, api.admin_token)
    code, out, err = run(
        capsys,
        "budgets",
        "create",
        "--project",
        "llm",
        "--name",
        "gpu",
        "--amount",
        "1234567.891",
        "--threshold",
        "50",
        "--json",
        *c,
    )
    assert code == 0, err
    budget_id = json.loads(out)["id"]
    code, out, _ = run(capsys, "budgets", "list", "--project", "llm", *c)
    assert code == 0 and budget_id in out and "1,234,567.89" in out
    async with api.client() as http:
        r = await http.post("/v1/events", json=[event("big", "300000")])  # 750,000 USD: over 50 %
        assert r.status_code == 200, r.text
    code, out, _ = run(capsys, "budgets", "show", budget_id, "--project", "llm", *c)
    assert code == 0 and "750,000.00 USD" in out and "484,567.89 USD" in out
    code, out, _ = run(capsys, "alerts", "list", "--project", "llm", *c)
    assert code == 0 and "threshold 50 %" in out and "750,000.00 USD" in out
    code, out, _ = run(capsys, "alerts", "list", "--project", "llm", "--json", *c)
    assert Decimal(json.loads(out)[0]["spent"]) == Decimal(750000)  # the exact figure

    code, out, err = run(
        capsys,
        "webhooks",
        "create",
        "http://127.0.0.1:9/hook",
        "--project",
        "llm",
        "--kind",
        "threshold",
        *c,
    )
    assert code == 0, err
    assert "signing secret (shown this once): whsec_" in out
    hook_id = out.split()[1]
    code, out, _ = run(capsys, "webhooks", "list", *c)
    assert code == 0 and hook_id in out and "http://127.0.0.1:9/hook" in out
    code, out, _ = run(capsys, "webhooks", "deliveries", "--project", "llm", "--json", *c)
    assert code == 0 and json.loads(out)["project"] == "llm"
    assert run(capsys, "webhooks", "delete", hook_id, *c)[0] == 0
    code, _, err = run(capsys, "webhooks", "delete", hook_id, *c)
    assert code == 1 and "HTTP 404" in err
    assert run(capsys, "budgets", "delete", budget_id, "--project", "llm", *c)[0] == 0
    code, out, _ = run(capsys, "budgets", "list", "--project", "llm", "--json", *c)
    assert json.loads(out) == []
    reader = await api.token("read", ["llm"])
    code, _, err = run(
        capsys,
        "budgets",
        "create",
        "--project",
        "llm",
        "--name",
        "x",
        "--amount",
        "1",
        "--url",
        api.base_url,
        "--token",
        reader,
    )
    assert code == 1 and "HTTP 403" in err


async def test_alerts_list_shows_a_budget_alert_and_a_regression_in_their_own_terms(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    await card(api)
    budget = {"project": "llm", "name": "gpu monthly", "amount": "1000000", "thresholds": [50]}
    settings = {"baseline": "base", "benchmarks": {"mmlu": "general"}, "tolerance": "0.5"}
    results = [
        {"id": "b", "experiment": "base", "benchmark": "mmlu", "value": "60.0"},
        {"id": "a", "experiment": "mix-a", "benchmark": "mmlu", "value": "58.0"},
    ]
    async with api.client() as http:
        assert (await http.post("/v1/budgets", json=budget)).status_code == 201
        # 300,000 GPU hours of mix-a: 750,000.00 USD, past 50 % (500,000.00) of the budget.
        r = await http.post("/v1/events", json=[event("big", "300000", experiment="mix-a")])
        assert r.status_code == 200, r.text
        r = await http.put("/v1/evaluations/settings", params={"project": "llm"}, json=settings)
        assert r.status_code == 200, r.text
        r = await http.post("/v1/evaluations", json={"project": "llm", "results": results})
        assert r.status_code == 200, r.text
    c = conn(api.base_url, api.admin_token)
    code, out, err = run(capsys, "alerts", "list", "--project", "llm", *c)
    assert code == 0, err
    header = next(line for line in out.splitlines() if "when" in line)
    assert [h for h in ("kind", "what", "figure", "over by") if h in header] == [
        "kind",
        "what",
        "figure",
        "over by",
    ]
    assert "budget" not in header and "spent" not in header
    lines = out.splitlines()
    budget_row = next(line for line in lines if "threshold 50 %" in line)
    for needle in ("gpu monthly ·", "750,000.00 USD / 500,000.00 USD", "250,000.00 USD"):
        assert needle in budget_row, (needle, out)
    regression_row = next(line for line in lines if "evaluation_regression" in line)
    for needle in ("mix-a · mmlu", "58.0 vs 60.0 (base)", "rework 750,000.00 USD"):
        assert needle in regression_row, (needle, out)


async def test_webhooks_test_sends_the_sample_of_a_kind(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    c = conn(api.base_url, api.admin_token)
    with receiving(Receiver().start()) as rx:
        code, out, err = run(
            capsys, "webhooks", "create", rx.url + "/hook", "--kind", "threshold", "--json", *c
        )
        assert code == 0, err
        hook = json.loads(out)
        code, out, err = run(
            capsys, "webhooks", "test", hook["id"], "--kind", "evaluation_regression", *c
        )
        assert code == 0, err
        assert "test evaluation_regression message test_" in out and "delivered (HTTP 200)" in out
        assert "does not receive evaluation_regression alerts" in out
        code, out, err = run(capsys, "webhooks", "test", hook["id"], "--json", *c)
        assert code == 0, err
        assert json.loads(out)["kind"] == "threshold" and json.loads(out)["subscribed"] is True
    types = [check_standard(hook["secret"], r)["type"] for r in rx.at("/hook")]
    assert types == ["evaluation.regression", "budget.threshold"]


async def test_alerts_list_shows_an_evaluation_regression(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = {"baseline": "base", "benchmarks": {"mmlu": "general"}, "tolerance": "0.5"}
    results = [
        {"id": "b", "experiment": "base", "benchmark": "mmlu", "value": "60.0"},
        {"id": "a", "experiment": "mix-a", "benchmark": "mmlu", "value": "58.0"},
    ]
    async with api.client() as http:
        r = await http.put("/v1/evaluations/settings", params={"project": "llm"}, json=settings)
        assert r.status_code == 200, r.text
        r = await http.post("/v1/evaluations", json={"project": "llm", "results": results})
        assert r.status_code == 200, r.text
    c = conn(api.base_url, api.admin_token)
    code, out, err = run(
        capsys, "alerts", "list", "--project", "llm", "--kind", "evaluation_regression", *c
    )
    assert code == 0, err
    assert "evaluation_regression" in out and "mix-a · mmlu" in out
    assert "58.0 vs 60.0 (base), tolerance 0.5" in out


def _ingest_token_env(token: str, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env.update(TRAINLEDGER_URL=url, TRAINLEDGER_TOKEN=token)
    return env


@pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)  # the agent's, not the store's
async def test_agent_drains_past_bad_entries_on_a_full_disk(
    api: Api, tmp_path: Path, small_fs: Path
) -> None:
    await card(api)
    spool = Spool(small_fs / "spool")
    (spool.new / "0-a-directory.ndjson").mkdir()
    os.mkfifo(spool.new / "0-b-fifo.ndjson")
    corrupt = spool.new / "0-c-corrupt.ndjson"
    corrupt.write_text(json.dumps(event("in-corrupt", "1")) + '\n{"id": "cut sh\n')
    spool.put([event("refused", "1", project="other")])  # the token may not post there
    for n in range(6):
        spool.put([event(f"a-{n}-{k}", "1") for k in range(2)])
    fill(small_fs)  # nothing can be set aside until the sent files free their space
    limited = await api.token("ingest", ["llm"])
    log_path = tmp_path / "agent.log"
    with open(log_path, "w") as log:
        agent = subprocess.Popen(
            [
                *(sys.executable, "-m", "trainledger.cli", "agent", "--batch-size", "5"),
                *("--spool", str(spool.directory), "--interval", "0.05", "--max-backoff", "0.2"),
            ],
            cwd=REPO,
            env=_ingest_token_env(limited, api.base_url),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(MAX_POLLS):
            if agent.poll() is not None or (spool.files() == [] and "set aside" in _read(log_path)):
                break
            await asyncio.sleep(0.05)
        assert agent.poll() is None, _read(log_path)  # still running: it did not crash
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    out = _read(log_path)
    assert agent.returncode == 0, out
    assert "Traceback" not in out
    # The full disk first: said, the entries left where they were, the good files sent.
    assert "could not set it aside (No space left on device)" in out, out
    assert "could not keep its 1 unreadable lines (No space left on device)" in out, out
    assert "agent: sent 12 events from 6 files" in out, out
    # Then, with the space those files freed, everything set aside beside its note.
    for needle in ("a directory", "a FIFO", "HTTP 403", "1 unreadable line (not a JSON object)"):
        assert needle in out, (needle, out)
    assert spool.files() == []
    names = sorted(p.name for p in spool.failed.iterdir())
    assert [n for n in names if not n.endswith(".problem.json")][:3] == [
        "0-a-directory.ndjson",
        "0-b-fifo.ndjson",
        "0-c-corrupt.ndjson.corrupt",
    ]
    assert len(names) == 8  # 4 entries, each beside its note
    for name in names:
        if name.endswith(".problem.json"):
            assert json.loads((spool.failed / name).read_text())  # none empty
    assert (spool.failed / "0-c-corrupt.ndjson.corrupt").read_bytes() == b'{"id": "cut sh\n'
    assert await total_events(api) == 13  # the 12, and the corrupt file's readable event


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


@pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)
async def test_spool_flush_says_what_it_set_aside_and_spool_failed_lists_it(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await card(api)
    spool = Spool(tmp_path / "spool")
    (spool.new / "0-dir.ndjson").mkdir()
    (spool.new / "0-bad.ndjson").write_text(json.dumps(event("ok-1", "1")) + "\nnot json\n")
    spool.put([event("ok-2", "1")])
    spool.put([event("elsewhere", "1", project="other"), event("ok-3", "1", project="other")])
    limited = await api.token("ingest", ["llm"])
    d = ("--spool", str(spool.directory))
    code, out, err = run(capsys, "spool", "flush", *d, *conn(api.base_url, limited))
    assert code == 1  # something needs a look
    assert "2 accepted" in out
    assert "0-dir.ndjson: cannot be read (a directory, not a spooled file)" in err
    assert "1 spool entry that cannot be read" in err
    assert "1 unreadable line (not a JSON object), kept in" in err
    assert "2 spooled events refused by the service" in err
    assert await total_events(api) == 2
    code, out, err = run(capsys, "spool", "failed", *d, "--json")
    assert code == 0, err
    listed = {e["name"]: (e["kind"], e["events"]) for e in json.loads(out)}
    refused = spool.failed / next(n for n in listed if not n.startswith("0-"))
    assert listed == {
        "0-bad.ndjson.corrupt": ("corrupt", 1),
        "0-dir.ndjson": ("unreadable", None),
        refused.name: ("refused", 2),
    }
    code, out, _ = run(capsys, "spool", "failed", *d)
    assert code == 0
    rows = {line.split()[1]: line for line in out.splitlines() if ".ndjson" in line}
    assert "corrupt" in rows["0-bad.ndjson.corrupt"] and "are not JSON objects" in out
    assert "a directory" in rows["0-dir.ndjson"]
    assert "refused" in rows[refused.name] and "project 'other'" in out


def _flush_unprivileged(spool: Spool, api: Api) -> tuple[int, str]:
    """`spool flush` as a process without root's rights over files: as root, in a user
    namespace of its own (`unshare --user`), where it holds no capability over the host's
    files and another owner's file is another owner's, as for any user."""
    command = [sys.executable, "-m", "trainledger.cli", "spool", "flush"]
    if os.geteuid() == 0:
        command = ["unshare", "--user", *command]
        probe = subprocess.run(["unshare", "--user", "true"], capture_output=True, check=False)
        if probe.returncode:
            why = f"no user namespace here: {probe.stderr.decode(errors='replace')}"
            if os.environ.get("CI"):
                pytest.fail(why)
            pytest.skip(why)
    done = subprocess.run(
        [*command, "--spool", str(spool.directory), *conn(api.base_url, api.admin_token)],
        cwd=REPO,
        env=_ingest_token_env(api.admin_token, api.base_url),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)
async def test_a_file_the_drainer_may_not_read_is_set_aside(api: Api, tmp_path: Path) -> None:
    await card(api)
    spool = Spool(tmp_path / "spool")
    denied = spool.new / "0-denied.ndjson"  # another owner's file under a stricter umask
    denied.write_text(json.dumps(event("denied", "1")) + "\n")
    denied.chmod(0)
    spool.put([event(f"p-{k}", "1") for k in range(3)])
    code, out = _flush_unprivileged(spool, api)
    assert code == 1, out
    assert "3 accepted" in out
    assert "0-denied.ndjson: cannot be read (Permission denied)" in out, out
    assert (spool.failed / "0-denied.ndjson").exists() and spool.files() == []
    assert await total_events(api) == 3


@pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)
async def test_a_sent_file_the_drainer_may_not_remove_does_not_stop_it(
    api: Api, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("another owner's file: only root can make one")
    await card(api)
    spool = Spool(tmp_path / "spool")
    os.chown(spool.new, 12345, 12345)  # a sticky new/ of another owner, as /tmp is
    spool.new.chmod(0o1777)
    theirs = spool.new / "0-theirs.ndjson"
    theirs.write_text(json.dumps(event("theirs", "1")) + "\n")
    os.chown(theirs, 12346, 12346)
    theirs.chmod(0o644)  # readable, not removable
    spool.put([event(f"m-{k}", "1") for k in range(2)])
    code, out = _flush_unprivileged(spool, api)
    assert code == 1, out
    assert "3 accepted" in out
    assert "0-theirs.ndjson: sent, but could not be removed (Operation not permitted)" in out
    assert spool.files() == [theirs]  # the others are gone: answered for
    code, out = _flush_unprivileged(spool, api)
    assert "0 accepted, 1 duplicate" in out, out  # sent again, counted nothing
    assert await total_events(api) == 3


@pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)
async def test_the_agent_outlasts_an_error_of_the_spool_itself(api: Api, tmp_path: Path) -> None:
    await card(api)
    spool = Spool(tmp_path / "spool")
    spool.put([event(f"l-{k}", "1") for k in range(2)])
    lock = spool.directory / "drain.lock"
    lock.mkdir()  # the lock cannot be opened: every drain fails before it reads a file
    log_path = tmp_path / "agent.log"
    with open(log_path, "w") as log:
        agent = subprocess.Popen(
            [
                *(sys.executable, "-m", "trainledger.cli", "agent"),
                *("--spool", str(spool.directory), "--interval", "0.05"),
            ],
            cwd=REPO,
            env=_ingest_token_env(api.admin_token, api.base_url),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(MAX_POLLS):
            if agent.poll() is not None or _read(log_path).count("Is a directory") >= 2:
                break
            await asyncio.sleep(0.05)
        assert agent.poll() is None, _read(log_path)  # said, and tried again
        lock.rmdir()
        for _ in range(MAX_POLLS):
            if agent.poll() is not None or "agent: sent 2 events" in _read(log_path):
                break
            await asyncio.sleep(0.05)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    out = _read(log_path)
    assert agent.returncode == 0 and "Traceback" not in out, out
    assert "agent: sent 2 events" in out, out
    assert await total_events(api) == 2
