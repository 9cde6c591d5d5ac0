"""docs/reference/configuration.md's tables of variables, made from the declarations: each
sits between `<!-- variables:SECTION -->` and `<!-- /variables -->` (`python3 dev.py
config-docs` writes them; a unit test fails when the page is not what this makes)."""

from __future__ import annotations

import re

from .settings import VARIABLES

_TABLE = re.compile(r"(<!-- variables:(\w+) -->\n)(.*?)(<!-- /variables -->)", re.DOTALL)


def table(section: str) -> str:
    """The markdown table of the variables of `section` (settings.py's `section=`)."""
    lines = ["| variable | default | allowed | meaning |", "|---|---|---|---|"]
    for var in VARIABLES:
        if var.env.section == section:
            cells = (f"`{var.name}`", var.shown_default, var.kind.allowed, var.env.help)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def with_tables(page: str) -> str:
    """`page` with each marked table made anew."""
    return _TABLE.sub(lambda m: m[1] + table(m[2]) + m[4], page)
