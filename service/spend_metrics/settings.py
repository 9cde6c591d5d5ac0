"""The spend gauges' settings, from the TRAINLEDGER_METRICS_SPEND_DIMENSIONS family of variables:
which dimensions a scrape adds, how many series per family, how long a read is reused. Apart
from the rules (`model.py`) so that reading the configuration imports neither Prometheus nor
Redis."""

from __future__ import annotations

from dataclasses import dataclass

# The dimensions a scrape may add (TRAINLEDGER_METRICS_SPEND_DIMENSIONS): `category` splits
# the stage series; `experiment` and `owner` each get a family of their own (no roll-up
# keeps them with the stage, so together they would read the finest totals of the month).
OPTIONAL_DIMENSIONS: tuple[str, ...] = ("category", "experiment", "owner")
TOP_RANGE = (2, 1000)
PROJECTS_RANGE = (1, 10_000)


def parse_dimensions(text: str) -> tuple[str, ...]:
    """The opt-in dimensions named in a comma-separated list. Raises ValueError."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in OPTIONAL_DIMENSIONS:
            raise ValueError(f"unknown dimension {name!r}; use {', '.join(OPTIONAL_DIMENSIONS)}")
    if len(set(names)) != len(names):
        raise ValueError("a dimension is named twice")
    return tuple(n for n in OPTIONAL_DIMENSIONS if n in names)


@dataclass(frozen=True)
class SpendConfig:
    dimensions: tuple[str, ...] = ()
    top: int = 20  # series per project of each experiment/owner family
    ttl_seconds: float = 10.0  # a scrape within this of the last read answers from it
    deadline_seconds: float = 2.0  # a scrape waits this long for a read, then answers without
    # Projects a scrape shows at most: those with the largest spend to date. It bounds the
    # read and the series whatever the number of projects (docs/reference/metrics.md).
    projects: int = 500

    def stage_dims(self) -> tuple[str, ...]:
        return ("stage", "category") if "category" in self.dimensions else ("stage",)
