"""`trainledger budgets|alerts|webhooks`: what on-call people look at and change, over HTTP.

Tables show money for people (grouped digits, the currency's precision); `--json` prints the
service's answer, exact to the nano-unit.
"""

from __future__ import annotations

import argparse
from decimal import Decimal
from typing import Any

from rich.table import Table
from rich.text import Text

from costcore.money import amount_for_people

from ..config import Settings
from ..webhooks.formats.table import HTTP_NAMES
from .client import Client, CliError, add_client_options
from .commands import print_json, read_json_file
from .figures import count, none_line
from .ui import ui

# The kinds of `GET /v1/alerts` and of a webhook's `kinds` (budgets/model.py's AlertKind).
ALERT_KINDS = ("threshold", "forecast", "growth", "evaluation_regression")
# Every format a URL and a secret describe (`webhooks.formats.table`): not email, whose sender,
# recipients and login take a JSON body (the API).
CLI_WEBHOOK_FORMATS = HTTP_NAMES


def money(amount: object, currency: str | None = None) -> str:
    """`12,345.68 USD`: the one formatter for people (`costcore.money.amount_for_people`)."""
    return amount_for_people(amount, currency or "")


def _table(title: str, *columns: str) -> Table:
    table = Table(title=Text(title, style="bold"), title_justify="left")
    for column in columns:
        right = column.startswith(">")
        table.add_column(column.lstrip(">"), justify="right" if right else "left", overflow="fold")
    return table


def _cells(*values: object) -> list[Text]:
    return [Text("" if v is None else str(v)) for v in values]


# --- budgets --------------------------------------------------------------------------------


def cmd_budgets_list(args: argparse.Namespace, settings: Settings) -> int:
    with Client.from_args(args, settings) as client:
        budgets = client.json("GET", "/v1/budgets", params={"project": args.project})
    if args.json:
        print_json(budgets)
        return 0
    if not budgets:
        none_line(f"no budgets in project {args.project} (add one: trainledger budgets create)")
        return 0
    table = _table(f"{args.project}: budgets", "id", "name", ">amount", "period", "thresholds %")
    for b in budgets:
        thresholds = ", ".join(str(t) for t in b.get("thresholds", []))
        table.add_row(*_cells(b["id"], b["name"], money(b["amount"]), b["period"], thresholds))
    ui.out.print(table)
    return 0


def cmd_budgets_show(args: argparse.Namespace, settings: Settings) -> int:
    with Client.from_args(args, settings) as client:
        status = client.json(
            "GET", f"/v1/budgets/{args.budget_id}", params={"project": args.project}
        )
    if args.json:
        print_json(status)
        return 0
    budget, currency = status["budget"], status.get("currency")
    table = _table(f"budget {budget['name']} ({budget['id']})", "", ">value")
    table.add_row(*_cells("period", f"{status.get('period_start')} to {status.get('period_end')}"))
    table.add_row(*_cells("amount", money(budget["amount"], currency)))
    table.add_row(*_cells("spent", money(status["spent"], currency)))
    table.add_row(*_cells("remaining", money(status["remaining"], currency)))
    table.add_row(*_cells("used", f"{status['used_pct']} %"))
    if status.get("forecast") is not None:
        over = " (over budget)" if status.get("forecast_over_budget") else ""
        table.add_row(*_cells("forecast", money(status["forecast"], currency) + over))
    table.add_row(*_cells("fired", ", ".join(status.get("fired") or []) or "none"))
    ui.out.print(table)
    return 0


def cmd_budgets_create(args: argparse.Namespace, settings: Settings) -> int:
    if args.file:
        body = read_json_file(args.file)
        if not isinstance(body, dict):
            raise CliError(f"{args.file}: a budget is a JSON object")
    else:
        if not (args.project and args.name and args.amount):
            raise CliError("give --project, --name and --amount (or --file with the budget)")
        body = {"project": args.project, "name": args.name, "amount": args.amount}
        body["period"] = args.period
        if args.threshold:
            body["thresholds"] = args.threshold
    with Client.from_args(args, settings) as client:
        budget = client.json("POST", "/v1/budgets", json=body)
        if args.json:
            print_json(budget)
            return 0
        # The budget's answer has no currency: its status (the project's currency) does.
        status = client.json(
            "GET", f"/v1/budgets/{budget['id']}", params={"project": budget["project"]}
        )
    currency = status.get("currency")
    ui.out.print(
        Text(
            f"budget {budget['name']} created: id {budget['id']}, "
            f"{money(budget['amount'], currency)} {budget['period']}"
        )
    )
    ui.out.print(Text(f"alerts at {threshold_amounts(budget, currency)}"))
    return 0


