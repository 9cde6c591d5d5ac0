"""The PromQL tokenizer of tests/promql.py, on its own: which identifiers are metric names."""

from __future__ import annotations

import pytest

from tests.promql import PromQLError, metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('a_total{job="x", path=~"/v1/.*"}', {"a_total"}),
        ("rate(req_total[5m])", {"req_total"}),
        ('sum by (project, stage) (spend{project=~"$project"})', {"spend"}),
        ("sum(spend) without (stage)", {"spend"}),
        ("forecast > bool on(project, budget) group_left(name) limit", {"forecast", "limit"}),
        ("a * ignoring(stage) group_right b", {"a", "b"}),
        ("time() - read_ts > 600", {"read_ts"}),
        ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval])))", {"h_bucket"}),
        ("max_over_time(x[1h30m:5m] offset 1d)", {"x"}),
        ("x @ start()", {"x"}),
        ('{__name__="by_name", project="p"}', {"by_name"}),
        ('label_replace(v, "dst", "$1", "src", "(.*)")', {"v"}),
        ("label_values(spend_to_date, project)", {"spend_to_date"}),
        ("absent(read_ok) or vector(0)", {"read_ok"}),
        ("topk(5, x) and y unless z", {"x", "y", "z"}),
        ("1e3 * inf + 0x1f - nan", set()),
        ("${metric} + $other", set()),
        ("a_b:c_d  # a comment naming not_a_metric", {"a_b:c_d"}),
        ('x{l="a \\" } b"}', {"x"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


@pytest.mark.parametrize("expr", ["sum(x", "x]", 'x{a="b"', "x ; y", "sum(x}"])
def test_what_is_not_promql_is_an_error(expr: str) -> None:
    with pytest.raises(PromQLError):
        metric_names(expr)
