"""The dashboard `/ui` end to end in headless Chromium: the page a browser renders (scripts run,
styles applied) shows the same figures as the JSON API, including the cost-effect section's
table and its cost-versus-score chart (the Pareto front filled, regressions marked).

The project is `test_dashboard.seed`'s, with evaluation results added: baseline `mix-b`, the
target benchmark gsm8k and the general benchmark mmlu; `mix-a` gains on gsm8k but falls past
the tolerance on mmlu (a regression with its rework exposure), `mid-1` gains less.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_dashboard import (
    PROJECT,
    Node,
    Seeded,
    _at,
    check_escaped,
    check_money,
    check_page_against_api,
    json_figures,
    parse,
    seed,
)
from tests.api.test_dashboard_effect import check_nothing_cut_off
from tests.cdp import Chromium
from tests.conftest import Api

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
# Debian's package; another build can be named for a local run.
CHROMIUM = os.environ.get("TRAINLEDGER_TEST_CHROMIUM", "/usr/bin/chromium")
ONE_DAY = timedelta(days=1)

EFFECT_SETTINGS = {
    "baseline": "mix-b",
    "benchmarks": {"gsm8k": "target", "mmlu": "general"},
    "tolerance": "1",
}


def _result(rid: str, exp: str, bench: str, value: str, days_ago: int) -> dict[str, Any]:
    return {"id": rid, "experiment": exp, "benchmark": bench, "value": value,
            "time": _at(days_ago, 20)}  # fmt: skip


EFFECT_RESULTS = [
    _result("b-gsm", "mix-b", "gsm8k", "40.0", 9),
    _result("b-mmlu", "mix-b", "mmlu", "60.0", 9),
    _result("a-mmlu-1", "mix-a", "mmlu", "60.5", 7),  # within the tolerance: the last good one
    _result("a-gsm", "mix-a", "gsm8k", "52.0", 3),
    _result("a-mmlu-2", "mix-a", "mmlu", "57.5", 3),  # −2.5 past a tolerance of 1: a regression
    _result("m-gsm", "mid-1", "gsm8k", "44.0", 3),
    _result("m-mmlu", "mid-1", "mmlu", "59.5", 3),
]


async def seed_effect(api: Api, s: Seeded) -> dict[str, Any]:
    """Evaluation settings and results on the seeded project; the cost-effect report of the
    dashboard's range, as the JSON API answers it."""
    async with api.client() as c:
        r = await c.put("/v1/evaluations/settings", params={"project": PROJECT},
                        json=EFFECT_SETTINGS)  # fmt: skip
        assert r.status_code == 200, r.text
        r = await c.post("/v1/evaluations", json={"project": PROJECT, "results": EFFECT_RESULTS})
        assert r.status_code == 200 and r.json()["accepted"] == len(EFFECT_RESULTS), r.text
    async with api.client(s.read_token) as c:
        r = await c.get(
            "/v1/reports/cost-effect",
            params={
                "project": PROJECT,
                "from": str(s.first),
                "to": str(s.last + timedelta(days=1)),
            },
        )
        assert r.status_code == 200, r.text
        return dict(r.json())


def check_effect_section(dom: Node, report: dict[str, Any]) -> None:
    """The rendered section against the report: one table row per experiment in its order,
    each cost as the report's exact figure; the gsm8k chart with one point per experiment
    with a gsm8k value, the front's points filled and the regressed experiments marked."""
    section = dom.one("section", id="cost-effect")
    rows = section.find_all("tr")[1:]
    assert [row.attrs["data-experiment"] for row in rows] == [
        x["experiment"] for x in report["rows"]
    ]
    for row, x in zip(rows, report["rows"], strict=True):
        check_money(row.one("td", class_="cost"), x["cost"])
    regressed = {x["experiment"] for x in report["rows"] if x["regressions"]}
    assert regressed == {"mix-a"}  # the story the data tells, read from the report
    (front,) = [f for f in report["fronts"] if f["benchmark"] == "gsm8k"]
    on_front = {p["experiment"] for p in front["experiments"]}
    chart = next(
        f for f in section.find_all("figure") if f.one("figcaption").all_text().startswith("gsm8k")
    )
    points = {
        g.attrs["data-experiment"]: set(g.attrs["class"].split()) for g in chart.find_all("g")
    }
    scored = {
        x["experiment"]
        for x in report["rows"]
        if any(b["benchmark"] == "gsm8k" for b in x["benchmarks"])
    }
    assert set(points) == scored
    for experiment, classes in points.items():
        assert ("on-front" in classes) == (experiment in on_front), (experiment, classes)
        assert ("regressed" in classes) == (experiment in regressed), (experiment, classes)
    assert (
        "mmlu: rework exposure"
        in rows[[x["experiment"] for x in report["rows"]].index("mix-a")].all_text()
    )


