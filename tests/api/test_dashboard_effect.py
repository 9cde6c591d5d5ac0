"""The dashboard's cost-effect section over HTTP: the table shows the figures of
`GET /v1/reports/cost-effect`, the chart marks the Pareto front and the regressions, and
user-given names are escaped."""

from __future__ import annotations

from trainledger.dashboard.effect import label_width

from tests.api.test_cost_effect_http import _project, result
from tests.api.test_dashboard import (
    PEOPLE_TICK,
    Node,
    check_money,
    exact_titles,
    parse,
    people_usd,
)
from tests.conftest import Api

HOSTILE = "<img-src=x>"  # no label allows markup; a benchmark name may hold < and >


async def test_section_shows_the_report_and_marks_front_and_regressions(api: Api) -> None:
    await _project(api)
    async with api.client() as c:
        r = await c.post(
            "/v1/evaluations",
            json={"project": "llm", "results": [result("h", "mixA", HOSTILE, "1", 1)]},
        )
        assert r.status_code == 200, r.text
        settings = (await c.get("/v1/evaluations/settings", params={"project": "llm"})).json()
        settings["benchmarks"][HOSTILE] = "target"  # shown as a column and a chart
        r = await c.put("/v1/evaluations/settings", params={"project": "llm"}, json=settings)
        assert r.status_code == 200, r.text
        report = (await c.get("/v1/reports/cost-effect", params={"project": "llm"})).json()
        page = await c.get("/ui/llm")
    assert page.status_code == 200, page.text
    assert "<img-src" not in page.text and "&lt;img-src=x&gt;" in page.text
    dom = parse(page.text)
    section = dom.one("section", id="cost-effect")
    rows = section.find_all("tr")[1:]
    assert [row.attrs["data-experiment"] for row in rows] == [
        x["experiment"] for x in report["rows"]
    ]
    for row, x in zip(rows, report["rows"], strict=True):
        check_money(row.one("td", class_="cost"), x["cost"])
    mix_a = rows[1].all_text()
    assert "1.25 USD" in mix_a  # cost per point of gsm8k
    assert "mmlu: rework exposure 5.00 USD" in mix_a and "20.00 USD" in mix_a  # exposure, forecast
    mix_a_row = report["rows"][1]
    assert {f"{mix_a_row['rework_exposure']} USD", f"{mix_a_row['cost']} USD"} <= set(
        exact_titles(rows[1])
    )
    gsm8k = next(
        f for f in section.find_all("figure") if f.one("figcaption").all_text().startswith("gsm8k")
    )
    points = {
        g.attrs["data-experiment"]: (g.attrs["class"], g.attrs["data-cost"], g.attrs["data-value"])
        for g in gsm8k.find_all("g")
    }
    assert points == {
        "base": ("point", "25.20", "40.0"),
        "mixA": ("point on-front regressed", "15.00", "52.0"),
    }
    for point in gsm8k.find_all("g"):  # the tooltip as people read it
        assert point.one("title").all_text().endswith(f"for {people_usd(point.attrs['data-cost'])}")
    ticks = [t.all_text() for t in gsm8k.find_all("text", class_="cost-tick")]
    assert ticks and all(PEOPLE_TICK.fullmatch(t) for t in ticks), ticks
    assert len(section.find_all("figure")) == 2  # gsm8k and the hostile-named target
    for figure in section.find_all("figure"):
        check_nothing_cut_off(figure)


def check_nothing_cut_off(figure: Node) -> None:
    """Every label of the chart lies inside its drawing (its width estimated generously, as
    the page does); the score axis has ticks."""
    svg = figure.one("svg")
    width = float(svg.attrs["viewbox"].split()[2])  # the parser lowercases names
    for text in svg.find_all("text"):
        if "transform" in text.attrs:
            continue  # the rotated axis title
        x, anchor = float(text.attrs["x"]), text.attrs.get("text-anchor", "start")
        extent = label_width(text.all_text(), int(text.attrs.get("font-size", "11")))
        left = {"start": x, "middle": x - extent / 2, "end": x - extent}[anchor]
        assert left >= 0 and left + extent <= width, (text.all_text(), left, extent, width)
    assert len(svg.find_all("text", class_="score-tick")) >= 2


async def test_section_without_results_says_so(api: Api) -> None:
    async with api.client() as c:
        page = await c.get("/ui/empty-project")
    assert page.status_code == 200, page.text
    section = parse(page.text).one("section", id="cost-effect")
    assert "no evaluation results in this range" in section.all_text()