def threshold_amounts(budget: dict[str, Any], currency: str | None) -> str:
    """`50 % (500.00 USD), 90 % (900.00 USD)`: each threshold with the spend that reaches it
    (the amount × pct / 100; the service rounds that limit up to the nano)."""
    amount = Decimal(str(budget["amount"]))
    parts = [
        f"{pct} % ({money(amount * pct / 100, currency)})" for pct in budget.get("thresholds", [])
    ]
    return ", ".join(parts) or "no thresholds"


def cmd_budgets_delete(args: argparse.Namespace, settings: Settings) -> int:
    with Client.from_args(args, settings) as client:
        client.request("DELETE", f"/v1/budgets/{args.budget_id}", params={"project": args.project})
    ui.out.print(Text(f"budget {args.budget_id} deleted"))
    return 0


# --- alerts ---------------------------------------------------------------------------------


def cmd_alerts_list(args: argparse.Namespace, settings: Settings) -> int:
    params: dict[str, Any] = {"project": args.project, "limit": args.limit}
    for key, value in (("kind", args.kind), ("from", args.from_time), ("to", args.to_time)):
        if value:
            params[key] = value
    with Client.from_args(args, settings) as client:
        alerts = client.json("GET", "/v1/alerts", params=params)
    if args.json:
        print_json(alerts)
        return 0
    if not alerts:
        none_line(
            f"no alerts in project {args.project}"
            + (" in that time" if args.from_time or args.to_time else "")
            + (f" of kind {args.kind}" if args.kind else "")
        )
        return 0
    table = _table(
        f"{args.project}: alerts, oldest first", "when", "kind", "what", ">figure", ">over by"
    )
    for a in alerts:
        table.add_row(*_cells(*_alert_row(a)))
    ui.out.print(table)
    if len(alerts) == args.limit:
        ui.err.print(f"more may follow: --limit, or --from {alerts[-1]['occurred_at']}")
    return 0


