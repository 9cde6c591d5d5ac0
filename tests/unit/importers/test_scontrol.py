"""`scontrol show job` read as sacct lines (service/importers/scontrol.py): the events of a job
read from slurmctld are those `import slurm` makes of the same job from sacct, ids included.

tests/data/scontrol_show_job.txt is recorded `scontrol show job` output for two jobs of
tests/data/sacct_parsable2.txt: 4110 (untyped GPUs, out of memory, across midnight, caught
COMPLETING while its epilogs run) and the array task 4101_2 (raw job id 4118, failed).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trainledger.importers.scontrol import (
    parse_records,
    run_seconds,
    sacct_job_id,
    scontrol_to_sacct,
)
from trainledger.importers.slurm import import_sacct

DATA = Path(__file__).resolve().parents[2] / "data"
SCONTROL = DATA / "scontrol_show_job.txt"
SACCT = DATA / "sacct_parsable2.txt"
MAPPING = {"gpu:h100": "gpu.h100.hour", "a100": "gpu.a100.hour", "h100": "gpu.h100.hour"}


def events_by_id(text: str, jobs: set[str]) -> dict[str, tuple[object, ...]]:
    result = import_sacct(text, MAPPING)
    return {
        e.id: (e.time, e.project, e.sku, e.quantity, e.stage, e.experiment, e.owner)
        for e in result.events
        if e.tags["slurm_job_id"] in jobs
    }


def test_a_job_read_from_scontrol_gives_the_events_sacct_gives() -> None:
    from_scontrol = events_by_id(scontrol_to_sacct(SCONTROL.read_text()), {"4110", "4101_2"})
    from_sacct = events_by_id(SACCT.read_text(), {"4110", "4101_2"})
    assert from_scontrol == from_sacct
    assert sorted(from_scontrol) == [
        "slurm:4101_2:20261104T100100Z:20261104:gpu",
        "slurm:4110:20261106T233000Z:20261106:gpu",
        "slurm:4110:20261106T233000Z:20261107:gpu",
    ]


def test_the_recorded_jobs_read_field_by_field() -> None:
    oom, task = parse_records(SCONTROL.read_text())
    assert sacct_job_id(oom) == "4110" and sacct_job_id(task) == "4101_2"
    assert oom["Comment"] == "stage=eval experiment=nightly"  # spaces kept, to the line's end
    assert oom["AllocTRES"] == "cpu=64,mem=1000G,node=1,billing=64,gres/gpu=8"
    lines = scontrol_to_sacct(SCONTROL.read_text()).splitlines()
    assert lines[0] == (
        "JobID|Account|Partition|AllocTRES|ElapsedRaw|Start|End|State|User|Comment|WCKey"
    )
    # Ended, epilogs running: the state by its exit code (a tag only).
    assert lines[1].split("|")[:9] == [
        "4110",
        "eval-suite",
        "h100",
        "cpu=64,mem=1000G,node=1,billing=64,gres/gpu=8",
        "3600",
        "2026-11-06T23:30:00",
        "2026-11-07T00:30:00",
        "FAILED",
        "dave",
    ]


def test_heterogeneous_components_and_one_line_output() -> None:
    text = (
        "JobId=5000 HetJobId=5000 HetJobOffset=0 JobName=het UserId=eve(1005) Account=a "
        "JobState=COMPLETED RunTime=1-00:00:00 StartTime=2026-11-01T00:00:00 "
        "EndTime=2026-11-02T00:00:00 Partition=cpu AllocTRES=cpu=8\n"
        "JobId=5001 HetJobId=5000 HetJobOffset=1 JobName=het UserId=eve(1005) Account=a "
        "JobState=COMPLETED RunTime=1-00:00:00 StartTime=2026-11-01T00:00:00 "
        "EndTime=2026-11-02T00:00:00 Partition=h100 AllocTRES=cpu=8,gres/gpu:h100=2\n"
    )
    records = parse_records(text)
    assert [sacct_job_id(r) for r in records] == ["5000+0", "5000+1"]
    result = import_sacct(scontrol_to_sacct(text), MAPPING)
    assert [(e.id, e.quantity) for e in result.events] == [
        ("slurm:5000+1:20261101T000000Z:20261101:gpu:h100", 48)
    ]


def test_a_job_still_completing_without_an_end_is_not_finished() -> None:
    text = (
        "JobId=6000 JobName=x UserId=eve(1005) Account=a JobState=COMPLETING RunTime=00:10:00 "
        "StartTime=2026-11-01T00:00:00 EndTime=Unknown Partition=h100 "
        "AllocTRES=gres/gpu:h100=1\n"
    )
    result = import_sacct(scontrol_to_sacct(text), MAPPING)
    assert (result.events, result.not_finished) == ([], 1)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("00:00:20", 20), ("06:00:00", 21600), ("1-06:00:00", 108000), ("123:00:01", 442801)],
)
def test_run_time(text: str, seconds: int) -> None:
    assert run_seconds(text) == seconds


def test_a_run_time_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="RunTime"):
        run_seconds("INVALID")
