"""The dashboard `/ui`: HTML over real HTTP (in headless Chromium: test_dashboard_browser.py).

A project is seeded through the public API (events over twelve days, budgets, a plan with
progress, a repeated cross-region pull for the waste report), then every figure the page shows
is compared with what the JSON API answers for the same range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from html.parser import HTMLParser
from typing import Any

import httpx

from tests.api.test_ingest import post, put_card
from tests.conftest import Api, event

PROJECT = "llm"
HOSTILE_BUDGET = '<script>alert("pwn")</script> pretrain & co'
HOSTILE_DATASET = "<img src=x onerror=alert(1)>\"'&"
# A stage label as long as the demo's: the plan chart must not cut it at its left edge.
LONG_STAGE_LABEL = "score every document of the web crawl through a hosted 8B judge model"


def _at(days_ago: int, hour: int = 12) -> str:
    day = datetime.now(UTC).date() - timedelta(days=days_ago)
    return datetime(day.year, day.month, day.day, hour, tzinfo=UTC).isoformat()


@dataclass
class Seeded:
    first: date
    last: date
    budget_ids: list[str]
    plan_id: str
    read_token: str


async def seed(api: Api) -> Seeded:
    await put_card(api)
    reserved = "gpu.h100.reserved.hour"
    events: list[dict[str, object]] = []
    for d in range(1, 13):
        events += [
            event(f"pt-{d}", 40 + 6 * (d % 4), time=_at(d), stage="pretrain",
                  experiment="mix-a" if d % 2 else "mix-b", owner="alice"),
            event(f"dp-{d}", 300 + 50 * (d % 3), sku="storage.hot.gb_day", time=_at(d, 3),
                  stage="data_prep", tags={"team": "data"}),
        ]  # fmt: skip
        if d % 3 == 0:
            events.append(
                event(f"ev-{d}", "4", time=_at(d, 18), stage="eval", experiment="eval-suite")
            )
        if d <= 6:  # a reservation, paid 8 hours a day, 6 used: idle capacity is waste
            events += [
                event(f"paid-{d}", "8", sku=reserved, time=_at(d, 1), stage="midtrain"),
                event(f"use-{d}", "6", time=_at(d, 2), stage="midtrain",
                      experiment="mid-1", tags={"reservation": reserved}),
            ]  # fmt: skip
    # The same dataset pulled to the same region twice: the second pull is waste. Its name is
    # a user-given tag value, shown in the waste evidence.
    for i, d in ((1, 9), (2, 2)):
        events.append(
            event(f"pull-{i}", "500", sku="network.cross_region.gb", time=_at(d, 6),
                  stage="data_prep", tags={"dataset": HOSTILE_DATASET, "dest_region": "eu"})
        )  # fmt: skip
    answer = await post(api, events)
    assert answer["accepted"] == len(events), answer

    now = datetime.now(UTC)
    window = {
        "period": "window",
        "window_start": (now - timedelta(days=14)).isoformat(),
        "window_end": (now + timedelta(days=16)).isoformat(),
    }
    budgets = [
        {"name": "all spend", "amount": "6000", "forecast": {"min_elapsed_pct": 10}, **window},
        {"name": HOSTILE_BUDGET, "amount": "2500", "scope": {"stage": "pretrain"},
         "thresholds": [50, 80, 100], **window},
        {"name": "data team", "amount": "90", "scope": {"tags": {"team": "data"}},
         "period": "monthly"},
    ]  # fmt: skip
    plan = {
        "project": PROJECT,
        "name": "7b-base",
        "rate_card": "default",
        "currency": "USD",
        "window_start": (now - timedelta(days=13)).isoformat(),
        "window_end": (now + timedelta(days=17)).isoformat(),
        "stages": [
            {"stage": "data_prep", "label": LONG_STAGE_LABEL,
             "resources": [{"sku": "storage.hot.gb_day", "quantity": "9000"}]},
            {"stage": "pretrain", "resources": [{"sku": "gpu.h100.hour", "quantity": "2400"}]},
            {"stage": "eval", "resources": [{"sku": "gpu.h100.hour", "quantity": "60"}]},
        ],
    }  # fmt: skip
    async with api.client() as c:
        ids = []
        for body in budgets:
            r = await c.post("/v1/budgets", json={"project": PROJECT, **body})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        r = await c.post("/v1/plans", json=plan)
        assert r.status_code == 201, r.text
        plan_id = r.json()["id"]
        for stage, fraction in (("pretrain", "0.2"), ("eval", "0.5")):
            r = await c.post(
                f"/v1/plans/{plan_id}/progress",
                params={"project": PROJECT},
                json={"stage": stage, "fraction_done": fraction},
            )
            assert r.status_code == 200, r.text
    today = datetime.now(UTC).date()
    return Seeded(
        first=today - timedelta(days=29),
        last=today,
        budget_ids=ids,
        plan_id=plan_id,
        read_token=await api.token("read", [PROJECT]),
    )


# --- a small DOM reader (stdlib only) ------------------------------------------------------


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    content: list[Node | str] = field(default_factory=list)  # text and children, in order

    def all_text(self) -> str:
        """The text as a reader sees it: runs and child elements in document order (an
        amount's digits below the cent sit in a child span after the cents)."""
        return "".join(c if isinstance(c, str) else c.all_text() for c in self.content)

    def matches(self, tag: str, attrs: dict[str, str]) -> bool:
        if self.tag != tag:
            return False
        for key, want in attrs.items():
            if key == "class_":
                if want not in self.attrs.get("class", "").split():
                    return False
            elif self.attrs.get(key.replace("_", "-")) != want:
                return False
        return True

    def find_all(self, tag: str, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if child.matches(tag, attrs):
                found.append(child)
            found += child.find_all(tag, **attrs)
        return found

    def one(self, tag: str, **attrs: str) -> Node:
        nodes = self.find_all(tag, **attrs)
        assert len(nodes) == 1, f"expected one <{tag} {attrs}>, found {len(nodes)}"
        return nodes[0]


VOID = {"meta", "input", "br", "img", "link", "hr", "col", "area", "base", "wbr", "source"}


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].content.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].content.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text.append(data)
        self.stack[-1].content.append(data)


