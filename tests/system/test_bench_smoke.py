"""Smoke test of the performance suite (bench/): every benchmark runs on a tiny input.

Only the shape of each result is checked, never a speed: the figures of a tiny run on a
shared machine mean nothing, and the suite's targets are judged by `python -m bench.run`,
not by the test run.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from bench.common import RESULT_KEYS, ROW_KEYS
from bench.run import BENCHMARKS, markdown_table, results_table


@pytest.fixture(scope="module", autouse=True)
def _close_datasets() -> Iterator[None]:
    yield
    from bench import dataset

    dataset.close_all()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_shape(name: str, res: dict[str, Any]) -> None:
    assert set(res) == RESULT_KEYS, sorted(set(res) ^ RESULT_KEYS)
    assert res["name"] == name
    assert _is_number(res["figure"]) and not math.isnan(res["figure"])
    assert isinstance(res["unit"], str) and res["unit"]
    assert res["ceiling"] is None or _is_number(res["ceiling"])
    assert res["ratio"] is None or _is_number(res["ratio"])
    assert isinstance(res["ceiling_label"], str)
    assert isinstance(res["ratio_label"], str)
    assert res["target"] is None or isinstance(res["target"], str)
    assert isinstance(res["met"], bool)
    assert isinstance(res["details"], dict)
    assert all(isinstance(n, str) for n in res["notes"])
    for sub in res["rows"]:
        assert set(sub) == ROW_KEYS
        assert isinstance(sub["label"], str) and _is_number(sub["figure"])
        assert sub["met"] is None or isinstance(sub["met"], bool)
    json.dumps(res)  # what bench/results/*.json holds


@pytest.fixture
def _small_heap() -> Iterator[None]:
    """The benchmarks collect garbage before each timed call, as the server does; late in a
    whole test run this process holds gigabytes of test objects, so every collection would
    walk them (minutes per benchmark). Frozen, the collector leaves them alone, as the
    server's `runtime.tune_garbage_collector` leaves its start-up objects."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_runs_on_a_tiny_input(name: str, _small_heap: None) -> None:
    module = importlib.import_module(f"bench.{name}")
    res = module.run(dict(module.TINY))
    check_shape(name, res)
    # The table renders whatever the figures are.
    assert name in markdown_table([res])
    assert results_table([res]).row_count >= 1


def _burn(seconds: float) -> None:
    import time

    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_accounting_sees_a_reaped_child_and_the_machine() -> None:
    """The ingest benchmark's CPU split: a child's CPU shows among the parent's reaped
    children (how Valkey's append-only-file rewrites are counted), not in its own time, and
    the machine's busy share lies in [0, 1] and grows while something runs."""
    import multiprocessing
    import os

    from bench.server import machine_cpu_seconds, process_cpu_seconds

    me = [os.getpid()]
    own_before = process_cpu_seconds(me)
    reaped_before = process_cpu_seconds(me, reaped_children=True)
    busy_before, all_before = machine_cpu_seconds()
    child = multiprocessing.get_context("fork").Process(target=_burn, args=(0.3,))
    child.start()
    child.join()
    assert child.exitcode == 0
    reaped = process_cpu_seconds(me, reaped_children=True) - reaped_before
    assert reaped >= 0.2  # the child's 0.3 s, at clock-tick resolution
    assert process_cpu_seconds(me) - own_before < reaped
    busy_after, all_after = machine_cpu_seconds()
    # A machine busy the whole time gives equal figures; their float differences may then
    # part by a rounding error, so one clock tick of slack.
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert 0 < busy_after - busy_before <= all_after - all_before + tick


def test_instructions_phases_run_without_valgrind(tmp_path: Any) -> None:
    """`bench.instructions --no-valgrind` runs every phase once on this tree (a few seconds)
    and reports each with its units, its collections and Valkey's commands; no counts."""
    import subprocess
    import sys

    from bench.instructions import PHASES, ROOT, table

    out = tmp_path / "instr.json"
    small = ["--batches", "1", "--size", "200", "--requests", "3", "--query-rounds", "1"]
    subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--no-valgrind", *small, "--json", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (report,) = json.loads(out.read_text())
    assert report["layout"] == "trainledger"
    assert report["valgrind"] is False
    assert [p["name"] for p in report["phases"]] == [name for name, _, _ in PHASES]
    units = {p["name"]: p["units"] for p in report["phases"]}
    assert units == {
        "empty": 1,
        "healthz": 3,
        "single": 3,
        "json": 200,
        "msgpack": 200,
        "budgets": 200,
        "fold": 603,
        "queries": 7,
    }
    for phase in report["phases"]:
        assert phase["instructions"] is None and phase["per_unit"] is None
        assert len(phase["collections"]) == 3
        assert phase["valkey_calls"] == sum(c["calls"] for c in phase["valkey_commands"].values())
        if phase["name"] not in ("empty", "healthz"):
            assert phase["valkey_calls"] > 0, phase["name"]
    assert report["started"]["frozen"] > 0
    assert "POST 5,000-event msgpack batch" in table([report])


def test_batcher_add_costs_run_on_a_tiny_input(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import batcher

    assert batcher.main(["--events", "20"]) == 0
    out = capsys.readouterr().out
    assert "add, written through a spool" in out and "extend(1000)" in out
