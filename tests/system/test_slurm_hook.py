"""`trainledger slurm-hook` as slurmctld runs it, then `import slurm`: nothing counted twice.

Stand-in `sacct` and `scontrol` scripts, first on the PATH, answer from recorded output
(tests/data/sacct_parsable2.txt, tests/data/scontrol_show_job.txt, moved into the service's
deduplication window): `sacct` prints the columns it is asked for, in the order asked, for the
job asked, and refuses to run without `--parsable2` or with a time zone other than UTC; it can
be told to lag behind, showing a job as still running for its first N calls (slurmdbd not yet
told of the end), or for ever. `scontrol show job` prints the recorded job, or fails as
Slurm does for a job it no longer holds.

The hook runs for several jobs, the ways Slurm starts it (job id in `$SLURM_JOB_ID` for
EpilogSlurmctld, in `$JOBID` for jobcomp/script, or on the command line), into one spool;
`trainledger spool flush` posts the spool to a real service; then `trainledger import slurm`
imports the whole dump. Every event the hook spooled is one the import makes (same id, same
quantity), the import finds each of them already counted, and the service's totals are
exactly those of the import alone (EXPECTED, worked by hand in tests/api/test_import_slurm.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from trainledger.importers.slurm import import_sacct

from tests.api.test_import_slurm import CARD, EXPECTED, MAPPING, shifted_fixture
from tests.conftest import Api

DATA = Path(__file__).resolve().parents[1] / "data"
SCONTROL = DATA / "scontrol_show_job.txt"
TRAINLEDGER = (sys.executable, "-m", "trainledger.cli")
MAPS = ("--map", "gpu:h100=gpu.h100.hour", "--map", "h100=gpu.h100.hour")
MAPS += ("--map", "a100=gpu.a100.hour")

SACCT_STANDIN = """\
import os, sys
from pathlib import Path

args = sys.argv[1:]
if "--parsable2" not in args or os.environ.get("TZ") != "UTC":
    sys.exit("stand-in sacct: run me with --parsable2 and TZ=UTC")
job = args[args.index("--jobs") + 1]
fields = args[args.index("--format") + 1].split(",")
lines = Path(os.environ["STANDIN_SACCT_DUMP"]).read_text().splitlines()
header = [h.lower() for h in lines[0].split("|")]
# slurmdbd behind slurmctld: the job shown running for its first N calls (-1: always).
lag = dict(item.split("=") for item in os.environ.get("STANDIN_SACCT_LAG", "").split(",") if item)
calls = Path(os.environ["STANDIN_STATE"]) / f"sacct-{job}"
count = int(calls.read_text()) if calls.exists() else 0
calls.write_text(str(count + 1))
behind = job in lag and (lag[job] == "-1" or count < int(lag[job]))
print("|".join(fields))
for line in lines[1:]:
    row = dict(zip(header, line.split("|")))
    if row["jobid"] != job and not row["jobid"].startswith(job + "."):
        continue
    if behind:
        row["end"], row["state"] = "Unknown", "RUNNING"
    print("|".join(row.get(f.lower(), "") for f in fields))
"""

SCONTROL_STANDIN = """\
import os, sys
from pathlib import Path

if sys.argv[1:3] != ["show", "job"] or os.environ.get("TZ") != "UTC":
    sys.exit("stand-in scontrol: show job, with TZ=UTC")
job = sys.argv[3]
for record in Path(os.environ["STANDIN_SCONTROL"]).read_text().split("\\n\\n"):
    first = record.split()[0:3]
    names = {first[0].removeprefix("JobId=")}
    if len(first) > 2 and first[1].startswith("ArrayJobId="):
        names.add(first[1].split("=")[1] + "_" + first[2].split("=")[1])
    if job in names:
        print(record.strip() + "\\n")
        sys.exit(0)
