"""costcore: exact integer pricing of usage events (pure computation, no I/O).

``price_batch`` is the compiled Cython kernel and ``price_segments`` the one pricing rule it
applies (a quantity split into priced parts: flat, graduated tiers), for the callers that show
the parts (the FOCUS export, plans). They are loaded on first access; if the extension is not
built, accessing them raises ``ImportError`` (there is deliberately no silent fallback to the
slow reference; product code never calls ``*_reference``: tests and benchmarks do).
Everything else in the package is plain Python and importable without the kernel.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from costcore._version import KERNEL_VERSION
from costcore.columns import (
    CodedEntry,
    CodedGroups,
    ScanResult,
    dictionary_encode_reference,
    group_coded_reference,
    group_positions_reference,
    json_array_length_reference,
    pair_codes_reference,
    parse_time_reference,
    rate_rows_reference,
    remap_codes_reference,
    scan_events_reference,
    scan_wire_events_reference,
    take_reference,
    text_line_count_reference,
)
from costcore.money import (
    INT64_MAX,
    MONEY_SCALE,
    PRICE_SCALE,
    QUANTITY_SCALE,
    format_money,
    format_quantity,
    parse_price,
    parse_quantity,
    round_half_even_div,
)
from costcore.rates import RateRow, RateTable
from costcore.reference import price_batch_reference, price_segments_reference
from costcore.result import STATUS_OVERFLOW, STATUS_PRICED, BatchResult, PriceSegment

if TYPE_CHECKING:
    from costcore._columns import (
        CodedSums,
        coded_sums_for,
        dictionary_encode,
        group_coded,
        group_positions,
        json_array_length,
        pair_codes,
        parse_time,
        rate_rows,
        remap_codes,
        scan_events,
        scan_wire_events,
        take,
        text_line_count,
    )
    from costcore._kernel import price_batch, price_segments

__all__ = [
    "INT64_MAX",
    "KERNEL_VERSION",
    "MONEY_SCALE",
    "PRICE_SCALE",
    "QUANTITY_SCALE",
    "STATUS_OVERFLOW",
    "STATUS_PRICED",
    "BatchResult",
    "CodedEntry",
    "CodedGroups",
    "CodedSums",
    "PriceSegment",
    "RateRow",
    "RateTable",
    "ScanResult",
    "coded_sums_for",
    "dictionary_encode",
    "dictionary_encode_reference",
    "format_money",
    "format_quantity",
    "group_coded",
    "group_coded_reference",
    "group_positions",
    "group_positions_reference",
    "json_array_length",
    "json_array_length_reference",
    "kernel_build_info",
    "pair_codes",
    "pair_codes_reference",
    "parse_price",
    "parse_quantity",
    "parse_time",
    "parse_time_reference",
    "price_batch",
    "price_batch_reference",
    "price_segments",
    "price_segments_reference",
    "rate_rows",
    "rate_rows_reference",
    "remap_codes",
    "remap_codes_reference",
    "round_half_even_div",
    "scan_events",
    "scan_events_reference",
    "scan_wire_events",
    "scan_wire_events_reference",
    "take",
    "take_reference",
    "text_line_count",
    "text_line_count_reference",
]


def _load_kernel() -> ModuleType:
    """Import the compiled kernel or raise ``ImportError`` explaining how to build it."""
    try:
        from costcore import _kernel
    except ImportError as exc:
        raise ImportError(
            "costcore.price_batch needs the compiled extension costcore._kernel, which could "
            f"not be imported ({exc}). Build it with `python setup.py build_ext --inplace` "
            "or install the package. There is no automatic pure-Python fallback; use "
            "costcore.price_batch_reference explicitly if you want the slow reference."
        ) from exc
    if _kernel.KERNEL_VERSION != KERNEL_VERSION:
        raise ImportError(
            f"costcore._kernel is stale: it implements kernel version {_kernel.KERNEL_VERSION!r} "
            f"but costcore expects {KERNEL_VERSION!r}. Rebuild it with "
            "`python setup.py build_ext --inplace`."
        )
    return _kernel


def kernel_build_info() -> dict[str, Any]:
    """Facts embedded in the compiled kernel at build time.

    Keys: ``kernel_version``, ``cython_version``, ``cython_hex_version``, ``compiler``,
    ``int128``, ``nogil``. Raises ``ImportError`` if the kernel is not built.
    """
    info: dict[str, Any] = dict(_load_kernel().kernel_build_info())
    return info


# What costcore._columns compiles (loaded on first access, as price_batch).
_COLUMNS = (
    "CodedSums",
    "coded_sums_for",
    "dictionary_encode",
    "group_coded",
    "group_positions",
    "json_array_length",
    "pair_codes",
    "parse_time",
    "rate_rows",
    "remap_codes",
    "scan_events",
    "scan_wire_events",
    "take",
    "text_line_count",
)


def __getattr__(name: str) -> Any:
    if name in ("price_batch", "price_segments"):
        function = getattr(_load_kernel(), name)
        globals()[name] = function
        return function
    if name in _COLUMNS:
        _load_kernel()  # the same build; a stale one says so
        try:
            from costcore import _columns
        except ImportError as exc:
            raise ImportError(
                "costcore.scan_events needs the compiled extension costcore._columns, which "
                f"could not be imported ({exc}). Build it with `pip install -e .`; the plain "
                "reference is costcore.scan_events_reference."
            ) from exc
        for compiled in _COLUMNS:
            globals()[compiled] = getattr(_columns, compiled)
        return globals()[name]
    raise AttributeError(f"module 'costcore' has no attribute {name!r}")
