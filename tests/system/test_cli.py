"""The client commands of `trainledger` against a real service (the `api` fixture: uvicorn over
loopback), run in-process through `trainledger.cli.main` with their output captured.

Tables are checked for the figures the service computed (read back over HTTP in the same
test); `--json` and `--csv` output is compared exactly.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from trainledger.cli import build_parser, main
from trainledger.cli.demo import EXAMPLE_CARD
from trainledger.cli.figures import grouped, money

from tests.conftest import TEST_CARD, Api, event, free_port

REPO = Path(__file__).resolve().parents[2]

PLAN: dict[str, Any] = {
    "project": "llm-7b",
    "name": "7b-base",
    "rate_card": "default",
    "currency": "USD",
    "window_start": "2026-12-01T00:00:00Z",
    "window_end": "2027-01-15T00:00:00Z",
    "pue": "1.2",
    "region": "us",
    "stages": [
        {
            "stage": "quality_scoring",
            "resources": [{"sku": "inference.quality_score.mtok", "quantity": "2000000"}],
        },
        {
            "stage": "pretrain",
            "duration_days": "30",
            "contingency_pct": "10",
            "model": {
                "parameters": 7000000000,
                "tokens": 2000000000000,
                "accelerator_sku": "gpu.h100.hour",
                "peak_flops_per_accelerator": "989e12",
                "mfu": "0.4",
            },
            "overheads": [{"sku": "storage.checkpoint.gb_day", "quantity": "90000"}],
        },
    ],
}


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide enough that rich never folds a figure across lines."""
    monkeypatch.setenv("COLUMNS", "220")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def conn(api: Api) -> list[str]:
    return ["--url", api.base_url, "--token", api.admin_token]


def write_json(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document))
    return str(path)


# --- ratecard apply -----------------------------------------------------------------------------


