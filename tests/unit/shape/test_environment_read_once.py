"""The environment is read in one module (issue 28, item 5): `service/config/environment.py`
reads the declared settings into one `Settings`, which is passed down (and handed to
`serve`'s workers whole). Any other product module spelling `os.environ`, `os.getenv`,
`os.putenv` or `from os import environ` fails here, so a setting cannot be read on the side
again unnoticed. The client library (`service/client/`) reads no variable at all: its
caller gives it the URL and token.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
THE_MODULE = REPO / "service" / "config" / "environment.py"
READERS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _reads(path: Path, root: Path = REPO) -> list[str]:
    """`path:line` of each use of the process environment in the module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        uses = (
            isinstance(node, ast.Attribute)
            and node.attr in READERS
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in READERS for alias in node.names)
        )
        if uses:
            found.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}")
    return found


def test_only_the_config_reads_the_environment() -> None:
    others = [
        where
        for path in sorted((REPO / "service").rglob("*.py"))
        if path != THE_MODULE
        for where in _reads(path)
    ]
    assert not others, (
        "read the setting from the `Settings` passed in (declare it in "
        f"service/config/settings.py), not from the environment: {others}"
    )


def test_the_check_sees_a_read(tmp_path: Path) -> None:
    module = tmp_path / "reads.py"
    module.write_text(
        "import os\nfrom os import getenv\nA = os.environ.get('X')\nB = os.getenv('Y')\n"
        "C = os.path.join('a', 'b')\n"
    )
    assert sorted(_reads(module, tmp_path)) == ["reads.py:2", "reads.py:3", "reads.py:4"]
    assert _reads(THE_MODULE), "the config module reads the environment (it must be seen)"
