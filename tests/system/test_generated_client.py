"""A client generated from the committed `openapi/openapi.json` by openapi-python-client (from
PyPI, in the test extras) with `openapi/openapi-python-client.yaml`: it generates without a
warning, its modules import, and it drives a live service (a rate card put, events posted, the
costs read, a budget created and read), every answer parsed by the generated models.

`POST /v1/events` takes five content types. openapi-python-client 0.29 mis-generates any
operation whose body has several: its template annotates the body `... | Unset` without
importing `Unset` when the body is required (a Jinja scoping bug), and it dispatches on
`isinstance(body, list[CloudEvent])`, which Python refuses for any list body. No document
that describes the five bodies truthfully avoids either, so that one module is pinned below as
failing (strict: the day the generator is fixed, the test says so) and the events are posted
with the generated models through the generated client's own httpx client."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_CARD, Api, event

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "openapi" / "openapi.json"
CONFIG = ROOT / "openapi" / "openapi-python-client.yaml"
PACKAGE = "trainledger_api_client"
MULTI_BODY_MODULE = f"{PACKAGE}.api.events.post_events"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("generated") / "client"
    command = [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(SPEC)]
    run = subprocess.run(
        [*command, "--config", str(CONFIG), "--output-path", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
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
        if name == MULTI_BODY_MODULE:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # every failure, not only the first
            failures[name] = repr(exc)
    assert failures == {}


@pytest.mark.xfail(
    strict=True,
    raises=NameError,
    reason="openapi-python-client 0.29: several body content types (see the module docstring)",
)
def test_generated_post_events_module_imports(generated: Path) -> None:
    importlib.import_module(MULTI_BODY_MODULE)


def test_generated_client_drives_the_service(api: Api, generated: Path) -> None:
    # The generated functions are synchronous; the service runs in its own thread.
    client_module: Any = importlib.import_module(PACKAGE)
    models: Any = importlib.import_module(f"{PACKAGE}.models")
    put_rate_card: Any = importlib.import_module(f"{PACKAGE}.api.rate_cards.put_rate_card")
    get_costs: Any = importlib.import_module(f"{PACKAGE}.api.costs.get_costs")
    post_budget: Any = importlib.import_module(f"{PACKAGE}.api.budgets.post_budget")
    get_budget: Any = importlib.import_module(f"{PACKAGE}.api.budgets.get_budget")
    client = client_module.AuthenticatedClient(
        base_url=api.base_url, token=api.admin_token, raise_on_unexpected_status=True
    )

    card = put_rate_card.sync(
        name="default", client=client, body=models.RateCardIn.from_dict(TEST_CARD)
    )
    assert isinstance(card, models.RateCardVersion) and card.name == "default", card

    events = [models.EventIn.from_dict(event(f"gen-{i}", 2)) for i in range(3)]
    http = client.get_httpx_client()  # POST /v1/events: see the module docstring
    posted = http.post("/v1/events", json=[e.to_dict() for e in events])
    assert posted.status_code == 200, posted.text
    report = models.IngestReport.from_dict(posted.json())
    assert (report.accepted, report.duplicates, report.rejected) == (3, 0, [])
    unknown = models.EventIn.from_dict(event("gen-bad", 1, sku="no.such.sku"))
    refused = http.post("/v1/events", json=[unknown.to_dict()])
    assert refused.status_code == 422, refused.text
    problem = models.IngestProblem.from_dict(refused.json())
    assert problem.status == 422 and problem.accepted == 0
    assert [r.id for r in problem.rejected] == ["gen-bad"]

    costs = get_costs.sync(client=client, project="llm")
    assert isinstance(costs, models.CostReport), costs
    assert Decimal(costs.total_cost) == Decimal("15") and costs.total_events == 3  # 3 × 2 h × 2.50

    now = datetime.now(UTC)
    budget = post_budget.sync(
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
    status = get_budget.sync(budget_id=budget.id, client=client, project="llm")
    assert isinstance(status, models.BudgetStatus), status
    assert Decimal(status.spent) == Decimal("15")