async def test_ratecard_apply_adds_versions(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    card = write_json(tmp_path / "card.json", TEST_CARD)
    code, out, _ = run(capsys, "ratecard", "apply", card, *conn(api))
    assert code == 0
    assert "rate card default version 1: 4 SKUs in USD, effective from 2020-01-01" in out
    code, out, _ = run(capsys, "ratecard", "apply", card, "--name", "spot", "--json", *conn(api))
    assert code == 0
    answer = json.loads(out)
    assert (answer["name"], answer["version"], len(answer["skus"])) == ("spot", 1, 4)
    code, out, _ = run(capsys, "ratecard", "apply", card, *conn(api))
    assert "version 2:" in out
    async with api.client() as c:
        names = (await c.get("/v1/rate-cards")).json()["names"]
    assert sorted(names) == ["default", "spot"]


async def test_a_problem_document_is_printed_with_its_field_errors(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    bad = {**TEST_CARD, "skus": [{**TEST_CARD["skus"][0], "unit_price": "-1"}]}  # type: ignore[index]
    code, out, err = run(
        capsys, "ratecard", "apply", write_json(tmp_path / "b.json", bad), *conn(api)
    )
    assert code == 1 and out == ""
    async with api.client() as c:
        problem = (await c.put("/v1/rate-cards/default", json=bad)).json()
    assert problem["title"] in err and f"HTTP {problem['status']}" in err
    assert problem["detail"] in err
    for item in problem["errors"]:
        assert item["field"] in err and item["reason"] in err


async def test_forbidden_and_unauthorised_answers_exit_non_zero(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    card = write_json(tmp_path / "card.json", TEST_CARD)
    reader = await api.token("read")
    code, _, err = run(capsys, "ratecard", "apply", card, "--url", api.base_url, "--token", reader)
    assert code == 1 and "HTTP 403" in err
    code, _, err = run(capsys, "ratecard", "apply", card, "--url", api.base_url, "--token", "nope")
    assert code == 1 and "HTTP 401" in err


# --- plan estimate ------------------------------------------------------------------------------


async def test_plan_estimate_tables_show_the_services_figures(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    assert run(capsys, "ratecard", "apply", str(EXAMPLE_CARD), *conn(api))[0] == 0
    plan = write_json(tmp_path / "plan.json", PLAN)
    code, out, _ = run(capsys, "plan", "estimate", plan, "--json", *conn(api))
    assert code == 0
    estimate = json.loads(out)
    async with api.client() as c:
        assert estimate == (await c.post("/v1/plans/estimate", json=PLAN)).json()

    code, out, _ = run(capsys, "plan", "estimate", plan, *conn(api))
    assert code == 0
    lines = out.splitlines()
    pretrain = estimate["stages"][1]
    for stage in estimate["stages"]:
        assert any(line.strip().startswith(stage["stage"]) for line in lines)
        for line in stage["lines"]:
            assert any(
                line["sku"] in s
                and usd(line["cost"]) in s
                and grouped(line["quantity"]) in s
                and grouped(line["unit_price"]) in s
                for s in lines
            )
        assert any("total" in s and usd(stage["total"]) in s for s in lines)
    assert any(
        "contingency" in s and "10 %" in s and usd(pretrain["contingency"]) in s for s in lines
    )
    assert any(
        s.strip().startswith("total") and money(estimate["total"], "USD") in s for s in lines
    )
    hours = grouped(estimate["accelerator_hours"])
    assert any("accelerator hours" in s and hours in s for s in lines)
    assert any(f"{grouped(estimate['energy_kwh'])} kWh" in s for s in lines)
    assert f"{grouped(pretrain['derivation']['flops'])} FLOPs" in out
    # People's figures: at most the currency's 2 decimals (the exact ones are in --json).
    assert not any(
        c["cost"] in out
        for s in estimate["stages"]
        for c in s["lines"]
        if len(c["cost"].partition(".")[2]) > 2
    )


async def test_plan_estimate_fits_80_columns_without_a_cell_cut(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert run(capsys, "ratecard", "apply", str(EXAMPLE_CARD), *conn(api))[0] == 0
    plan = write_json(tmp_path / "plan.json", PLAN)
    code, out, _ = run(capsys, "plan", "estimate", plan, *conn(api))
    assert code == 0
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80, out
    async with api.client() as c:
        estimate = (await c.post("/v1/plans/estimate", json=PLAN)).json()
    for stage in estimate["stages"]:  # every figure whole, on one line
        for line in stage["lines"]:
            assert usd(line["cost"]) in out and grouped(line["quantity"]) in out
        assert usd(stage["total"]) in out
    assert money(estimate["total"], "USD") in out


def usd(value: str) -> str:
    """A money cell of a USD column: as people read it, the code in the header."""
    return money(value, "USD", code=False)


async def test_plan_estimate_invalid_plan_names_the_field(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    assert run(capsys, "ratecard", "apply", str(EXAMPLE_CARD), *conn(api))[0] == 0
    plan = {
        **PLAN,
        "stages": [{"stage": "pretrain", "resources": [{"sku": "gpu.nope.hour", "quantity": "1"}]}],
    }
    code, _, err = run(
        capsys, "plan", "estimate", write_json(tmp_path / "p.json", plan), *conn(api)
    )
    assert code == 1
    assert "gpu.nope.hour" in err and "$.stages[0].resources[0].sku" in err


# --- costs --------------------------------------------------------------------------------------


async def post_sample(api: Api) -> None:
    async with api.client() as c:
        r = await c.put("/v1/rate-cards/default", json=TEST_CARD)
        assert r.status_code == 201, r.text
        events = [
            event("e1", "10", stage="pretrain", owner="alice", tags={"team": "core"}),
            event("e2", "4", stage="eval", owner="bob", tags={"team": "evals"}),
            event("e3", "250", sku="storage.hot.gb_day", stage="pretrain", tags={"team": "core"}),
            event("e4", "3", stage="pretrain", owner="alice", tags={"team": "core"}),
            event("e5", "100", sku="network.cross_region.gb", stage="data_prep"),
        ]
        r = await c.post("/v1/events", json=events)
        assert r.json()["accepted"] == 5, r.text


async def test_costs_json_csv_and_table_agree_with_the_service(
    api: Api, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    await post_sample(api)
    args = ["costs", "--project", "llm", "--group-by", "stage,sku", *conn(api)]
    code, out, _ = run(capsys, *args, "--json")
    assert code == 0
    report = json.loads(out)
    async with api.client() as c:
        direct = (
            await c.get("/v1/costs", params={"project": "llm", "group_by": "stage,sku"})
        ).json()
    assert report["rows"] == direct["rows"] and report["total_cost"] == direct["total_cost"]
    # 17 GPU hours × 2.50 + 250 GB-days (100 × 0.002 + 150 × 0.0015) + 100 GB × 0.02
    assert Decimal(report["total_cost"]) == Decimal("44.925")
    assert report["total_events"] == 5

    code, out, _ = run(capsys, *args, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["stage"], r["sku"], r["quantity"], r["events"], r["cost"]) for r in rows] == [
        (
            row["key"]["stage"],
            row["key"]["sku"],
            row["quantity"],
            str(row["events"]),
            row["cost"],
        )
        for row in direct["rows"]
    ]

    code, out, _ = run(capsys, *args)
    assert code == 0
    # The table shows money for people (grouped, to the cent); the exact figures are above.
    for row in direct["rows"]:
        assert any(
            row["key"]["stage"] in line
            and row["key"]["sku"] in line
            and money(row["cost"], "USD", code=False) in line
            for line in out.splitlines()
        )
    shown = money(direct["total_cost"], "USD", code=False)
    assert shown == "44.92" and direct["total_cost"] not in out
    assert any("total" in line and shown in line for line in out.splitlines())


async def test_costs_filters_top_and_granularity_become_query_parameters(
    api: Api, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    await post_sample(api)
    base = ["costs", "--project", "llm", "--json", *conn(api)]
    code, out, _ = run(capsys, *base, "--group-by", "owner", "--filter", "stage=pretrain")
    rows = {r["key"]["owner"]: Decimal(r["cost"]) for r in json.loads(out)["rows"]}
    assert rows == {"alice": Decimal("32.5"), "": Decimal("0.425")}  # e3 has no owner
    code, out, _ = run(capsys, *base, "--group-by", "sku", "--filter", "tag.team=evals")
    assert [(r["key"]["sku"], r["quantity"]) for r in json.loads(out)["rows"]] == [
        ("gpu.h100.hour", "4")
    ]
    code, out, _ = run(capsys, *base, "--group-by", "sku", "--top", "1")
    report = json.loads(out)
    assert [r["key"]["sku"] for r in report["rows"]] == ["gpu.h100.hour", "(other)"]
    code, out, _ = run(capsys, *base, "--group-by", "stage", "--granularity", "month")
    assert all("period" in r["key"] for r in json.loads(out)["rows"])

    code, _, err = run(capsys, *base, "--filter", "colour=red")
    assert code == 1 and "--filter 'colour'" in err
    code, _, err = run(capsys, *base, "--group-by", "nonsense")
    assert code == 1 and "group_by" in err  # the service's problem, field named


async def test_costs_follows_every_page(
    api: Api, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    async with api.client() as c:
        await c.put("/v1/rate-cards/default", json=TEST_CARD)
        batch = [event(f"x{i}", "1", experiment=f"exp-{i:05d}") for i in range(10_050)]
        r = await c.post("/v1/events", json=batch)
        assert r.json()["accepted"] == 10_050
    code, out, _ = run(
        capsys, "costs", "--project", "llm", "--group-by", "experiment", "--json", *conn(api)
    )
    report = json.loads(out)
    assert code == 0 and report["total_rows"] == 10_050
    assert len({r["key"]["experiment"] for r in report["rows"]}) == 10_050


# --- export focus -------------------------------------------------------------------------------


async def test_export_focus_to_a_file_and_to_stdout(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], wide: None
) -> None:
    await post_sample(api)
    async with api.client() as c:
        direct = (await c.get("/v1/export/focus", params={"project": "llm"})).content
    target = tmp_path / "out.csv"
    code, _, err = run(capsys, "export", "focus", "--project", "llm", "-o", str(target), *conn(api))
    assert code == 0
    assert target.read_bytes() == direct
    # 6 rows for 5 events: e3 crosses a graduated-tier boundary, one row per tier.
    assert direct.count(b"\r\n") == 1 + 6
    assert f"6 rows ({len(direct):,} bytes) written to {target}" in err
    assert not (tmp_path / "out.csv.partial").exists()

    code, out, _ = run(capsys, "export", "focus", "--project", "llm", *conn(api))
    assert out == direct.decode()
    async with api.client() as c:
        params = {"project": "llm", "granularity": "day"}
        daily = (await c.get("/v1/export/focus", params=params)).content
    code, out, _ = run(
        capsys, "export", "focus", "--project", "llm", "--granularity", "day", *conn(api)
    )
    assert code == 0 and out == daily.decode() and out != direct.decode()

    code, _, err = run(
        capsys,
        "export",
        "focus",
        "--project",
        "llm",
        "--from",
        "2001-01-01",
        "--to",
        "2001-01-02",
        "-o",
        str(tmp_path / "empty.csv"),
        *conn(api),
    )
    assert code == 0 and "0 rows" in err
    code, _, err = run(
        capsys,
        "export",
        "focus",
        "--project",
        "llm",
        "--from",
        "2001-01-02",
        "--to",
        "2001-01-01",
        "-o",
        str(tmp_path / "bad.csv"),
        *conn(api),
    )
    assert code == 1 and "must be after" in err
    assert not (tmp_path / "bad.csv").exists() and not (tmp_path / "bad.csv.partial").exists()


# --- where the URL and token come from ----------------------------------------------------------


async def test_token_from_environment_and_from_the_data_dir(
    api: Api,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    wide: None,
) -> None:
    card = write_json(tmp_path / "card.json", TEST_CARD)
    monkeypatch.setenv("TRAINLEDGER_URL", api.base_url)
    monkeypatch.delenv("TRAINLEDGER_TOKEN", raising=False)
    monkeypatch.setenv("TRAINLEDGER_DATA_DIR", str(tmp_path / "data"))
    code, _, err = run(capsys, "ratecard", "apply", card)
    assert code == 1 and "no token" in err and str(tmp_path / "data" / "admin-token") in err

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "admin-token").write_text(api.admin_token + "\n")
    assert run(capsys, "ratecard", "apply", card)[0] == 0

    monkeypatch.setenv("TRAINLEDGER_TOKEN", "wrong")
    code, _, err = run(capsys, "ratecard", "apply", card)
    assert code == 1 and "HTTP 401" in err


def test_an_unreachable_service_is_said_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    card = write_json(tmp_path / "card.json", TEST_CARD)
    code, _, err = run(capsys, "ratecard", "apply", card, "--url", url, "--token", "t")
    assert code == 1 and f"cannot reach {url}" in err


def test_bad_input_files_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    code, _, err = run(capsys, "plan", "estimate", str(tmp_path / "bad.json"), "--token", "t")
    assert code == 1 and "is not valid JSON" in err
    code, _, err = run(capsys, "plan", "estimate", str(tmp_path / "missing.json"), "--token", "t")
    assert code == 1 and "cannot read" in err


# --- the parser -----------------------------------------------------------------------------------


def test_every_command_of_the_issue_is_there() -> None:
    parser = build_parser()
    for argv in (
        [
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "9000",
            "--workers",
            "2",
            "--redis-url",
            "redis://r:6379/0",
            "--data-dir",
            "/tmp/x",
        ],
        ["token", "create", "--role", "read"],
        ["token", "list"],
        ["token", "revoke", "abc"],
        ["openapi", "--check", "openapi/openapi.json"],
        ["ratecard", "apply", "card.json", "--name", "spot"],
        ["plan", "estimate", "plan.json", "--json"],
        [
            "costs",
            "--project",
            "p",
            "--group-by",
            "stage,sku",
            "--from",
            "2026-11-01",
            "--to",
            "2026-12-01",
            "--granularity",
            "day",
            "--filter",
            "stage=pretrain",
            "--top",
            "5",
            "--csv",
        ],
        ["export", "focus", "--project", "p", "--from", "2026-11-01", "-o", "x.csv"],
        [
            "import",
            "slurm",
            "-",
            "--map",
            "gpu:h100=gpu.h100.hour",
            "--map-file",
            "m.json",
            "--project-from",
            "account",
            "--dry-run",
        ],
        ["import", "pods", "pods.json", "--project-label", "team"],
    ):
        args = parser.parse_args(argv)
        assert callable(args.handler), argv
    with pytest.raises(SystemExit):
        parser.parse_args(["costs", "--project", "p", "--json", "--csv"])


def test_demo_runs_the_demo_module_or_says_it_is_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    try:
        code, _, err = run(capsys, "demo", "--help")
    except SystemExit as exc:  # the demo module is there: its own parser printed its help
        assert exc.code == 0
        assert "trainledger demo" in capsys.readouterr().out
        return
    assert code == 1 and "demo is not available" in err


def test_unknown_arguments_are_refused_outside_the_demo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["openapi", "--bogus"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_python_dash_m_and_openapi_check_still_work() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainledger.cli", "openapi", "--check", "openapi/openapi.json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert "openapi/openapi.json" in done.stderr
    assert done.returncode in (0, 1)  # 1 only when the checked-in spec is stale
    printed = subprocess.run(
        [sys.executable, "-m", "trainledger.cli", "openapi"],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=True,
    )
    document = json.loads(printed.stdout)  # raw JSON: no console wrapping long lines
    assert "/v1/costs" in document["paths"]


async def test_lists_say_none_counts_agree_and_budgets_show_their_alert_amounts(
    api: Api, capsys: pytest.CaptureFixture[str], wide: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty list is a "no ..." line, not an empty table; a count has its plural right;
    `budgets create` names each alert threshold's amount in the project's currency; `token
    list` shows times people read."""
    for argv, said in (
        (["budgets", "list", "--project", "llm"], "no budgets in project llm"),
        (["alerts", "list", "--project", "llm"], "no alerts in project llm"),
        (["costs", "--project", "llm"], "no costs in project llm from the start to now"),
        (["webhooks", "deliveries", "--project", "llm"], "no webhook deliveries in project llm"),
    ):
        code, out, _ = run(capsys, *argv, *conn(api))
        assert code == 0 and out.strip().startswith(said), (argv, out)
        assert "┏" not in out and "─" not in out, out  # no table at all

    async with api.client() as c:
        assert (await c.put("/v1/rate-cards/default", json=TEST_CARD)).status_code == 201
        assert (await c.post("/v1/events", json=[event("one", "2")])).json()["accepted"] == 1
    code, _, err = run(capsys, "costs", "--project", "llm", *conn(api))
    assert code == 0 and "1 row, from the start to now" in err, err

    create = ["budgets", "create", "--project", "llm", "--name", "b", "--amount", "1234.5"]
    code, out, _ = run(capsys, *create, "--threshold", "50", "--threshold", "90", *conn(api))
    assert code == 0
    said = " ".join(out.split())
    assert "1,234.50 USD monthly alerts at 50 % (617.25 USD), 90 % (1,111.05 USD)" in said, out

    monkeypatch.setenv("TRAINLEDGER_REDIS_URL", api.redis_url)
    # `token list` reaches the store itself (asyncio.run): off this test's event loop.
    code, out, _ = await asyncio.to_thread(run, capsys, "token", "list")
    assert code == 0 and "created (UTC)" in out
    # Every token's creation time as "YYYY-MM-DD HH:MM", never a Unix timestamp.
    assert re.search(r"\b20\d\d-\d\d-\d\d \d\d:\d\d\b", out), out
    assert not re.search(r"\b1\d{9}\b", out), out
