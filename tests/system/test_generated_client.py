"""A client generated from the committed `openapi/openapi.json` by stock openapi-python-client
(its own templates; from PyPI, pinned to 0.29 in the test extras) with the options in
`openapi/openapi-python-client.yaml`: it generates without a warning, its modules import, and it
drives a live service through the generated functions (a rate card put; events posted as a JSON
batch, a batch the ledger refuses, a CloudEvents batch, one CloudEvent, NDJSON and msgpack; the
costs read; a budget created and read), every answer parsed by the generated models.

Each ingest format is an operation of its own with one body (`POST /v1/events` JSON,
`/v1/events/cloudevents`, `/cloudevent`, `/ndjson`, `/msgpack`): the stock templates cannot
generate an operation with several bodies that works (upstream issues 1451 and 1276), and no
operation of the document has several (tests/api/test_openapi.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import BytesIO
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import TEST_CARD, Api, event

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "openapi" / "openapi.json"
CONFIG = ROOT / "openapi" / "openapi-python-client.yaml"
PACKAGE = "trainledger_api_client"


def _generate(out: Path, *options: str) -> str:
    """Run the generator on the committed document; its output (it must succeed)."""
    command = [sys.executable, "-m", "openapi_python_client", "generate", *options]
    run = subprocess.run(
        [*command, "--path", str(SPEC), "--output-path", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    return output


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("generated") / "client"
    output = _generate(out, "--config", str(CONFIG))
    assert "warning" not in output.lower(), output
    assert (out / PACKAGE / "__init__.py").exists(), output
    sys.path.insert(0, str(out))
    try:
        yield out
    finally:
        sys.path.remove(str(out))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def _modules(root: Path) -> list[str]:
    return sorted(
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for path in (root / PACKAGE).rglob("*.py")
    )


def test_every_generated_module_imports(generated: Path) -> None:
    modules = _modules(generated)
    assert f"{PACKAGE}.api.rate_cards.put_rate_card" in modules
    assert len([m for m in modules if ".api." in m]) >= 40  # one module per operation
    failures = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # every failure, not only the first
            failures[name] = repr(exc)
    assert failures == {}


def _cloud(event_id: str, hours: str, when: str) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": event_id,
        "source": "//slurm/cluster-a",
        "type": "dev.trainledger.usage",
        "time": when,
        "subject": "llm",
        "data": {"sku": "gpu.h100.hour", "quantity": hours},
    }


def test_generated_client_drives_the_service(api: Api, generated: Path) -> None:
    # The generated functions are synchronous; the service runs in its own thread.
    client_module: Any = importlib.import_module(PACKAGE)
    models: Any = importlib.import_module(f"{PACKAGE}.models")
    types: Any = importlib.import_module(f"{PACKAGE}.types")

    def operation(tag: str, name: str) -> Any:
        return importlib.import_module(f"{PACKAGE}.api.{tag}.{name}")

    client = client_module.AuthenticatedClient(
        base_url=api.base_url, token=api.admin_token, raise_on_unexpected_status=True
    )
    card = operation("rate_cards", "put_rate_card").sync(
        name="default", client=client, body=models.RateCardIn.from_dict(TEST_CARD)
    )
    assert isinstance(card, models.RateCardVersion) and card.name == "default", card

    def accepted(answer: Any) -> int:
        assert answer.status_code == 200, answer.content
        report = answer.parsed
        assert isinstance(report, models.IngestReport), report
        assert (report.duplicates, report.rejected) == (0, []), report
        return int(report.accepted)

    # JSON: a batch of three 2-hour events, then one the ledger refuses (an unknown SKU).
    post_events = operation("events", "post_events")
    batch = [models.EventIn.from_dict(event(f"gen-{i}", 2)) for i in range(3)]
    assert accepted(post_events.sync_detailed(client=client, body=batch)) == 3
    unknown = models.EventIn.from_dict(event("gen-bad", 1, sku="no.such.sku"))
    refused = post_events.sync_detailed(client=client, body=[unknown])
    problem = refused.parsed
    assert refused.status_code == 422 and isinstance(problem, models.IngestProblem), problem
    assert (problem.status, problem.accepted, problem.duplicates) == (422, 0, 0)
    assert [(r.id, r.field) for r in problem.rejected] == [("gen-bad", "$[0].sku")]

    # Every other format through its own generated function, 1-hour events.
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    cloud_batch = [models.CloudEvent.from_dict(_cloud(f"ce-{i}", "1", hour_ago)) for i in (1, 2)]
    answer = operation("events", "post_cloud_events").sync_detailed(client=client, body=cloud_batch)
    assert accepted(answer) == 2
    one = models.CloudEvent.from_dict(_cloud("ce-3", "1", hour_ago))
    assert (
        accepted(operation("events", "post_cloud_event").sync_detailed(client=client, body=one))
        == 1
    )
    lines = b"".join(msgspec.json.encode(event(f"nd-{i}", 1)) + b"\n" for i in range(2))
    ndjson = types.File(payload=BytesIO(lines))  # sent as `application/x-ndjson`
    answer = operation("events", "post_events_ndjson").sync_detailed(client=client, body=ndjson)
    assert accepted(answer) == 2
    packed = types.File(payload=BytesIO(msgspec.msgpack.encode([event("mp-1", 1)])))
    answer = operation("events", "post_events_msgpack").sync_detailed(client=client, body=packed)
    assert accepted(answer) == 1

    costs = operation("costs", "get_costs").sync(client=client, project="llm")
    assert isinstance(costs, models.CostReport), costs
    # 3 × 2 h and 6 × 1 h at 2.50 an hour; the refused event is not counted.
    assert costs.total_events == 9 and Decimal(costs.total_cost) == Decimal("30")

    now = datetime.now(UTC)
    budget = operation("budgets", "post_budget").sync(
        client=client,
        body=models.BudgetIn.from_dict(
            {
                "project": "llm",
                "name": "generated",
                "amount": "100",
                "period": "window",
                "window_start": (now - timedelta(days=2)).isoformat(),
                "window_end": (now + timedelta(days=2)).isoformat(),
            }
        ),
    )
    assert isinstance(budget, models.Budget), budget
    status = operation("budgets", "get_budget").sync(
        budget_id=budget.id, client=client, project="llm"
    )
    assert isinstance(status, models.BudgetStatus), status
    assert Decimal(status.spent) == Decimal("30")


def test_the_bare_command_generates_every_json_operation(tmp_path: Path) -> None:
    """`openapi-python-client generate --path openapi/openapi.json`, no option at all (the
    command of issue 27, which gave a `post_events` that did not import): every module it
    writes imports, the JSON and CloudEvents ingest functions among them; it warns only that it
    skips the three bytes bodies (NDJSON, msgpack, a bill's CSV), which
    `openapi-python-client.yaml` maps onto its `File` body."""
    out = tmp_path / "bare"
    output = _generate(out)
    skipped = {
        line.split()[3] for line in output.splitlines() if line.startswith("WARNING parsing POST")
    }
    assert skipped == {"/v1/events/ndjson", "/v1/events/msgpack", "/v1/bills/imports"}, output
    assert output.count("Unsupported content type") == 3, output
    root = out
    package = next(p.name for p in root.iterdir() if (p / "client.py").exists())
    modules = sorted(
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for path in (root / package).rglob("*.py")
    )
    events = {m.rsplit(".", 1)[1] for m in modules if ".api.events." in m}
    assert {"post_events", "post_cloud_events", "post_cloud_event"} <= events, events
    program = (
        "import importlib, sys\n"
        "failures = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failures[name] = repr(exc)\n"
        "print(failures)\n"
    )
    imported = subprocess.run(
        [sys.executable, "-c", program, *modules],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "{}", imported.stdout
