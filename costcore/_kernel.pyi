"""Type stub for the compiled kernel ``costcore/_kernel.pyx``."""

from typing import Any

from typing_extensions import Buffer

from costcore.rates import RateTable
from costcore.result import BatchResult, PriceSegment

KERNEL_VERSION: str

def kernel_build_info() -> dict[str, Any]: ...
def price_batch(
    quantity_micro: Buffer,
    rate_row: Buffer,
    group: Buffer,
    tier_slot: Buffer,
    rates: RateTable,
    tier_cum: Buffer,
    n_groups: int,
) -> BatchResult: ...
def price_segments(
    rates: RateTable, row: int, cum_before: int, quantity_micro: int
) -> list[PriceSegment]: ...
