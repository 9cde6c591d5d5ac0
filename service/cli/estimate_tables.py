"""`trainledger plan estimate` as tables for people: money grouped to the currency's minor
units, quantities grouped and exact, 80 columns wide without a cell cut (`--json` prints the
service's exact answer)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from .figures import escaped, grouped, money
from .ui import ui


def _is_zero(value: object) -> bool:
    try:
        return Decimal(str(value)) == 0
    except ArithmeticError:
        return False


def print_estimate(estimate: dict[str, Any]) -> None:
    """The estimate as tables that fit 80 columns: money as people read it (grouped, the
    currency's minor units; `--json` keeps the exact figures), quantities grouped and exact,
    no cell cut (a long SKU wraps within its cell)."""
    currency = str(estimate.get("currency", ""))
    ui.out.print(
        f"[bold]{escaped(estimate.get('name'))}[/] for project {escaped(estimate.get('project'))} "
        f"(rate card {escaped(estimate.get('rate_card'))}), "
        f"{escaped(estimate.get('window_start'))} to {escaped(estimate.get('window_end'))}",
        highlight=False,
    )
    for stage in estimate.get("stages", []):
        title = str(stage.get("stage"))
        if stage.get("label"):
            title += f" ({stage['label']})"
        table = _figures_table(title)
        table.add_column("sku", overflow="fold", min_width=12)
        table.add_column("source", no_wrap=True)
        for header in ("quantity", "unit", "unit price", f"cost ({currency})"):
            table.add_column(header, justify="left" if header == "unit" else "right", no_wrap=True)
        for line in stage.get("lines", []):
            table.add_row(
                Text(str(line.get("sku", ""))),
                Text(str(line.get("source", ""))),
                Text(grouped(line.get("quantity", ""))),
                Text(str(line.get("unit", ""))),
                Text(grouped(line.get("unit_price", ""))),
                Text(money(line.get("cost", ""), currency, code=False)),
            )
        table.add_section()
        # (name, rate, amount, style); the contingency's rate in the unit price column.
        sums = [("subtotal", "", stage.get("subtotal"), "")]
        if stage.get("contingency") not in (None, "0", "0.00"):
            rate = f"{stage.get('contingency_pct')} %"
            sums.append(("contingency", rate, stage.get("contingency"), ""))
        sums.append(("total", "", stage.get("total"), "bold"))
        for name, rate, value, style in sums:
            cost = Text(money(value, currency, code=False), style=style)
            table.add_row(Text(name, style=style), "", "", "", Text(rate), cost)
        ui.out.print(table)
        derivation = stage.get("derivation")
        if derivation:
            ui.out.print(
                Text(
                    f"  6·N·D: {grouped(derivation.get('flops'))} FLOPs at "
                    f"{grouped(derivation.get('effective_flops_per_accelerator'))} FLOP/s per "
                    f"accelerator = {grouped(stage.get('accelerator_hours'))} accelerator hours",
                    style="dim",
                )
            )
    ui.out.print(_estimate_totals(estimate, currency))


def _estimate_totals(estimate: dict[str, Any], currency: str) -> Table:
    """The plan's totals: by category, fixed against elastic, hours, energy, peak day."""
    totals = _figures_table("totals")
    totals.add_column("", overflow="fold")
    totals.add_column("value", justify="right", no_wrap=True)
    for name, cost in sorted((estimate.get("categories") or {}).items()):
        if _is_zero(cost):  # every category is listed; the empty ones are noise here
            continue
        totals.add_row(Text(f"category {name}"), Text(money(cost, currency)))
    totals.add_section()
    for key in ("fixed", "elastic", "subtotal", "contingency"):
        totals.add_row(Text(key), Text(money(estimate.get(key), currency)))
    totals.add_row(Text("total", style="bold"), Text(money(estimate.get("total"), currency)))
    totals.add_section()
    totals.add_row(Text("accelerator hours"), Text(grouped(estimate.get("accelerator_hours"))))
    totals.add_row(
        Text(f"energy (PUE {estimate.get('pue')})"),
        Text(f"{grouped(estimate.get('energy_kwh'))} kWh"),
    )
    if estimate.get("emissions_kg_co2e") is not None:
        totals.add_row(Text("emissions"), Text(f"{grouped(estimate['emissions_kg_co2e'])} kg CO2e"))
    peak = estimate.get("peak") or {}
    if peak:
        totals.add_row(
            Text("daily spend, average / peak"),
            Text(
                f"{money(peak.get('average_daily'), currency, code=False)} / "
                f"{money(peak.get('peak_daily'), currency)}"
            ),
        )
        if peak.get("ratio"):
            totals.add_row(Text("headroom (peak / average)"), Text(str(peak["ratio"])))
    return totals


def _figures_table(title: str) -> Table:
    """A table of figures with light rules: columns apart by two spaces, no side borders,
    so six columns of figures fit 80 columns."""
    return Table(
        title=Text(title, style="bold"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
