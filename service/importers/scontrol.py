"""`scontrol show job` output as `sacct --parsable2` lines. Pure: text in, text out.

The Slurm hook (`trainledger slurm-hook`) reads a job's accounting with `sacct`, as `import
slurm` does. When a job has just ended, slurmdbd may not have its end yet (slurmctld sends it
on asynchronously); slurmctld itself has it, and `scontrol show job` shows it. This module
turns that record into the sacct columns `import_sacct` reads, so the events (and their ids)
come from one code path whichever command the figures came from:

* JobID as sacct writes it: `<ArrayJobId>_<ArrayTaskId>` for an array task,
  `<HetJobId>+<HetJobOffset>` for a heterogeneous component, else JobId.
* Start/End from StartTime/EndTime (run scontrol with `TZ=UTC`, as sacct), ElapsedRaw from
  RunTime (`[D-]HH:MM:SS`), User from `UserId=name(uid)`, the rest by name.
* JobState `COMPLETING` with an EndTime is a job that has ended while its epilogs run (which
  is when the hook runs): COMPLETED when its ExitCode is `0:0`, else FAILED. The state is a
  tag only; it plays no part in an event's id or quantity.

Values that may hold spaces (Comment, Command, WorkDir, ...) fill their line in scontrol's
multi-line output and are read to its end; a `|` in them becomes a space (sacct's separator).
"""

from __future__ import annotations

import re

from .slurm import SACCT_FIELDS

# scontrol prints these alone on their line; their value runs to the end of it.
WHOLE_LINE_KEYS = frozenset(
    {"Comment", "AdminComment", "SystemComment", "Command", "WorkDir", "StdErr", "StdIn", "StdOut"}
)
RUN_TIME_RE = re.compile(r"^(?:(?P<days>\d+)-)?(?P<h>\d+):(?P<m>\d\d):(?P<s>\d\d)$")


def parse_records(text: str) -> list[dict[str, str]]:
    """Each job of `scontrol show job` output (records apart by blank lines) as key → value."""
    records: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            if current:
                records.append(current)
            current = {}
            continue
        if line.startswith("JobId=") and current:  # `scontrol -o`: one job a line
            records.append(current)
            current = {}
        key, _, value = line.partition("=")
        if key in WHOLE_LINE_KEYS:
            current[key] = value
            continue
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep:
                current[key] = value
    if current:
        records.append(current)
    return records


def run_seconds(text: str) -> int:
    match = RUN_TIME_RE.match(text.strip())
    if match is None:
        raise ValueError(f"RunTime {text!r} is not [D-]HH:MM:SS")
    days = int(match["days"] or 0)
    return ((days * 24 + int(match["h"])) * 60 + int(match["m"])) * 60 + int(match["s"])


def sacct_job_id(record: dict[str, str]) -> str:
    array_job, task = record.get("ArrayJobId", ""), record.get("ArrayTaskId", "")
    if array_job and task.isdigit():
        return f"{array_job}_{task}"
    het_job, offset = record.get("HetJobId", ""), record.get("HetJobOffset", "")
    if het_job and offset.isdigit():
        return f"{het_job}+{offset}"
    return record.get("JobId", "")


def _state(record: dict[str, str]) -> str:
    state = record.get("JobState", "")
    if state == "COMPLETING" and record.get("EndTime", "Unknown") not in ("", "Unknown"):
        return "COMPLETED" if record.get("ExitCode", "0:0") == "0:0" else "FAILED"
    return state


def sacct_row(record: dict[str, str]) -> dict[str, str]:
    """One job's values under sacct's column names (those of SACCT_FIELDS)."""
    record = {k: v for k, v in record.items() if v != "(null)"}  # scontrol's "none"
    user = record.get("UserId", "")
    return {
        "JobID": sacct_job_id(record),
        "Account": record.get("Account", ""),
        "Partition": record.get("Partition", ""),
        "AllocTRES": record.get("AllocTRES", ""),
        "ElapsedRaw": str(run_seconds(record.get("RunTime", "00:00:00"))),
        "Start": record.get("StartTime", "Unknown"),
        "End": record.get("EndTime", "Unknown"),
        "State": _state(record),
        "User": user.split("(", 1)[0],
        "Comment": record.get("Comment", ""),
        "WCKey": record.get("WCKey", ""),
    }


def scontrol_to_sacct(text: str) -> str:
    """`sacct --parsable2` text (header and one line per job) for `scontrol show job` output."""
    lines = ["|".join(SACCT_FIELDS)]
    for record in parse_records(text):
        row = sacct_row(record)
        if row["JobID"]:
            lines.append("|".join(row[f].replace("|", " ") for f in SACCT_FIELDS))
    return "\n".join(lines) + "\n"
