"""Text cells of the CSV files the service writes, made safe to open in a spreadsheet.

A cell whose text begins with ``=``, ``+``, ``-`` or ``@`` (or a tab, carriage return or line
feed) is read as a formula by Excel, LibreOffice and Google Sheets: an experiment named
``=HYPERLINK(...)`` or ``=1+2`` would run in the reader's spreadsheet (OWASP "CSV
injection"). Such a text cell is written with a leading ``'``, which spreadsheets show as
text and do not display. Numeric columns are never passed through here: a negative amount
keeps its ``-``.
"""

from __future__ import annotations

FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r", "\n")


def neutralise(cell: str | None) -> str | None:
    """`cell` with a ``'`` before it when it would start a formula; None stays None."""
    if cell and cell.startswith(FORMULA_LEADS):
        return "'" + cell
    return cell