def parse(html: str) -> Node:
    parser = _Parser()
    parser.feed(html)
    parser.close()
    return parser.root


# --- what the JSON API says ------------------------------------------------------------------


async def json_figures(api: Api, s: Seeded) -> dict[str, Any]:
    rng = {"project": PROJECT, "from": s.first.isoformat(), "to": str(s.last + timedelta(days=1))}
    out: dict[str, Any] = {}
    async with api.client(s.read_token) as c:

        async def get(path: str, **params: object) -> Any:
            r = await c.get(path, params=params)
            assert r.status_code == 200, r.text
            return r.json()

        out["summary"] = await get("/v1/costs/summary", **rng)
        for dim in ("stage", "category"):
            out[dim] = await get("/v1/costs", group_by=dim, granularity="day", limit=10000, **rng)
        out["experiments"] = await get("/v1/costs", group_by="experiment", top=10, limit=11, **rng)
        out["budgets"] = [
            await get(f"/v1/budgets/{b['id']}", project=PROJECT)
            for b in await get("/v1/budgets", project=PROJECT)
        ]
        plans = await get("/v1/plans", project=PROJECT)
        out["plans"] = [await get(f"/v1/plans/{p['id']}/status", project=PROJECT) for p in plans]
        out["waste"] = await get(
            "/v1/reports/waste", project=PROJECT, **{"from": str(s.first), "to": str(s.last)}
        )
    return out


def near(a: str, b: str, rel: str = "0.001") -> bool:
    """Equal within `rel`: the forecast projects spend over the time elapsed, which moves."""
    x, y = Decimal(a), Decimal(b)
    return abs(x - y) <= abs(y) * Decimal(rel)


def people_usd(exact: str) -> str:
    """How people read an exact USD amount, worked out here without the service's formatter:
    rounded half-even to cents, thousands grouped, the code after it."""
    value = Decimal(exact)
    cents = value.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    if cents == 0 and value != 0:
        return "<0.01 USD"
    return f"{cents:,.2f} USD"


def check_money(node: Node, exact: str) -> str:
    """`node` shows `exact` as people read it, the exact figure kept in its title."""
    span = node if node.tag == "span" else node.one("span", class_="money")
    assert span.attrs["title"] == f"{exact} USD"
    assert span.attrs["data-exact"] == exact
    shown = span.all_text()
    assert shown == people_usd(exact), (shown, exact)
    return shown


