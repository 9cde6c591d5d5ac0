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


def main(argv: list[str]) -> int:
    """`python -m trainledger.config.docs PAGE [--check]`: write the tables into PAGE, or
    with --check say whether they are already what the declarations make (exit status 1)."""
    import sys
    from pathlib import Path

    page = Path(argv[0])
    text = page.read_text()
    fresh = with_tables(text)
    if "--check" in argv[1:]:
        if fresh != text:
            print(f"{page} is stale: run `python3 dev.py config-docs`", file=sys.stderr)
            return 1
        return 0
    page.write_text(fresh)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