sys.exit("slurm_load_jobs error: Invalid job id specified")
"""


def stand_ins(tmp_path: Path, shift: int) -> dict[str, str]:
    """A bin directory with the stand-ins, and the environment that puts it first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, source in (("sacct", SACCT_STANDIN), ("scontrol", SCONTROL_STANDIN)):
        script = bin_dir / name
        script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(source))
        script.chmod(0o755)
    shifted = re.sub(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d",
        lambda m: (datetime.fromisoformat(m[0]) + timedelta(days=shift)).isoformat(),
        SCONTROL.read_text(),
    )
    (tmp_path / "scontrol.txt").write_text(shifted)
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    return env | {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STANDIN_SACCT_DUMP": str(tmp_path / "sacct.txt"),
        "STANDIN_SCONTROL": str(tmp_path / "scontrol.txt"),
        "STANDIN_STATE": str(tmp_path / "state"),
        "TRAINLEDGER_SPOOL": str(tmp_path / "spool"),
        "TZ": "Europe/Paris",  # slurmctld's own zone: the hook must ask for UTC
        "COLUMNS": "200",
    }


def hook(env: dict[str, str], *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TRAINLEDGER, "slurm-hook", *MAPS, "--wait", "1", *argv],
        env=env | extra,
        capture_output=True,
        text=True,
        timeout=120,
    )


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TRAINLEDGER, *argv], env=env, capture_output=True, text=True, timeout=300
    )


def spooled(spool: Path) -> dict[str, Decimal]:
    events: dict[str, Decimal] = {}
    for path in sorted((spool / "new").iterdir()):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            assert event["id"] not in events
            events[event["id"]] = Decimal(event["quantity"])
    return events


async def test_the_hook_then_a_bulk_import_count_each_job_once(api: Api, tmp_path: Path) -> None:
    dump, shift = shifted_fixture(tmp_path)
    assert dump == tmp_path / "sacct.txt"
    env = stand_ins(tmp_path, shift)
    client = ("--url", api.base_url, "--token", api.admin_token)
    card = tmp_path / "card.json"
    card.write_text(json.dumps(CARD))
    assert cli(env, "ratecard", "apply", str(card), *client).returncode == 0

    # slurmdbd is late with 4105 (two calls) and never has 4110 nor the array task 4101_2
    # within the hook's wait: those come from sacct's second answer and from scontrol.
    lagging = env | {"STANDIN_SACCT_LAG": "4105=2,4110=-1,4101_2=-1"}
    runs = {
        "4100": hook(lagging, "4100"),  # by hand
        "4105": hook(lagging, SLURM_JOB_ID="4105"),  # EpilogSlurmctld
        "4112": hook(lagging, JOBID="4112"),  # jobcomp/script
        "4110": hook(lagging, "4110"),
        "4101_2": hook(lagging, "4101_2"),
        "4104": hook(lagging, "4104"),  # CPU only: nothing to spool
    }
    for job, run in runs.items():
        assert run.returncode == 0, (job, run.stdout + run.stderr)
    assert "(from sacct)" in runs["4105"].stderr
    assert "(from scontrol)" in runs["4110"].stderr and "(from scontrol)" in runs["4101_2"].stderr
    assert "job 4104: 0 events spooled" in runs["4104"].stderr

    # Not spooled, and said so (exit 1): an unmapped GPU type; a job still running.
    unmapped = hook(env, "4109")
    assert unmapped.returncode == 1 and "unmapped GPU usage gpu:mi300x" in unmapped.stderr
    running = hook(env, "4103")
    assert running.returncode == 1 and "job 4103: not spooled" in running.stderr
    assert "Invalid job id" in running.stderr

    # What the hook spooled is what the import makes of those jobs, id for id.
    from_hook = spooled(tmp_path / "spool")
    bulk = import_sacct(dump.read_text(), MAPPING)
    hooked_jobs = {"4100", "4105", "4112", "4110", "4101_2"}
    assert from_hook == {
        e.id: e.quantity for e in bulk.events if e.tags["slurm_job_id"] in hooked_jobs
    }
    assert len(from_hook) == 2 + 3 + 2 + 2 + 1

    # The agent's part, once: post the spool.
    flushed = cli(env, "spool", "flush", *client)
    assert flushed.returncode == 0, flushed.stdout + flushed.stderr
    assert f"{len(from_hook)} accepted, 0 duplicates" in flushed.stdout
    assert not list((tmp_path / "spool" / "new").iterdir())

    # The bulk import of the whole dump: the hook's events are all already counted.
    imported = cli(env, "import", "slurm", str(dump), *MAPS, *client)
    assert imported.returncode == 1  # the unmapped mi300x job, as for the import alone
    n_bulk = len(bulk.events)
    assert (
        f"{n_bulk - len(from_hook)} accepted, {len(from_hook)} duplicates (already counted)"
        in imported.stdout
    ), imported.stdout

    # The service holds exactly the totals of the import alone.
    held: dict[tuple[str, str], Decimal] = {}
    async with api.client() as c:
        for project in ("llm-7b", "data-team", "eval-suite"):
            r = await c.get("/v1/costs", params={"project": project, "group_by": "day,sku"})
            assert r.status_code == 200, r.text
            for row in r.json()["rows"]:
                key = (row["key"]["sku"], row["key"]["day"])
                held[key] = held.get(key, Decimal(0)) + Decimal(row["quantity"])
    assert held == {
        (sku, (date.fromisoformat(day) + timedelta(days=shift)).isoformat()): hours
        for (sku, day), hours in EXPECTED.items()
    }


