"""Slurm accounting (`sacct --parsable2`) to GPU-hour usage events. Pure: text in, events out.

Input: the output of, for example,

    TZ=UTC sacct --allusers --parsable2 --starttime 2026-11-01 --endtime now \\
        --format JobID,Account,Partition,AllocTRES,ElapsedRaw,Start,End,State,User,Comment

`|`-separated fields with a header line (the trailing `|` of `--parsable` is tolerated).
Required columns: JobID, Account, Partition, AllocTRES, ElapsedRaw, Start, End, State;
optional: User (the event's owner), Comment (stage/experiment, below), WCKey, Cluster.
Column order is free; names are matched without regard to case.

Rules (each one is tested in tests/api/test_import_slurm.py):

* **Allocations, not steps.** A job's own line (`123`, an array task `123_4`, a heterogeneous
  component `123+0`) is counted with its AllocTRES; step lines (`123.batch`, `123.extern`,
  `123.0`, `123_4.batch`) are skipped, so nothing is counted twice and an allocation the job
  held but did not use in a step still counts: it was paid for. `sacct -X` gives the same.
* **GPUs** come from AllocTRES: `gres/gpu:h100=8` (typed) and `gres/gpu=8` (the total). A typed
  count is mapped by its type (`gpu:h100`), then by the job's partition; GPUs in the total but
  in no typed entry are mapped by the partition, then by the key `gpu`. A job without GPUs gives
  no event (counted as "without GPUs"). GPU usage with no SKU in the mapping is reported per
  key with its GPU hours, never silently dropped.
* **GPU hours = GPUs × ElapsedRaw / 3600**, exact rationals, rounded once per job to 6 decimal
  places (see service/importers/common.py).
* **Days.** A run is cut at every 00:00 UTC; each day gets ElapsedRaw in proportion to the
  run's wall-clock seconds [Start, End) in that day (all of them when, as usual,
  ElapsedRaw = End − Start). Each slice is one event whose time is the slice's start: the job's
  Start for the first day, 00:00 UTC for the others. Start/End without an offset are read in
  the `tz` given (default UTC; run sacct with `TZ=UTC` to make that true).
* **States.** Finished jobs count whatever their state: CANCELLED, FAILED, TIMEOUT,
  OUT_OF_MEMORY, NODE_FAIL, PREEMPTED jobs held their GPUs until they ended, and so did the
  earlier runs of a requeued job (REQUEUED lines with an End, shown by `sacct --duplicates`).
  Running, pending, suspended or requeuing jobs (End `Unknown`), and pending array ranges
  (`123_[5-9]`), are skipped and counted as "not finished": import again once they end.
  Counting a running job "to now" would use up the event ids of the days it is still running
  with partial figures, and a later import could not correct them. Jobs that never started
  (Start `Unknown`/`None`) give nothing.
* **Event ids** are `slurm:[<cluster>:]<JobID>:<Start>:<day>:<gpu key>` (Start as
  YYYYMMDDTHHMMSSZ, day as YYYYMMDD, gpu key `gpu:<type>` or `gpu`): stable across
  re-imports (a second import is all duplicates), distinct for each run of a requeued job
  (`sacct --duplicates`) and across job-id wrap-around, and independent of the SKU mapping
  (changing the mapping cannot count a job twice).
* **Repeats.** A run (cluster, JobID, Start) met again further down the input, as when the
  outputs of overlapping `sacct` windows are concatenated, is counted once.
* **Project** from the Account column (lower-cased; Slurm keeps it in lower case anyway), or
  WCKey, or one fixed project. A name that is not a valid project is reported, not posted.
* **Labels.** `owner` is the User column when present. `stage` and `experiment` come only from
  the Comment column written as `stage=pretrain experiment=mix-a` (spaces, commas or
  semicolons between pairs; `sbatch --comment "stage=pretrain experiment=mix-a"`); otherwise
  they are left out (the service's default stage is `other`). Tags: `slurm_job_id`,
  `slurm_partition`, `slurm_state`, `gpu_type` when typed, `slurm_cluster` when known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Literal

from .common import (
    ImportEvent,
    ImportResult,
    Skipped,
    clean_label,
    clean_project,
    gpu_hours,
    labels_from_text,
    to_micro_decimal,
    usage_slices,
)

# The columns `trainledger slurm-hook` asks sacct for; give `import slurm` the same (with
# `TZ=UTC` and the same `--cluster`) and the two make the same event ids.
SACCT_FIELDS = (
    "JobID",
    "Account",
    "Partition",
    "AllocTRES",
    "ElapsedRaw",
    "Start",
    "End",
    "State",
    "User",
    "Comment",
    "WCKey",
)
REQUIRED = ("jobid", "account", "partition", "alloctres", "elapsedraw", "start", "end", "state")
# Not finished: their allocation may still grow. Import them again once they have ended.
NOT_FINISHED_STATES = frozenset(
    {
        "RUNNING",
        "PENDING",
        "SUSPENDED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "CONFIGURING",
        "COMPLETING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "SPECIAL_EXIT",
        "RESV_DEL_HOLD",
    }
)
NO_TIME = frozenset({"", "Unknown", "None", "N/A"})
JOB_ID_RE = re.compile(r"^\d+(?:_\d+)?(?:\+\d+)?$")
GPU_TRES_RE = re.compile(r"^gres/gpu(?::(?P<type>[^=]+))?$")
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_.:/@+=\-]")

ProjectFrom = Literal["account", "wckey"]


class SacctFormatError(ValueError):
    """The input is not `sacct --parsable2` output with the needed columns."""


@dataclass(frozen=True)
class GpuAllocation:
    """GPUs in one AllocTRES: per type, and those in the total with no type."""

    typed: dict[str, int]
    untyped: int

    @property
    def total(self) -> int:
        return sum(self.typed.values()) + self.untyped


def parse_alloc_tres(text: str) -> GpuAllocation:
    """GPUs in an AllocTRES like ``billing=8,cpu=64,gres/gpu:h100=8,gres/gpu=8,mem=512G,node=1``."""
    typed: dict[str, int] = {}
    total: int | None = None
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        match = GPU_TRES_RE.match(name) if sep else None
        if match is None:
            continue
        try:
            count = int(value)
        except ValueError as exc:
            raise ValueError(f"GPU count {value!r} in {name} is not a whole number") from exc
        if match["type"]:
            typed[match["type"]] = typed.get(match["type"], 0) + count
        else:
            total = count
    typed = {k: v for k, v in typed.items() if v > 0}
    untyped = max(0, (total or 0) - sum(typed.values()))
    return GpuAllocation(typed, untyped)


def parse_time(text: str, tz: tzinfo) -> datetime | None:
    """sacct's `2026-11-03T22:15:07` (local time of `tz`) or an ISO time with offset."""
    text = text.strip()
    if text in NO_TIME:
        return None
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    return when.astimezone(UTC)


