"""Slurm (`sacct --parsable2`) and Kubernetes pod imports: the pure mapping to events, then the
command line posting them to a real service, twice (the second import adds nothing).

The fixture tests/data/sacct_parsable2.txt is realistic sacct output (job lines with their
.batch/.extern/.N steps, an array job with a pending range, a heterogeneous job, jobs that span
one and two midnights, cancelled/failed/timeout/OOM/node-fail jobs, a running job, a pending
job, a CPU-only job, a job cancelled before it started, a suspended job, an unmapped GPU type).
Every expected figure below is worked by hand from the fixture, in the comments.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from trainledger.cli import main
from trainledger.importers.common import (
    day_slices,
    parse_mapping,
    spread,
    to_micro_decimal,
    totals_by_sku_and_day,
    usage_slices,
)
from trainledger.importers.kubernetes import import_pods
from trainledger.importers.slurm import (
    SacctFormatError,
    import_sacct,
    parse_alloc_tres,
)

from tests.conftest import Api

DATA = Path(__file__).resolve().parents[1] / "data"
SACCT = DATA / "sacct_parsable2.txt"
PODS = DATA / "pods.json"
MAPPING = {"gpu:h100": "gpu.h100.hour", "a100": "gpu.a100.hour", "h100": "gpu.h100.hour"}
H100, A100 = "gpu.h100.hour", "gpu.a100.hour"
D = Decimal

# GPU hours per (SKU, UTC day), by hand:
#   4100   16 H100, 11-03 22:00 → 11-04 04:00: 2 h × 16 = 32 on 11-03, 4 h × 16 = 64 on 11-04
#   4101_0  4 A100 (untyped, partition a100), 1800 s: 2;  4101_1 2700 s: 3;
#   4101_2  FAILED, 1200 s: 4 × 1200 / 3600 = 1.3333… → 1.333333        (11-04: 6.333333)
#   4102   CANCELLED, 8 H100 × 450 s = 1 (11-04)
#   4105   TIMEOUT, 8 H100 from 11-05 20:00 to 11-07 02:00: 32 / 192 / 16
#   4106+1 het component, 4 H100 × 1 h = 4 (11-06); 4106+0 is CPU-only
#   4110   OOM, 8 untyped GPUs in partition h100, 23:30 → 00:30: 4 (11-06) + 4 (11-07)
#   4111   NODE_FAIL, 2 A100 × 20 s = 0.0111… → 0.011111 (11-07)
#   4112   2 H100, wall 22:00 → 02:00 but ElapsedRaw 3 h (1 h suspended): 6 GPU-h split by
#          wall-clock share 2 h / 2 h: 3 (11-07) + 3 (11-08)
EXPECTED = {
    (A100, "2026-11-04"): D("6.333333"),
    (A100, "2026-11-07"): D("0.011111"),
    (H100, "2026-11-03"): D("32"),
    (H100, "2026-11-04"): D("65"),
    (H100, "2026-11-05"): D("32"),
    (H100, "2026-11-06"): D("200"),
    (H100, "2026-11-07"): D("23"),
    (H100, "2026-11-08"): D("3"),
}


def fixture_result() -> Any:
    return import_sacct(SACCT.read_text(), MAPPING)


def events_of(result: Any, job: str) -> list[Any]:
    return [e for e in result.events if e.tags["slurm_job_id"] == job]


# --- the fixture, as a whole ------------------------------------------------------------------


def test_gpu_hours_per_sku_per_day_are_exact() -> None:
    result = fixture_result()
    assert result.by_sku_and_day() == EXPECTED


def test_records_are_classified_and_the_unmapped_gpu_type_is_reported() -> None:
    result = fixture_result()
    assert result.records == 40
    assert result.steps == 23  # every .batch/.extern/.N line
    assert result.counted == 10
    assert result.not_finished == 3  # 4101_[3-7%2] pending range, 4103 running, 4107 pending
    assert result.without_gpus == 3  # 4104 CPU-only, 4106+0 CPU-only, 4108 never started
    assert result.skipped == []
    assert list(result.unmapped) == ["gpu:mi300x"]
    assert result.unmapped["gpu:mi300x"].records == 1
    assert result.unmapped["gpu:mi300x"].gpu_hours == D(16)  # 8 GPUs × 2 h, not posted


def test_steps_never_count_the_allocation_again() -> None:
    result = fixture_result()
    assert all("." not in e.tags["slurm_job_id"] for e in result.events)
    # 4100 has three steps holding the same 16 GPUs; only the allocation counts: 16 × 6 h.
    assert sum(e.quantity for e in events_of(result, "4100")) == D(96)
    assert {e.tags["slurm_job_id"] for e in result.events} == {
        "4100",
        "4101_0",
        "4101_1",
        "4101_2",
        "4102",
        "4105",
        "4106+1",
        "4110",
        "4111",
        "4112",
    }


def test_a_job_spanning_midnight_is_split_at_00_00_utc() -> None:
    result = fixture_result()
    first, second = events_of(result, "4100")
    assert (first.time, first.quantity) == (datetime(2026, 11, 3, 22, tzinfo=UTC), D(32))
    assert (second.time, second.quantity) == (datetime(2026, 11, 4, tzinfo=UTC), D(64))
    assert first.id == "slurm:4100:20261103T220000Z:20261103:gpu:h100"
    assert second.id == "slurm:4100:20261103T220000Z:20261104:gpu:h100"
    long_run = events_of(result, "4105")
    assert [(e.day, e.quantity) for e in long_run] == [
        ("2026-11-05", D(32)),
        ("2026-11-06", D(192)),
        ("2026-11-07", D(16)),
    ]
    assert [e.time.hour for e in long_run] == [20, 0, 0]


def test_elapsed_time_is_charged_and_spread_by_wall_clock_share() -> None:
    (a, b) = events_of(fixture_result(), "4112")  # suspended 1 h: ElapsedRaw < End - Start
    assert (a.day, a.quantity, b.day, b.quantity) == ("2026-11-07", D(3), "2026-11-08", D(3))


def test_cancelled_failed_timeout_oom_and_node_fail_jobs_still_count() -> None:
    result = fixture_result()
    states = {e.tags["slurm_job_id"]: e.tags["slurm_state"] for e in result.events}
    assert states["4102"] == "CANCELLED"
    assert states["4101_2"] == "FAILED"
    assert states["4105"] == "TIMEOUT"
    assert states["4110"] == "OUT_OF_MEMORY"
    assert states["4111"] == "NODE_FAIL"
    assert [e.quantity for e in events_of(result, "4101_2")] == [D("1.333333")]
    assert [e.quantity for e in events_of(result, "4111")] == [D("0.011111")]


def test_labels_come_from_user_and_comment_only() -> None:
    result = fixture_result()
    (e,) = events_of(result, "4102")
    assert (e.project, e.owner, e.stage, e.experiment) == ("llm-7b", "alice", "pretrain", "mix-b")
    (score,) = events_of(result, "4101_0")
    assert (score.project, score.stage, score.experiment) == (
        "data-team",
        "quality_scoring",
        "fineweb-score",
    )
    assert score.tags == {
        "slurm_job_id": "4101_0",
        "slurm_state": "COMPLETED",
        "slurm_partition": "a100",
    }
    body = score.as_json()
    assert body == {
        "id": "slurm:4101_0:20261104T100000Z:20261104:gpu",
        "time": "2026-11-04T10:00:00Z",
        "project": "data-team",
        "sku": A100,
        "quantity": "2.000000",
        "stage": "quality_scoring",
        "experiment": "fineweb-score",
        "owner": "bob",
        "tags": score.tags,
    }


def test_ids_are_stable_and_do_not_depend_on_the_mapping() -> None:
    first = fixture_result()
    again = fixture_result()
    other_skus = import_sacct(
        SACCT.read_text(),
        {"gpu:h100": "gpu.h100.reserved.hour", "a100": A100, "h100": "gpu.h100.reserved.hour"},
    )
    ids = [e.id for e in first.events]
    assert len(set(ids)) == len(ids)
    assert ids == [e.id for e in again.events] == [e.id for e in other_skus.events]


# --- single rules -----------------------------------------------------------------------------

HEADER = "JobID|Account|Partition|AllocTRES|ElapsedRaw|Start|End|State"


def one(line: str, mapping: dict[str, str] | None = None, **kw: Any) -> Any:
    return import_sacct(f"{HEADER}\n{line}\n", MAPPING if mapping is None else mapping, **kw)


def test_alloc_tres_typed_and_untyped_gpus() -> None:
    tres = parse_alloc_tres("billing=8,cpu=64,gres/gpu:h100=8,gres/gpu=8,mem=512G,node=1")
    assert (tres.typed, tres.untyped) == ({"h100": 8}, 0)
    mixed = parse_alloc_tres("cpu=8,gres/gpu:a100=2,gres/gpu:h100=4,gres/gpu=8,mem=1T")
    assert (mixed.typed, mixed.untyped) == ({"a100": 2, "h100": 4}, 2)
    assert parse_alloc_tres("cpu=8,mem=64G,node=1").total == 0
    assert parse_alloc_tres("").total == 0
    with pytest.raises(ValueError, match="whole number"):
        parse_alloc_tres("gres/gpu=lots")


def test_a_job_with_two_gpu_types_and_untyped_rest() -> None:
    result = one(
        "77|llm-7b|mixed|cpu=8,gres/gpu:a100=2,gres/gpu:h100=4,gres/gpu=8|3600|"
        "2026-11-10T01:00:00|2026-11-10T02:00:00|COMPLETED",
        {"gpu:a100": A100, "gpu:h100": H100, "mixed": "gpu.other.hour"},
    )
    assert {e.id: e.quantity for e in result.events} == {
        "slurm:77:20261110T010000Z:20261110:gpu:a100": D(2),
        "slurm:77:20261110T010000Z:20261110:gpu:h100": D(4),
        "slurm:77:20261110T010000Z:20261110:gpu": D(2),
    }
    assert [e.sku for e in result.events] == [A100, H100, "gpu.other.hour"]


def test_mapping_keys_gres_prefix_and_default_gpu_key() -> None:
    line = (
        "5|p|part|gres/gpu:l4=1,gres/gpu=3|3600|2026-11-10T00:00:00|2026-11-10T01:00:00|COMPLETED"
    )
    result = one(line, parse_mapping(["gres/gpu:l4=gpu.l4.hour", "gpu=gpu.any.hour"]))
    assert [(e.sku, e.quantity) for e in result.events] == [
        ("gpu.l4.hour", D(1)),
        ("gpu.any.hour", D(2)),
    ]
    unmapped = one(line, {})
    assert {k: v.gpu_hours for k, v in unmapped.unmapped.items()} == {
        "gpu:l4": D(1),
        "part": D(2),
    }
    assert unmapped.events == []


def test_running_pending_and_never_started_jobs_give_nothing() -> None:
    result = import_sacct(
        HEADER
        + "\n1|p|h100|gres/gpu=8|600|2026-11-10T00:00:00|Unknown|RUNNING"
        + "\n2|p|h100||0|Unknown|Unknown|PENDING"
        + "\n3_[1-4]|p|h100||0|Unknown|Unknown|PENDING"
        + "\n4|p|h100|gres/gpu=8|0|None|2026-11-10T00:00:00|CANCELLED by 0"
        + "\n5|p|h100|gres/gpu=8|600|2026-11-10T00:00:00|Unknown|SUSPENDED\n",
        MAPPING,
    )
    assert result.events == []
    assert (result.not_finished, result.without_gpus) == (4, 1)


def test_requeued_runs_each_count_once() -> None:
    # `sacct --duplicates`: the earlier run (REQUEUED, with an End) and the final run share
    # the JobID; both held GPUs, and their ids differ by Start.
    result = import_sacct(
        HEADER
        + "\n9|p|h100|gres/gpu=2|1800|2026-11-10T00:00:00|2026-11-10T00:30:00|REQUEUED"
        + "\n9|p|h100|gres/gpu=2|3600|2026-11-10T01:00:00|2026-11-10T02:00:00|COMPLETED\n",
        MAPPING,
    )
    assert [(e.id, e.quantity) for e in result.events] == [
        ("slurm:9:20261110T000000Z:20261110:gpu", D(1)),
        ("slurm:9:20261110T010000Z:20261110:gpu", D(2)),
    ]


def test_the_same_run_twice_in_the_input_counts_once() -> None:
    # Two overlapping sacct windows concatenated: the header and job 4100 appear twice.
    text = SACCT.read_text()
    twice = import_sacct(text + text, MAPPING)
    assert twice.by_sku_and_day() == EXPECTED
    assert (twice.records, twice.skipped) == (80, [])  # the second header is no record
    assert twice.repeated == 17 - 3 - 3  # every job line but the not finished and GPU-less
    assert len({e.id for e in twice.events}) == len(twice.events)


def test_local_times_are_read_in_the_given_zone() -> None:
    # Berlin is UTC+1 in November: 4100 ran 21:00Z → 03:00Z, so 3 h on each side of midnight.
    result = import_sacct(SACCT.read_text(), MAPPING, tz=ZoneInfo("Europe/Berlin"))
    assert [(e.day, e.quantity) for e in events_of(result, "4100")] == [
        ("2026-11-03", D(48)),
        ("2026-11-04", D(48)),
    ]
    assert result.by_sku_and_day() != EXPECTED
    assert sum(result.by_sku_and_day().values()) == sum(EXPECTED.values())


def test_projects_from_wckey_a_fixed_project_or_reported_when_invalid() -> None:
    text = (
        "JobID|Account|WCKey|Partition|AllocTRES|ElapsedRaw|Start|End|State|Cluster\n"
        "1|Research_Team|pretrain-7b|h100|gres/gpu=1|3600|"
        "2026-11-10T00:00:00|2026-11-10T01:00:00|COMPLETED|north\n"
        "2|bad account!|x|h100|gres/gpu=1|3600|"
        "2026-11-10T00:00:00|2026-11-10T01:00:00|COMPLETED|north\n"
    )
    by_account = import_sacct(text, MAPPING)
    assert [e.project for e in by_account.events] == ["research_team"]
    assert by_account.events[0].id == "slurm:north:1:20261110T000000Z:20261110:gpu"
    assert by_account.events[0].tags["slurm_cluster"] == "north"
    assert [(s.source, s.line) for s in by_account.skipped] == [("2", 3)]
    assert "not a valid project name" in by_account.skipped[0].reason
    assert [e.project for e in import_sacct(text, MAPPING, project_from="wckey").events] == [
        "pretrain-7b",
        "x",
    ]
    fixed = import_sacct(text, MAPPING, project="llm", cluster="south")
    assert [e.project for e in fixed.events] == ["llm", "llm"]
    assert fixed.events[0].id.startswith("slurm:south:1:")


def test_parsable_with_trailing_pipe_and_any_column_order() -> None:
    text = (
        "State|End|Start|ElapsedRaw|AllocTRES|Partition|Account|JobID|\n"
        "COMPLETED|2026-11-10T01:00:00|2026-11-10T00:00:00|3600|gres/gpu=2|h100|llm|8|\n"
    )
    (e,) = import_sacct(text, MAPPING).events
    assert (e.sku, e.quantity, e.project) == (H100, D(2), "llm")


def test_not_sacct_output_is_refused_with_the_command_to_run() -> None:
    with pytest.raises(SacctFormatError, match="missing column"):
        import_sacct("JobID|State\n1|COMPLETED\n", MAPPING)
    with pytest.raises(SacctFormatError, match="empty"):
        import_sacct("\n\n", MAPPING)
    bad = one("1|p|h100|gres/gpu=1|3600|2026-11-10T00:00:00")  # a short line
    assert [s.reason for s in bad.skipped] == ["6 fields where the header has 8"]


def test_invalid_comment_labels_are_warned_about_not_posted() -> None:
    text = (
        "JobID|Account|Partition|AllocTRES|ElapsedRaw|Start|End|State|Comment\n"
        "1|p|h100|gres/gpu=1|3600|2026-11-10T00:00:00|2026-11-10T01:00:00|COMPLETED|"
        "stage=pretraining;experiment=ok-1\n"
    )
    result = import_sacct(text, MAPPING)
    (e,) = result.events
    assert (e.stage, e.experiment) == (None, "ok-1")
    assert len(result.warnings) == 1 and "pretraining" in result.warnings[0]
    assert "stage" not in e.as_json()


# --- the arithmetic -----------------------------------------------------------------------------


def test_day_slices_cut_at_utc_midnight() -> None:
    start = datetime(2026, 11, 1, 23, 59, 30, tzinfo=UTC)
    assert day_slices(start, start + timedelta(days=1, seconds=60)) == [
        (start, 30),
        (datetime(2026, 11, 2, tzinfo=UTC), 86400),
        (datetime(2026, 11, 3, tzinfo=UTC), 30),
    ]


@given(
    gpus=st.integers(1, 4096),
    start=st.integers(0, 86399),
    wall=st.integers(1, 10 * 86400),
    suspended=st.integers(0, 86400),
)
def test_day_parts_sum_exactly_to_the_once_rounded_total(
    gpus: int, start: int, wall: int, suspended: int
) -> None:
    begin = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(seconds=start)
    end = begin + timedelta(seconds=wall)
    elapsed = max(1, wall - suspended)
    exact = Fraction(gpus * elapsed, 3600)
    parts = usage_slices(begin, end, gpus, elapsed)
    assert sum(q for _, q in parts) == to_micro_decimal(exact)
    assert all(q > 0 and q.as_tuple().exponent >= -6 for _, q in parts)
    # Each day's part is within one micro GPU-hour of its exact share.
    slices = day_slices(begin, end)
    shares = {when: exact * seconds / wall for when, seconds in slices}
    for when, q in parts:
        assert abs(Fraction(q) - shares[when]) <= Fraction(1, 10**6)


def test_spread_rounds_half_to_even_cumulatively() -> None:
    assert spread(Fraction(1, 3), [1, 1, 1]) == [D("0.111111"), D("0.111111"), D("0.111111")]
    assert spread(Fraction(1, 10**6) / 2, [1]) == [D("0")]  # half a micro unit: to even (0)
    assert spread(Fraction(3, 10**6) / 2, [1]) == [D("0.000002")]
    assert spread(Fraction(5), [0, 0]) == [D(5), D(0)]


# --- Kubernetes pods ----------------------------------------------------------------------------

POD_MAPPING = {"NVIDIA-H100-80GB-HBM3": H100, "nvidia.com/gpu": A100}


def test_pods_gpu_hours_per_sku_per_day() -> None:
    result = import_pods(json.loads(PODS.read_text()), POD_MAPPING)
    # train-0: 8 H100 (node selector) 2026-11-04 23:00 → 11-05 01:30: 8 and 12
    # score-a: 2 GPUs (limits only) → a100 by resource name, 45 min: 1.5; Failed still counts
    # mig-job: nvidia.com/mig-1g.10gb unmapped, 1 × 2 h = 2; web: no GPU; pending: not finished
    assert totals_by_sku_and_day(result.events) == {
        (A100, "2026-11-05"): D("1.5"),
        (H100, "2026-11-04"): D(8),
        (H100, "2026-11-05"): D(12),
    }
    assert (result.records, result.counted, result.not_finished, result.without_gpus) == (
        6,
        2,
        2,
        1,
    )
    assert {k: v.gpu_hours for k, v in result.unmapped.items()} == {"nvidia.com/mig-1g.10gb": D(2)}
    train = [e for e in result.events if e.tags["k8s_pod"] == "train-0"]
    assert [e.id for e in train] == [
        "k8s:6f1c2a4e-0000-4000-8000-000000000001:20261104:nvidia.com/gpu",
        "k8s:6f1c2a4e-0000-4000-8000-000000000001:20261105:nvidia.com/gpu",
    ]
    assert (train[0].project, train[0].stage, train[0].experiment, train[0].owner) == (
        "llm-7b",
        "pretrain",
        "mix-a",
        "alice",
    )


def test_a_pod_listed_twice_counts_once() -> None:
    document = json.loads(PODS.read_text())
    once = import_pods(document, POD_MAPPING)
    twice = import_pods(document["items"] * 2, POD_MAPPING)  # a bare JSON array works too
    assert [e.id for e in twice.events] == [e.id for e in once.events]
    assert twice.repeated == 3  # train-0, score-a, mig-job (GPU pods that finished)


def test_pods_project_from_a_label() -> None:
    result = import_pods(
        json.loads(PODS.read_text()), POD_MAPPING, project_label="trainledger.dev/project"
    )
    assert {e.project for e in result.events} == {"llm-7b"}
    assert [s.source for s in result.skipped] == ["data/score-a"]  # no such label


# --- end to end: the command line against a real service ----------------------------------------

CARD = {
    "currency": "USD",
    "effective_from": "2020-01-01T00:00:00Z",
    "skus": [
        {"code": H100, "category": "compute", "unit": "gpu_hour", "unit_price": "2.50"},
        {"code": A100, "category": "compute", "unit": "gpu_hour", "unit_price": "1.50"},
    ],
}


def shifted_fixture(tmp_path: Path) -> tuple[Path, int]:
    """The fixture moved by whole days so its last day is 3 days ago: inside the service's
    35-day deduplication window whenever the test runs, with every midnight where it was."""
    last = date(2026, 11, 8)
    shift = (datetime.now(UTC).date() - timedelta(days=3)) - last
    lines = []
    for line in SACCT.read_text().splitlines():
        fields = line.split("|")
        for i in (7, 8):  # Start, End
            try:
                when = datetime.fromisoformat(fields[i])
            except ValueError:
                continue
            fields[i] = (when + shift).isoformat()
        lines.append("|".join(fields))
    path = tmp_path / "sacct.txt"
    path.write_text("\n".join(lines) + "\n")
    return path, shift.days


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_cli_imports_sacct_and_a_second_import_adds_nothing(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    client = ["--url", api.base_url, "--token", api.admin_token]
    card = tmp_path / "card.json"
    card.write_text(json.dumps(CARD))
    assert run(capsys, "ratecard", "apply", str(card), *client)[0] == 0
    path, shift = shifted_fixture(tmp_path)
    maps = ["--map", "gpu:h100=gpu.h100.hour", "--map", "h100=gpu.h100.hour"]
    maps += ["--map", "a100=gpu.a100.hour"]

    dry = run(capsys, "import", "slurm", str(path), *maps, "--dry-run", *client)
    assert dry[0] == 1  # the mi300x job is unmapped
    assert "gpu:mi300x" in dry[1] and "dry run: nothing posted" in dry[2]

    code, out, err = run(capsys, "import", "slurm", str(path), *maps, *client)
    assert code == 1, err  # still the unmapped mi300x job; everything else was accepted
    n_events = len(fixture_result().events)
    assert f"{n_events} accepted, 0 duplicates (already counted), 0 rejected" in out
    assert "10 jobs with GPUs counted, 23 job steps ignored" in err

    # Exact GPU hours per SKU and day, as the service now holds them (all three projects).
    held: dict[tuple[str, str], Decimal] = {}
    async with api.client() as c:
        for project in ("llm-7b", "data-team", "eval-suite"):
            r = await c.get("/v1/costs", params={"project": project, "group_by": "day,sku"})
            assert r.status_code == 200, r.text
            for row in r.json()["rows"]:
                key = (row["key"]["sku"], row["key"]["day"])
                held[key] = held.get(key, D(0)) + D(row["quantity"])
    expected = {
        (sku, (date.fromisoformat(day) + timedelta(days=shift)).isoformat()): hours
        for (sku, day), hours in EXPECTED.items()
    }
    assert held == expected

    code, out, _ = run(capsys, "import", "slurm", str(path), *maps, *client)
    assert f"0 accepted, {n_events} duplicates (already counted), 0 rejected" in out
    async with api.client() as c:
        r = await c.get("/v1/costs", params={"project": "llm-7b", "group_by": "sku"})
    # llm-7b's H100 hours: 4100 96 + 4102 1 + 4105 240 + 4112 6 = 343, at 2.50, counted once.
    assert r.json()["total_cost"] == "857.50"


async def test_cli_reports_rejected_events_with_their_reasons(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    client = ["--url", api.base_url, "--token", api.admin_token]
    card = tmp_path / "card.json"
    card.write_text(json.dumps(CARD))
    assert run(capsys, "ratecard", "apply", str(card), *client)[0] == 0
    path, _ = shifted_fixture(tmp_path)
    # a100 partition mapped to a SKU the card lacks: those 4 events are rejected, the rest land.
    code, out, _ = run(
        capsys,
        "import",
        "slurm",
        str(path),
        "--map",
        "gpu:h100=gpu.h100.hour",
        "--map",
        "h100=gpu.h100.hour",
        "--map",
        "a100=gpu.a100x.hour",
        "--map",
        "gpu:mi300x=gpu.h100.hour",
        "--batch-size",
        "2",  # [4101_0, 4101_1] is a batch of rejected events only: a 422 answer, still read
        *client,
    )
    assert code == 1
    n_events = len(fixture_result().events) + 1  # the mi300x job is now mapped: +1 event
    assert f"{n_events - 4} accepted, 0 duplicates (already counted), 4 rejected" in out
    assert "unknown SKU 'gpu.a100x.hour'" in out


async def test_cli_imports_pods(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    client = ["--url", api.base_url, "--token", api.admin_token]
    card = tmp_path / "card.json"
    card.write_text(json.dumps(CARD))
    assert run(capsys, "ratecard", "apply", str(card), *client)[0] == 0
    # Move the pods to two days ago (whole days; times are RFC 3339 strings in the JSON).
    shift = (datetime.now(UTC).date() - timedelta(days=2)) - date(2026, 11, 5)
    text = re.sub(
        r"2026-11-0[45]",
        lambda m: (date.fromisoformat(m[0]) + shift).isoformat(),
        PODS.read_text(),
    )
    pods = tmp_path / "pods.json"
    pods.write_text(text)
    maps = ["--map", f"NVIDIA-H100-80GB-HBM3={H100}", "--map", f"nvidia.com/gpu={A100}"]
    maps += ["--map", f"nvidia.com/mig-1g.10gb={A100}"]
    code, out, err = run(capsys, "import", "pods", str(pods), *maps, *client)
    assert code == 0, err
    assert "4 accepted, 0 duplicates (already counted), 0 rejected" in out
    code, out, _ = run(capsys, "import", "pods", str(pods), *maps, *client)
    assert "0 accepted, 4 duplicates" in out
    async with httpx.AsyncClient(
        base_url=api.base_url, headers={"Authorization": f"Bearer {api.admin_token}"}
    ) as c:
        r = await c.get("/v1/costs", params={"project": "llm-7b", "group_by": "sku"})
        rows = {row["key"]["sku"]: D(row["quantity"]) for row in r.json()["rows"]}
    assert rows == {H100: D(20), A100: D(2)}  # train-0 8 + 12; the MIG pod 2 (in llm-7b)