def test_without_sacct_the_hook_reads_scontrol_at_once(tmp_path: Path) -> None:
    """A controller host without sacct (no slurmdbd client there): slurmctld's record alone."""
    dump, shift = shifted_fixture(tmp_path)
    env = stand_ins(tmp_path, shift)
    only_scontrol = tmp_path / "only-scontrol"
    only_scontrol.mkdir()
    (only_scontrol / "scontrol").symlink_to(tmp_path / "bin" / "scontrol")
    env["PATH"] = str(only_scontrol)
    run = hook(env, "4110", "--wait", "600")  # not waited for: sacct cannot run at all
    assert run.returncode == 0, run.stdout + run.stderr
    assert "job 4110: 2 events spooled (from scontrol)" in run.stderr
    bulk = import_sacct(dump.read_text(), MAPPING)
    assert spooled(tmp_path / "spool") == {
        e.id: e.quantity for e in bulk.events if e.tags["slurm_job_id"] == "4110"
    }

    missing = hook(env, "4103")  # neither knows it: said, exit 1, nothing spooled
    assert missing.returncode == 1
    assert "sacct" in missing.stderr and "Invalid job id" in missing.stderr


WRAPPER = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "trainledger-hook.sh"


def test_the_shipped_wrapper_spools_a_job_under_a_bare_environment(tmp_path: Path) -> None:
    """deploy/slurm/trainledger-hook.sh run as slurmctld runs it: `env -i`, only the job id.

    Its paths are moved into tmp_path (each found exactly once, so the file's shape is what
    runs); the stand-in sacct is reachable only through the PATH the wrapper sets, so the
    job's usage reaches the spool only if that PATH reaches the hook."""
    dump, shift = shifted_fixture(tmp_path)
    env = stand_ins(tmp_path, shift)
    bare_bin = tmp_path / "slurm-bin"  # sacct as installed: needs nothing from the environment
    bare_bin.mkdir()
    settings = {k: env[k] for k in ("STANDIN_SACCT_DUMP", "STANDIN_STATE")}
    (bare_bin / "sacct").write_text(
        f"#!{sys.executable}\nimport os\nos.environ.update({settings!r})\n"
        + textwrap.dedent(SACCT_STANDIN)
    )
    (bare_bin / "sacct").chmod(0o755)
    (tmp_path / "map.json").write_text(json.dumps(MAPPING))
    text = WRAPPER.read_text()
    for installed, here in {
        "PATH=/usr/bin:/usr/local/bin:/bin": f"PATH={bare_bin}",
        "/opt/trainledger/bin/trainledger": str(Path(sys.executable).parent / "trainledger"),
        "/var/spool/trainledger": str(tmp_path / "spool"),
        "/etc/trainledger/slurm-map.json": str(tmp_path / "map.json"),
        "/var/log/trainledger/slurm-hook.log": str(tmp_path / "hook.log"),
    }.items():
        assert text.count(installed) == 1, installed
        text = text.replace(installed, here)
    wrapper = tmp_path / "trainledger-hook.sh"
    wrapper.write_text(text)
    wrapper.chmod(0o755)

    run = subprocess.run(
        ["env", "-i", "SLURM_JOB_ID=4100", str(wrapper)], capture_output=True, timeout=120
    )
    log = (tmp_path / "hook.log").read_text()
    assert run.returncode == 0, log
    assert "job 4100: 2 events spooled (from sacct)" in log, log
    bulk = import_sacct(dump.read_text(), MAPPING)
    assert spooled(tmp_path / "spool") == {
        e.id: e.quantity for e in bulk.events if e.tags["slurm_job_id"] == "4100"
    }