def exact_titles(node: Node) -> list[str]:
    return [m.attrs["title"] for m in node.find_all("span", class_="money")]


PEOPLE_TICK = re.compile(r"\d{1,3}(,\d{3})*\.\d{2}")  # grouped, cents, nothing cut off


def check_charts_for_people(dom: Node) -> None:
    """Bar tooltips and axis ticks read as people read money; `data-value` stays exact."""
    for dim in ("stage", "category"):
        chart = dom.one("svg", class_=f"spend-{dim}")
        for bar in chart.find_all("rect", class_="bar"):
            exact = bar.attrs["data-value"]
            people = people_usd(exact)
            want = people if people == f"{exact} USD" else f"{people} (exactly {exact} USD)"
            assert bar.one("title").all_text().endswith(": " + want)
        ticks = [t.all_text() for t in chart.find_all("text", fill="#666")]
        assert len(ticks) >= 2 and all(PEOPLE_TICK.fullmatch(t) for t in ticks), ticks
    for plan_bar in dom.find_all("rect", class_="plan-actual"):
        assert (
            plan_bar.one("title")
            .all_text()
            .split(": ", 1)[1]
            .startswith(people_usd(plan_bar.attrs["data-value"]))
        )


def check_page_against_api(
    dom: Node, figures: dict[str, Any], currency: str = "USD", min_bars: int = 12
) -> None:
    assert currency == "USD"  # `people_usd` shows cents
    summary = figures["summary"]
    check_money(dom.one("div", id="tile-total-spend"), summary["total_cost"])
    assert Decimal(summary["total_cost"]) > 0
    check_charts_for_people(dom)
    # Spend over time: one bar segment per (day, stage) and (day, category) with spend.
    for dim in ("stage", "category"):
        chart = dom.one("svg", class_=f"spend-{dim}")
        shown = {
            (r.attrs["data-period"], r.attrs["data-series"]): r.attrs["data-value"]
            for r in chart.find_all("rect", class_="bar")
        }
        expected = {
            (row["key"]["period"], row["key"][dim] or "(none)"): row["cost"]
            for row in figures[dim]["rows"]
            if Decimal(row["cost"]) > 0
        }
        assert shown == expected
        assert len(shown) >= min_bars
    # Budgets: spent and left exactly; the burn-down line ends at the budget's counter.
    assert figures["budgets"]
    for status in figures["budgets"]:
        card = dom.one("div", data_budget=status["budget"]["id"])
        text = card.all_text()
        check_money(card.one("b", class_="spent"), status["spent"])
        assert f"left {people_usd(status['remaining'])}" in text
        assert f"{status['remaining']} {currency}" in exact_titles(card)
        assert card.one("polyline", class_="actual").attrs["data-value"] == status["spent"]
        assert card.one("line", class_="limit").attrs["data-value"] == status["budget"]["amount"]
        forecast = card.find_all("line", class_="forecast")
        if status["forecast"] is not None:
            assert near(forecast[0].attrs["data-value"], status["forecast"])
    # Plan against actual, per stage.
    assert figures["plans"]
    for plan in figures["plans"]:
        block = dom.one("div", data_plan=plan["plan_id"])
        for st in plan["stages"]:
            for kind, key in (
                ("planned", "planned"),
                ("actual", "actual"),
                ("forecast", "forecast_at_completion"),
            ):
                bar = block.one("rect", class_=f"plan-{kind}", data_stage=st["stage"])
                assert bar.attrs["data-value"] == st[key], (st["stage"], kind)
            row = block.one("tr", data_stage=st["stage"])
            check_money(row.find_all("td")[-1], st["variance"])
    # Top experiments, in the API's order.
    rows = dom.one("section", id="experiments").find_all("tr")[1:]
    api_rows = figures["experiments"]["rows"]
    assert [r.attrs["data-experiment"] for r in rows] == [
        x["key"]["experiment"] or "(none)" for x in api_rows
    ]
    for r, x in zip(rows, api_rows, strict=True):
        check_money(r.one("td", class_="cost"), x["cost"])
    # Waste findings.
    waste = figures["waste"]
    assert {f["kind"] for f in waste["findings"]} >= {"reserved_idle", "cross_region_repull"}
    section = dom.one("section", id="waste")
    shown_waste = sorted(
        (r.attrs["data-kind"], r.one("td", class_="cost").one("span").attrs["data-exact"])
        for r in section.find_all("tr")[1:]
    )
    assert shown_waste == sorted((f["kind"], f["cost_so_far"]) for f in waste["findings"])
    for r in section.find_all("tr")[1:]:
        cell = r.one("td", class_="cost")
        check_money(cell, cell.one("span").attrs["data-exact"])
    check_money(section.one("b", id="waste-total"), waste["total_waste"])


