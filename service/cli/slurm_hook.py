"""`trainledger slurm-hook`: a Slurm job's GPU hours spooled the moment it ends.

Slurm runs it from slurmctld when a job ends, as `JobCompLoc` of `JobCompType=jobcomp/script`
(the job id in `$JOBID`) or as `EpilogSlurmctld` (`$SLURM_JOB_ID`); both are set up in
docs/guides/schedulers.md. It reads the job's accounting the way `import slurm` reads a dump:
`sacct --parsable2` with the columns SACCT_FIELDS, `TZ=UTC`, for that job, through the same
`import_sacct`, so its events have the ids a later `import slurm` of the same jobs gives (that
import then counts them as duplicates: nothing twice). It puts them in the durable spool
(trainledger.client.spool) and returns; `trainledger agent` (or `spool flush`) posts them.

slurmdbd may not have the end of a job that has only just ended (slurmctld sends it on
asynchronously): sacct is asked again for up to `--wait` seconds, then `scontrol show job`
(slurmctld's own record, in memory for MinJobAge after the end) is read instead.

Exit status: 0 when the job's GPU usage was spooled (or it had none); 1 when some was not
(unmapped GPUs, the accounting unreadable, the job not ended): `import slurm` counts it later.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from collections.abc import Callable
from datetime import UTC

from ..config import Settings
from ..config.environment import child_environment, outside_variable
from ..importers.common import ImportResult
from ..importers.scontrol import scontrol_to_sacct
from ..importers.slurm import SACCT_FIELDS, SacctFormatError, import_sacct
from .client import CliError
from .events import spool_from_args
from .figures import count
from .imports import mapping_from_args
from .ui import ui

# EpilogSlurmctld sets SLURM_JOB_ID; jobcomp/script sets JOBID.
JOB_ID_VARIABLES = ("SLURM_JOB_ID", "JOBID")
JOB_ID_RE = re.compile(r"^\d+(?:_\d+)?(?:\+\d+)?$")
COMMAND_TIMEOUT_S = 30.0
POLL_S = 0.5


class AccountingUnreadable(Exception):
    """sacct or scontrol could not be run, or failed."""


def job_ids_from(args: argparse.Namespace) -> list[str]:
    ids: list[str] = list(args.job_ids)
    if not ids:
        ids = [v for n in JOB_ID_VARIABLES if (v := outside_variable(n))][:1]
    if not ids:
        raise CliError("no job id: pass one, or run from Slurm ($SLURM_JOB_ID or $JOBID)")
    for job_id in ids:
        if not JOB_ID_RE.match(job_id):
            raise CliError(f"{job_id!r} is not a Slurm job id")
    return ids


def run_slurm_command(argv: list[str]) -> str:
    """The command's stdout; times in UTC, as the importer reads them."""
    try:
        done = subprocess.run(
            argv,
            env=child_environment(TZ="UTC"),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AccountingUnreadable(f"{argv[0]}: {exc}") from exc
    if done.returncode != 0:
        raise AccountingUnreadable(
            f"{' '.join(argv)} exited with {done.returncode}: {done.stderr.strip()[:500]}"
        )
    return done.stdout


def sacct_text(job_id: str) -> str:
    fields = ",".join(SACCT_FIELDS)
    return run_slurm_command(
        ["sacct", "--jobs", job_id, "--allusers", "--duplicates", "--parsable2", "--format", fields]
    )


def scontrol_text(job_id: str) -> str:
    return scontrol_to_sacct(run_slurm_command(["scontrol", "show", "job", job_id]))


def has_ended(result: ImportResult) -> bool:
    """The output holds the job's allocation and every run in it has ended."""
    return result.records - result.steps > 0 and result.not_finished == 0


def read_ended_job(
    job_id: str, wait_s: float, parse: Callable[[str], ImportResult]
) -> tuple[ImportResult | None, str]:
    """(the job's events, where they came from); None when neither sacct nor scontrol shows
    the job ended."""
    deadline = time.monotonic() + wait_s
    problems: list[str] = []
    while True:
        try:
            result = parse(sacct_text(job_id))
        except AccountingUnreadable as exc:
            problems.append(str(exc))
            break
        if has_ended(result):
            return result, "sacct"
        left = deadline - time.monotonic()
        if left <= 0:
            problems.append("sacct does not show it ended yet")
            break
        time.sleep(min(POLL_S, left))
    try:
        result = parse(scontrol_text(job_id))
    except AccountingUnreadable as exc:
        problems.append(str(exc))
    else:
        if has_ended(result):
            return result, "scontrol"
        problems.append("scontrol does not show it ended")
    return None, "; ".join(problems)


def cmd_slurm_hook(args: argparse.Namespace, settings: Settings) -> int:
    mapping = mapping_from_args(args)
    spool = spool_from_args(args, settings)
    job_ids = job_ids_from(args)

    def parse(text: str) -> ImportResult:
        try:
            return import_sacct(
                text,
                mapping,
                project_from=args.project_from,
                project=args.project,
                tz=UTC,
                cluster=args.cluster,
            )
        except SacctFormatError as exc:
            raise AccountingUnreadable(str(exc)) from exc

    complete = True
    for job_id in job_ids:
        result, source = read_ended_job(job_id, args.wait, parse)
        if result is None:
            ui.err.print(f"job {job_id}: not spooled ({source})", highlight=False, markup=False)
            complete = False
            continue
        try:
            spool.put([event.as_json() for event in result.events])
        except OSError as exc:  # full disk, permissions: say so in slurmctld's log, plainly
            raise CliError(f"job {job_id}: cannot spool in {spool.directory}: {exc}") from exc
        ui.err.print(
            f"job {job_id}: {count(len(result.events), 'event')} spooled (from {source})",
            highlight=False,
            markup=False,
        )
        for key, entry in sorted(result.unmapped.items()):
            ui.err.print(
                f"job {job_id}: unmapped GPU usage {key}: {entry.gpu_hours} GPU hours "
                f"(map it with --map {key}=<sku>)",
                highlight=False,
                markup=False,
            )
        for item in result.skipped:
            ui.err.print(f"job {job_id}: skipped: {item.reason}", highlight=False, markup=False)
        complete = complete and not result.unmapped and not result.skipped
    return 0 if complete else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hook = sub.add_parser(
        "slurm-hook",
        help="spool a Slurm job's GPU hours when it ends (jobcomp/script, EpilogSlurmctld)",
        description=(
            "Run by slurmctld when a job ends (JobCompLoc with JobCompType=jobcomp/script, or "
            "EpilogSlurmctld; docs/guides/schedulers.md): reads the job's accounting with "
            "sacct (else scontrol show job) and spools its GPU-hour events, with the ids "
            "`import slurm` gives the same job. `trainledger agent` posts the spool."
        ),
    )
    hook.add_argument(
        "job_ids", nargs="*", metavar="JOB_ID", help="default: $SLURM_JOB_ID, else $JOBID"
    )
    hook.add_argument(
        "--map",
        action="append",
        metavar="KEY=SKU",
        help="map a GPU type or partition to a SKU, as for `import slurm` (repeatable)",
    )
    hook.add_argument("--map-file", help="a JSON object {KEY: SKU}; --map entries win")
    hook.add_argument("--project", help="every event to this project")
    hook.add_argument(
        "--project-from",
        choices=("account", "wckey"),
        default="account",
        help="the column that names the project (default: account)",
    )
    hook.add_argument(
        "--cluster", help="cluster name in every event id: the same as for `import slurm`"
    )
    hook.add_argument("--spool", help="the spool directory (default: $TRAINLEDGER_SPOOL)")
    hook.add_argument(
        "--wait",
        type=float,
        default=10.0,
        help="seconds to wait for sacct to show the job ended before reading scontrol (10)",
    )
    hook.set_defaults(handler=cmd_slurm_hook)
