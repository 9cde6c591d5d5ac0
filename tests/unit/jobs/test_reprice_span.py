"""Which hours a rate-card version prices: from its start to the next later version's."""

from __future__ import annotations

from datetime import UTC, datetime

from trainledger.jobs.reprice import _hour_in_span, _span
from trainledger.ratecards.model import RateCardVersion


def version(number: int, start: datetime) -> RateCardVersion:
    return RateCardVersion(
        name="c", version=number, currency="USD", effective_from=start, created_at=start, skus=[]
    )


def test_the_span_ends_at_the_next_later_version() -> None:
    jan, mar, may = (datetime(2026, m, 1, tzinfo=UTC) for m in (1, 3, 5))
    versions = [version(1, jan), version(2, may)]
    assert _span(versions, mar) == (mar, may)
    assert _span(versions, may) == (may, None)  # the same start: the new version overrides
    assert _span([version(1, jan)], mar) == (mar, None)


def test_an_hour_is_in_the_span_when_they_overlap() -> None:
    start = datetime(2026, 3, 2, 10, 30, tzinfo=UTC)
    end = datetime(2026, 3, 4, 0, 0, tzinfo=UTC)
    span = (start, end)
    assert not _hour_in_span("20260302", 9, span)
    assert _hour_in_span("20260302", 10, span)  # the hour the version starts in (to the hour)
    assert _hour_in_span("20260303", 23, span)
    assert not _hour_in_span("20260304", 0, span)  # the next version's
    assert _hour_in_span("20270101", 0, (start, None))