def _alert_row(alert: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """(when, kind, what, figure, over by) for either kind of alert. A budget alert: its
    budget and period, `spent / limit`, the amount over the limit. An evaluation regression:
    `experiment · benchmark`, `value vs baseline value (baseline)`, and its rework exposure
    (the cost since the last good checkpoint, `rework ...`)."""
    currency = alert.get("currency")
    r = alert.get("regression")
    if r:
        return (
            alert["occurred_at"],
            alert["kind"],
            f"{r['experiment']} · {r['benchmark']}",
            f"{r['value']} vs {r['baseline_value']} ({r['baseline']}), tolerance {r['tolerance']}",
            f"rework {money(r['rework_exposure'], currency)}",
        )
    kind = alert["kind"] + (f" {alert['threshold_pct']} %" if alert.get("threshold_pct") else "")
    budget = alert.get("budget_name") or alert.get("budget_id") or ""
    return (
        alert["occurred_at"],
        kind,
        f"{budget} · {alert.get('period') or ''}",
        f"{money(alert['spent'], currency)} / {money(alert['limit'], currency)}",
        money(alert.get("over_by") or "0", currency),
    )


# --- webhooks -------------------------------------------------------------------------------


def cmd_webhooks_list(args: argparse.Namespace, settings: Settings) -> int:
    with Client.from_args(args, settings) as client:
        hooks = client.json("GET", "/v1/webhooks")
    if args.json:
        print_json(hooks)
        return 0
    if not hooks:
        none_line("no webhooks (add one: trainledger webhooks create)")
        return 0
    table = _table("webhooks", "id", "format", "url", "projects", "kinds", "description")
    for h in hooks:
        table.add_row(
            *_cells(
                h["id"],
                h["format"],
                h["url"] or f"(unreadable: {h.get('unreadable')})",
                ", ".join(h["projects"]) if h.get("projects") else "all",
                ", ".join(h["kinds"]) if h.get("kinds") else "all",
                h.get("description", ""),
            )
        )
    ui.out.print(table)
    return 0


def cmd_webhooks_create(args: argparse.Namespace, settings: Settings) -> int:
    body: dict[str, Any] = {"url": args.target, "format": args.format}
    if args.project:
        body["projects"] = args.project
    if args.kind:
        body["kinds"] = args.kind
    if args.description:
        body["description"] = args.description
    if args.secret:
        body["secret"] = args.secret
    with Client.from_args(args, settings) as client:
        created = client.json("POST", "/v1/webhooks", json=body)
    if args.json:
        print_json(created)
        return 0
    ui.out.print(Text(f"webhook {created['id']} registered ({created['format']})"))
    if created.get("secret"):
        ui.out.print(Text(f"signing secret (shown this once): {created['secret']}"))
    return 0


def cmd_webhooks_delete(args: argparse.Namespace, settings: Settings) -> int:
    with Client.from_args(args, settings) as client:
        client.request("DELETE", f"/v1/webhooks/{args.webhook_id}")
    ui.out.print(Text(f"webhook {args.webhook_id} deleted"))
    return 0


def cmd_webhooks_test(args: argparse.Namespace, settings: Settings) -> int:
    with Client.from_args(args, settings) as client:
        sent = client.json(
            "POST", f"/v1/webhooks/{args.webhook_id}/test", params={"kind": args.kind}
        )
    if args.json:
        print_json(sent)
        return 0
    if sent["delivered"]:
        outcome = f"delivered (HTTP {sent['status_code']})"
    else:
        outcome = f"not delivered: {sent['error']}"
    ui.out.print(
        Text(f"test {sent['kind']} message {sent['message_id']} to {sent['webhook_id']} ")
        + Text(f"({sent['format']}): {outcome}")
    )
    if not sent["subscribed"]:
        ui.out.print(Text(f"note: this webhook does not receive {sent['kind']} alerts (kinds)"))
    return 0 if sent["delivered"] else 1


def cmd_webhooks_deliveries(args: argparse.Namespace, settings: Settings) -> int:
    params: dict[str, Any] = {"project": args.project, "limit": args.limit}
    if args.status:
        params["status"] = args.status
    with Client.from_args(args, settings) as client:
        page = client.json("GET", "/v1/webhooks/deliveries", params=params)
    if args.json:
        print_json(page)
        return 0
    if not page["items"]:
        none_line(
            f"no webhook deliveries in project {args.project}"
            + (f" with status {args.status}" if args.status else "")
        )
        return 0
    table = _table(
        f"{args.project}: deliveries ({page['total']})",
        "id",
        "status",
        ">attempts",
        "last status",
        "last error",
    )
    for d in page["items"]:
        table.add_row(
            *_cells(
                d["id"], d["status"], d["attempts"], d.get("last_status_code"), d.get("last_error")
            )
        )
    ui.out.print(table)
    return 0


def cmd_webhooks_redeliver(args: argparse.Namespace, settings: Settings) -> int:
    with Client.from_args(args, settings) as client:
        report = client.json(
            "POST",
            "/v1/webhooks/deliveries/redeliver",
            params={"project": args.project},
            json={"ids": args.id or None},
        )
    if args.json:
        print_json(report)
        return 0
    ui.out.print(
        Text(f"{count(len(report['redelivered']), 'delivery', 'deliveries')} sent again; ")
        + Text(
            f"{count(len(report['not_failed']), 'delivery', 'deliveries')} not failed "
            "(unknown, pending or delivered)"
        )
    )
    return 0


# --- parsers --------------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, handler: Any, json_flag: bool = True) -> None:
    if json_flag:
        parser.add_argument("--json", action="store_true", help="the service's JSON answer")
    add_client_options(parser)
    parser.set_defaults(handler=handler)


def _add_budgets(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    budgets = sub.add_parser("budgets", help="a project's budgets (over HTTP)")
    b_sub = budgets.add_subparsers(dest="budgets_command", required=True)
    listing = b_sub.add_parser("list", help="a project's budgets")
    listing.add_argument("--project", required=True, help="the project")
    _common(listing, cmd_budgets_list)
    show = b_sub.add_parser("show", help="spend against a budget now")
    show.add_argument("budget_id", help="the id `budgets list` shows")
    show.add_argument("--project", required=True, help="the budget's project")
    _common(show, cmd_budgets_show)
    create = b_sub.add_parser(
        "create",
        help="create a budget (admin)",
        description="From flags, or --file with the whole body of POST /v1/budgets (scope, "
        "forecast and growth rules, a window).",
    )
    create.add_argument("--project", help="the project whose spend it watches")
    create.add_argument("--name", help="a name for people (alerts show it)")
    create.add_argument("--amount", help="in the project's currency, e.g. 25000")
    create.add_argument(
        "--period",
        choices=("monthly", "weekly"),
        default="monthly",
        help="calendar month or ISO week (monthly); a window: --file",
    )
    create.add_argument(
        "--threshold", type=int, action="append", help="alert at this %% (repeatable)"
    )
    create.add_argument("--file", help="the budget as JSON ('-' = stdin)")
    _common(create, cmd_budgets_create)
    remove = b_sub.add_parser("delete", help="delete a budget (admin)")
    remove.add_argument("budget_id", help="the id `budgets list` shows")
    remove.add_argument("--project", required=True, help="the budget's project")
    _common(remove, cmd_budgets_delete, json_flag=False)


def _add_alerts(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    alerts = sub.add_parser("alerts", help="alert history: budgets, regressions (over HTTP)")
    a_sub = alerts.add_subparsers(dest="alerts_command", required=True)
    listing = a_sub.add_parser("list", help="a project's alerts, oldest first")
    listing.add_argument("--project", required=True, help="the project")
    listing.add_argument("--kind", choices=ALERT_KINDS, help="only alerts of this kind")
    listing.add_argument("--from", dest="from_time", help="RFC 3339 time: alerts since")
    listing.add_argument("--to", dest="to_time", help="RFC 3339 time: alerts before")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    _common(listing, cmd_alerts_list)


def _add_webhooks(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hooks = sub.add_parser("webhooks", help="where alerts are sent (over HTTP)")
    w_sub = hooks.add_subparsers(dest="webhooks_command", required=True)
    _common(w_sub.add_parser("list", help="registered webhooks (admin)"), cmd_webhooks_list)
    create = w_sub.add_parser("create", help="register a webhook (admin)")
    create.add_argument("target", metavar="URL", help="where alerts are sent (https)")
    create.add_argument(
        "--format",
        choices=CLI_WEBHOOK_FORMATS,
        default="standard",
        help="the message format (email: POST /v1/webhooks with an `email` object, "
        "docs/guides/budgets-and-webhooks.md)",
    )
    create.add_argument("--project", action="append", help="only this project (repeatable)")
    create.add_argument("--kind", action="append", choices=ALERT_KINDS, help="repeatable")
    create.add_argument("--description", help="a note for people (lists show it)")
    create.add_argument("--secret", help="signing secret (standard: generated when not given)")
    _common(create, cmd_webhooks_create)
    remove = w_sub.add_parser("delete", help="delete a webhook (admin)")
    remove.add_argument("webhook_id", help="the id `webhooks list` shows")
    _common(remove, cmd_webhooks_delete, json_flag=False)
    test = w_sub.add_parser(
        "test",
        help="send a signed sample message to a webhook (admin)",
        description="POST /v1/webhooks/{id}/test: a made-up alert of --kind, marked test, in "
        "the webhook's format. Exit 1 when it was not delivered.",
    )
    test.add_argument("webhook_id", help="the id `webhooks list` shows")
    test.add_argument(
        "--kind",
        choices=ALERT_KINDS,
        default="threshold",
        help="the sample alert to send (threshold)",
    )
    _common(test, cmd_webhooks_test)
    deliveries = w_sub.add_parser("deliveries", help="deliveries of a project's alerts")
    deliveries.add_argument("--project", required=True, help="the project")
    deliveries.add_argument(
        "--status",
        choices=("pending", "failed", "delivered"),
        help="only deliveries in this state",
    )
    deliveries.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    _common(deliveries, cmd_webhooks_deliveries)
    redeliver = w_sub.add_parser("redeliver", help="send failed deliveries again (admin)")
    redeliver.add_argument("--project", required=True, help="the project")
    redeliver.add_argument("--id", action="append", help="a delivery id (default: every failed)")
    _common(redeliver, cmd_webhooks_redeliver)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_budgets(sub)
    _add_alerts(sub)
    _add_webhooks(sub)