def check_escaped(html: str, dom: Node) -> None:
    # No markup from user input: the hostile budget name and tag value are text, not elements.
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(&quot;pwn&quot;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert not dom.find_all("script") and not dom.find_all("img")
    texts = dom.all_text()
    assert HOSTILE_BUDGET in texts
    assert HOSTILE_DATASET in texts


# --- HTML over HTTP --------------------------------------------------------------------------


async def test_page_shows_the_json_api_figures_and_escapes_user_input(api: Api) -> None:
    s = await seed(api)
    figures = await json_figures(api, s)
    async with api.client(s.read_token) as c:
        r = await c.get(f"/ui/{PROJECT}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in r.headers["content-security-policy"]
    dom = parse(r.text)
    check_page_against_api(dom, figures)
    check_escaped(r.text, dom)
    # The seeded figures need both: thousands grouped, and digits below the cent that only
    # the title keeps (the people figure rounds them; the page never cuts the exact one).
    titles = exact_titles(dom)
    shown = [m.all_text() for m in dom.find_all("span", class_="money")]
    assert any("," in t for t in shown), shown
    assert any(people_usd(t.removesuffix(" USD")) != t for t in titles), titles
    # The default range is the last 30 days, shown in the range form.
    assert dom.one("input", name="from").attrs["value"] == str(s.first)
    assert dom.one("input", name="to").attrs["value"] == str(s.last)


async def test_range_narrows_every_figure(api: Api) -> None:
    s = await seed(api)
    first, last = s.last - timedelta(days=4), s.last - timedelta(days=1)
    figures = await json_figures(api, Seeded(first, last, [], "", s.read_token))
    async with api.client(s.read_token) as c:
        r = await c.get(f"/ui/{PROJECT}", params={"from": str(first), "to": str(last)})
        assert r.status_code == 200, r.text
        dom = parse(r.text)
        check_page_against_api(dom, figures, min_bars=4)
        bars = dom.one("svg", class_="spend-stage").find_all("rect", class_="bar")
        assert {b.attrs["data-period"] for b in bars} == {
            str(first + timedelta(days=i)) for i in range(4)
        }
        bad = await c.get(f"/ui/{PROJECT}", params={"from": str(s.last), "to": str(s.first)})
        assert bad.status_code == 400
        assert bad.headers["content-type"].startswith("application/problem+json")


async def test_a_project_without_data_shows_empty_states(api: Api) -> None:
    async with api.client() as c:
        r = await c.get("/ui/fresh")
    assert r.status_code == 200, r.text
    dom = parse(r.text)
    assert dom.one("div", id="tile-total-spend").all_text() == "Spend in range0.00"
    assert not dom.find_all("rect", class_="bar")
    text = dom.all_text()
    assert "no spend in this range" in text
    assert "no budgets" in text and "no plans" in text and "no waste found" in text


async def test_auth_token_once_then_cookie_and_project_scope(api: Api) -> None:
    s = await seed(api)
    async with httpx.AsyncClient(base_url=api.base_url) as anon:
        refused = await anon.get(f"/ui/{PROJECT}")
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert (await anon.get("/ui")).status_code == 401
        assert (await anon.get(f"/ui/{PROJECT}", params={"token": "tl_nope"})).status_code == 401
        # ?token= once: a cookie for /ui only, and the address loses the token.
        signed = await anon.get(f"/ui/{PROJECT}", params={"token": s.read_token, "from": s.first})
        assert signed.status_code == 303
        assert signed.headers["location"] == f"/ui/{PROJECT}?from={s.first}"
        cookie = signed.headers["set-cookie"]
        for part in ("trainledger_ui=", "HttpOnly", "SameSite=Strict", "Path=/ui"):
            assert part.lower() in cookie.lower(), cookie
        jar = {"trainledger_ui": signed.cookies["trainledger_ui"]}
        page = await anon.get(signed.headers["location"], cookies=jar)
        assert page.status_code == 200 and "Spend over time by stage" in page.text
        # The cookie is for the dashboard only: the JSON API still wants the header.
        api_call = await anon.get("/v1/costs", params={"project": PROJECT}, cookies=jar)
        assert api_call.status_code == 401
        # The cookie is the token itself, checked on every request: revoking it ends the session.
        async with api.client() as admin:
            made = await admin.post("/v1/tokens", json={"role": "read", "projects": [PROJECT]})
            r = await anon.get("/ui", params={"token": made.json()["token"]})
            assert r.status_code == 303 and r.headers["location"] == "/ui"
            session = {"trainledger_ui": r.cookies["trainledger_ui"]}
            assert (await anon.get("/ui", cookies=session)).status_code == 200
            assert (await admin.delete(f"/v1/tokens/{made.json()['id']}")).status_code == 204
        assert (await anon.get(f"/ui/{PROJECT}", cookies=session)).status_code == 401
    # The read role suffices; ingest does not; a token scoped elsewhere sees nothing here.
    ingest = await api.token("ingest", [PROJECT])
    other = await api.token("read", ["other"])
    async with api.client(ingest) as c:
        assert (await c.get(f"/ui/{PROJECT}")).status_code == 403
    async with api.client(other) as c:
        assert (await c.get(f"/ui/{PROJECT}")).status_code == 403
        picker = await c.get("/ui")
        assert picker.status_code == 200 and f'href="/ui/{PROJECT}"' not in picker.text
    async with api.client(s.read_token) as c:
        picker = await c.get("/ui")
        assert f'href="/ui/{PROJECT}"' in picker.text


async def test_the_services_address_in_a_browser_opens_the_dashboard(api: Api) -> None:
    """`/` (no token: a browser's first visit) redirects to the dashboard, which then asks
    for the token; followed with one, it is the project picker."""
    async with httpx.AsyncClient(base_url=api.base_url) as c:
        r = await c.get("/", headers={"Accept": "text/html"})
    assert r.status_code == 303 and r.headers["location"] == "/ui", r.text
    async with api.client() as c:
        signed_in = await c.get("/", follow_redirects=True)
    assert signed_in.status_code == 200 and signed_in.url.path == "/ui"
    assert "text/html" in signed_in.headers["content-type"]


async def test_a_monthly_burn_down_shows_the_month_of_the_pages_days(api: Api) -> None:
    """A page of last month shows a monthly budget's burn-down of last month (its spend then,
    the period whole), not this month's, which lies outside the page's days."""
    await put_card(api)
    this_month = datetime.now(UTC).date().replace(day=1)
    last_day = this_month - timedelta(days=1)  # the last day of last month
    first_day = last_day.replace(day=1)
    when = datetime(last_day.year, last_day.month, last_day.day, 12, tzinfo=UTC).isoformat()
    assert (await post(api, [event("last-month", "2", time=when)]))["accepted"] == 1  # 5.00
    async with api.client() as c:
        r = await c.post("/v1/budgets", json={"project": PROJECT, "name": "m", "amount": "100"})
        assert r.status_code == 201, r.text
        old = await c.get(f"/ui/{PROJECT}", params={"from": str(first_day), "to": str(last_day)})
        today = await c.get(f"/ui/{PROJECT}")
    assert old.status_code == 200 and today.status_code == 200
    card = parse(old.text).one("div", class_="budget")
    assert f"period {last_day:%Y-%m}" in card.all_text()
    assert card.one("b", class_="spent").all_text() == "5.00 USD"
    assert card.one("b", class_="forecast").all_text() == "5.00 USD"  # the month is over
    card = parse(today.text).one("div", class_="budget")
    assert f"period {this_month:%Y-%m}" in card.all_text()
    assert card.one("b", class_="spent").all_text() == "0.00 USD"


async def test_the_two_reworks_have_distinct_names(api: Api) -> None:
    """The tile is the spend tagged rework; the cost-effect section's figure is a regressed
    experiment's rework exposure: two ideas, two names."""
    async with api.client() as c:
        page = await c.get(f"/ui/{PROJECT}")
    dom = parse(page.text)
    assert dom.one("div", id="tile-rework").one("div", class_="label").all_text() == "Tagged rework"