def _chromium_args(profile: str) -> list[str]:
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
    ]


# Every chart's text boxes as the browser laid them out (screen px, transforms applied): each
# inside its drawing (the svg's box), and no two overlapping.
_MEASURE_TEXTS = """(() => {
  const charts = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    const area = svg.getBoundingClientRect();
    const texts = [];
    for (const t of svg.querySelectorAll('text')) {
      const b = t.getBoundingClientRect();
      if (b.width === 0 && b.height === 0) continue;
      texts.push({text: t.textContent, x: b.left - area.left, y: b.top - area.top,
                  w: b.width, h: b.height});
    }
    charts.push({chart: svg.getAttribute('aria-label'), w: area.width, h: area.height, texts});
  }
  return charts;
})()"""


def _render(args: list[str], url: str) -> tuple[str, list[dict[str, Any]]]:
    """The page as Chromium rendered it (its DOM) and its charts' text boxes, over the
    DevTools protocol: what a dumped DOM cannot tell is where the text landed."""
    browser = Chromium(args)
    try:
        page = browser.open(url)
        html = str(browser.evaluate(page, "document.documentElement.outerHTML"))
        layout = list(browser.evaluate(page, _MEASURE_TEXTS))
    finally:
        browser.close()
    return html, layout


def overlap(a: dict[str, float], b: dict[str, float], slack: float = 0.5) -> bool:
    return (
        min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"]) > slack
        and min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"]) > slack
    )


def check_chart_texts(layout: list[dict[str, Any]], charts: int, slack: float = 0.5) -> None:
    """Every chart measured; no text of a chart leaves its drawing; no two texts overlap."""
    assert len(layout) == charts and charts >= 5, (len(layout), charts)
    problems = []
    for chart in layout:
        texts = chart["texts"]
        assert texts, chart["chart"]
        for t in texts:
            if (
                t["x"] < -slack
                or t["y"] < -slack
                or t["x"] + t["w"] > chart["w"] + slack
                or t["y"] + t["h"] > chart["h"] + slack
            ):
                problems.append(f"{chart['chart']}: {t['text']!r} leaves the drawing {t}")
        for i, a in enumerate(texts):
            for b in texts[i + 1 :]:
                if overlap(a, b, slack):
                    problems.append(f"{chart['chart']}: {a['text']!r} overlaps {b['text']!r}")
    assert not problems, "\n".join(problems)


def test_the_text_checks_catch_a_cut_label_and_an_overlap() -> None:
    inside = {"text": "a", "x": 2.0, "y": 2.0, "w": 10.0, "h": 10.0}
    cut = {"text": "b", "x": 95.0, "y": 2.0, "w": 10.0, "h": 10.0}
    near = {"text": "c", "x": 8.0, "y": 5.0, "w": 10.0, "h": 10.0}
    chart = {"chart": "x", "w": 100.0, "h": 50.0}
    check_chart_texts([{**chart, "texts": [inside]}] * 5, 5)
    with pytest.raises(AssertionError, match="'b' leaves the drawing"):
        check_chart_texts([{**chart, "texts": [inside, cut]}] * 5, 5)
    with pytest.raises(AssertionError, match="'a' overlaps 'c'"):
        check_chart_texts([{**chart, "texts": [inside, near]}] * 5, 5)


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.parametrize("redis_url", ["valkey"], indirect=True)
async def test_dashboard_in_headless_chromium(api: Api) -> None:
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    s = await seed(api)
    report = await seed_effect(api, s)
    figures = await json_figures(api, s)
    # The token goes in once; the dashboard answers with a cookie and a redirect to the page
    # without it, so what Chromium renders was fetched with the cookie.
    url = f"{api.base_url}/ui/{PROJECT}?token={s.read_token}"
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        html, layout = await asyncio.to_thread(_render, _chromium_args(profile), url)
    dom = parse(html)
    check_chart_texts(layout, len(dom.find_all("svg", class_="chart")))
    check_page_against_api(dom, figures)
    check_escaped(html, dom)
    check_effect_section(dom, report)
    for figure in dom.one("section", id="cost-effect").find_all("figure"):
        check_nothing_cut_off(figure)
    visible = dom.all_text()
    for heading in (
        "Spend over time by stage",
        "Spend over time by category",
        "Budgets: burn-down",
        "Plan vs actual per stage",
        "Top experiments",
        "Waste findings",
        "Cost and effect",
    ):
        assert heading in visible
    assert len(dom.find_all("svg", class_="burn-down")) == len(figures["budgets"])
    with tempfile.TemporaryDirectory() as profile:
        taken = await asyncio.to_thread(
            _run,
            [*_chromium_args(profile), f"--screenshot={shot}", "--window-size=1400,3800", url],
        )
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    print(f"dashboard screenshot: {shot}")