def normalise_mapping(mapping: Mapping[str, str]) -> dict[str, str]:
    """Keys: `gpu:<type>` (also written `gres/gpu:<type>`), `gpu`, or a partition name."""
    out: dict[str, str] = {}
    for key, sku in mapping.items():
        k = key.strip()
        if k.startswith("gres/"):
            k = k[len("gres/") :]
        out[k] = sku
    return out


def _id_part(text: str) -> str:
    return _UNSAFE_ID_CHARS.sub("-", text)


def _rows(text: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    header: list[str] | None = None
    rows: list[tuple[int, list[str]]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        fields = line.split("|")
        if header is None:
            header = [f.strip().lower() for f in fields]
            if header and header[-1] == "":  # `--parsable` ends every line with '|'
                header.pop()
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise SacctFormatError(
                    "not `sacct --parsable2` output with a header line: missing column(s) "
                    f"{', '.join(missing)} (line {number} is {line[:80]!r}); run sacct with "
                    "--parsable2 --format JobID,Account,Partition,AllocTRES,ElapsedRaw,Start,"
                    "End,State[,User,Comment] and without --noheader"
                )
            continue
        if len(fields) == len(header) + 1 and fields[-1] == "":
            fields.pop()
        if [f.strip().lower() for f in fields] == header:  # the header of a concatenated output
            continue
        rows.append((number, fields))
    if header is None:
        raise SacctFormatError("empty input: expected `sacct --parsable2` output")
    return header, rows


@dataclass(frozen=True)
class _Options:
    """What every row of one import shares: the SKU mapping and where projects come from."""

    skus: Mapping[str, str]
    project_from: ProjectFrom
    fixed_project: str | None
    tz: tzinfo
    cluster: str | None


def import_sacct(
    text: str,
    mapping: Mapping[str, str],
    *,
    project_from: ProjectFrom = "account",
    project: str | None = None,
    tz: tzinfo = UTC,
    cluster: str | None = None,
) -> ImportResult:
    """Events for the finished GPU jobs in `sacct --parsable2` output (rules: module docstring).

    Raises SacctFormatError when the header is missing or lacks a required column; problems
    with single lines are reported in ``skipped``.
    """
    header, rows = _rows(text)
    fixed_project = clean_project(project) if project is not None else None
    if project is not None and fixed_project is None:
        raise ValueError(f"project {project!r} is not a valid project name")
    options = _Options(normalise_mapping(mapping), project_from, fixed_project, tz, cluster)
    result = ImportResult()
    seen: set[tuple[str, str, datetime]] = set()  # (cluster, job id, start): one run
    for number, fields in rows:
        result.records += 1
        if len(fields) != len(header):
            result.skipped.append(
                Skipped(
                    fields[0] if fields else "",
                    f"{len(fields)} fields where the header has {len(header)}",
                    number,
                )
            )
            continue
        _import_row(dict(zip(header, fields, strict=True)), number, options, seen, result)
    return result


def _import_row(
    row: dict[str, str],
    number: int,
    options: _Options,
    seen: set[tuple[str, str, datetime]],
    result: ImportResult,
) -> None:
    """Count one sacct line in `result`: as events, or as the reason it has none."""
    job_id = row["jobid"].strip()
    if "." in job_id:
        result.steps += 1
        return
    if "[" in job_id:  # pending array tasks, e.g. 123_[5-9%2]
        result.not_finished += 1
        return
    if not JOB_ID_RE.match(job_id):
        result.skipped.append(Skipped(job_id, "not a Slurm job id", number))
        return
    state = (row["state"].split() or [""])[0]
    try:
        start = parse_time(row["start"], options.tz)
        end = parse_time(row["end"], options.tz)
    except ValueError as exc:
        result.skipped.append(Skipped(job_id, f"bad Start/End time: {exc}", number))
        return
    if state in NOT_FINISHED_STATES or (start is not None and end is None):
        result.not_finished += 1
        return
    try:
        gpus = parse_alloc_tres(row["alloctres"])
        elapsed = int(row["elapsedraw"] or "0")
    except ValueError as exc:
        result.skipped.append(Skipped(job_id, str(exc), number))
        return
    if start is None or end is None or gpus.total == 0 or elapsed <= 0:
        # Never started, or held no GPU (a CPU-only job, a job cancelled at once).
        result.without_gpus += 1
        return
    cluster_name = options.cluster or row.get("cluster", "").strip() or None
    run = (cluster_name or "", job_id, start)
    if run in seen:  # concatenated outputs of overlapping sacct windows
        result.repeated += 1
        return
    seen.add(run)
    raw_project = row.get(options.project_from, "")
    project_name = options.fixed_project or clean_project(raw_project)
    if project_name is None:
        result.skipped.append(
            Skipped(
                job_id,
                f"{options.project_from} {raw_project!r} is not a valid project name "
                "(lower-case letters, digits, '-', '_'; at most 64)",
                number,
            )
        )
        return
    job = _Job(job_id, state, start, end, elapsed, gpus, cluster_name, project_name)
    if _append_job_events(job, row, number, options.skus, result):
        result.counted += 1


@dataclass(frozen=True)
class _Job:
    """A finished GPU job, checked: what its events are made from."""

    job_id: str
    state: str
    start: datetime
    end: datetime
    elapsed: int
    gpus: GpuAllocation
    cluster: str | None
    project: str


def _append_job_events(
    job: _Job, row: dict[str, str], number: int, skus: Mapping[str, str], result: ImportResult
) -> bool:
    """Append the job's events (one per GPU kind and UTC day); False when none was mapped."""
    partition = row["partition"].strip()
    labels, problems = labels_from_text(row.get("comment", ""))
    for problem in problems:
        result.warnings.append(f"job {job.job_id} (line {number}): comment ignored: {problem}")
    owner = clean_label(row.get("user", "").strip())
    tags = {"slurm_job_id": job.job_id, "slurm_state": job.state}
    if partition:
        tags["slurm_partition"] = partition
    if job.cluster:
        tags["slurm_cluster"] = job.cluster
    parts: list[tuple[str, str | None, int, str]] = []  # (id key, type, count, unmapped key)
    for gpu_type, count in sorted(job.gpus.typed.items()):
        key = f"gpu:{gpu_type}"
        sku = skus.get(key) or skus.get(partition)
        parts.append((key, sku, count, key))
    if job.gpus.untyped:
        sku = skus.get(partition) or skus.get("gpu")
        parts.append(("gpu", sku, job.gpus.untyped, partition or "gpu"))
    prefix = "slurm:" + (f"{_id_part(job.cluster)}:" if job.cluster else "")
    start_stamp = job.start.strftime("%Y%m%dT%H%M%SZ")
    counted = False
    for id_key, sku, count, unmapped_key in parts:
        if sku is None:
            result.add_unmapped(unmapped_key, to_micro_decimal(gpu_hours(count, job.elapsed)))
            continue
        part_tags = dict(tags)
        if id_key.startswith("gpu:"):
            part_tags["gpu_type"] = id_key[len("gpu:") :]
        for when, quantity in usage_slices(job.start, job.end, count, job.elapsed):
            result.events.append(
                ImportEvent(
                    id=f"{prefix}{job.job_id}:{start_stamp}:{when:%Y%m%d}:{_id_part(id_key)}",
                    time=when,
                    project=job.project,
                    sku=sku,
                    quantity=quantity,
                    stage=labels.get("stage"),
                    experiment=labels.get("experiment"),
                    owner=owner,
                    tags=part_tags,
                )
            )
            counted = True
    return counted
