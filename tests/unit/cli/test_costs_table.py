"""`trainledger costs`: its table shows money for people; `--csv` keeps the exact figures."""

from __future__ import annotations

import csv
import io

from rich.console import Console
from trainledger.cli.commands import costs_table, write_costs_csv

REPORT = {
    "project": "llm-7b",
    "group_by": ["stage", "sku"],
    "currency": "USD",
    "rows": [
        {
            "key": {"stage": "pretrain", "sku": "gpu.h100.hour"},
            "quantity": "338688.5",
            "unit": "hour",
            "events": 12480,
            "cost": "846855.311564552",
        },
        {
            "key": {"stage": "eval", "sku": "api.judge.token"},
            "quantity": "4200000",
            "unit": "token",
            "events": 3,
            "cost": "0.125",
            "currency": "EUR",  # a row priced in another currency says its code
        },
    ],
    "total_events": 12483,
    "total_cost": "846855.436564552",
}


def rendered(report: dict[str, object]) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(costs_table(report, ["stage", "sku"], True))
    return console.export_text()


def test_the_table_groups_money_to_the_currencys_precision() -> None:
    text = rendered(REPORT)
    assert "cost (USD)" in text
    assert "846,855.31" in text and "846855.311564552" not in text
    assert "0.12 EUR" in text  # 0.125 to cents, half to even
    assert "846,855.44" in text and "846855.436564552" not in text
    assert "12,480" in text and "12,483" in text
    assert "338,688.5" in text and "4,200,000" in text  # quantities grouped, exact


def test_csv_keeps_the_exact_figures() -> None:
    out = io.StringIO()
    write_costs_csv(REPORT, ["stage", "sku"], True, out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["quantity"], r["events"], r["cost"]) for r in rows] == [
        ("338688.5", "12480", "846855.311564552"),
        ("4200000", "3", "0.125"),
    ]
