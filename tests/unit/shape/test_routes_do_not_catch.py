"""Routes do not catch (issue 28, item 4): a feature's error subclasses a kind of
`service.errors` and the one handler (`service.http.problems.from_problem`) answers it, so a
route parses, makes one service call and lets the error rise. A `try` in a routes module is
allowed only where it is listed in `CATCHES` with the reason (a streaming answer that must
catch mid-stream, say), so a route cannot start mapping errors by hand again unnoticed.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# "service/<feature>/routes.py:<function>" -> why it must catch. None today.
CATCHES: dict[str, str] = {}


def _routes() -> list[Path]:
    return sorted((REPO / "service").glob("*/routes.py"))


def _catching_functions(path: Path, root: Path = REPO) -> list[str]:
    """`path:function` (the innermost function) with each `try` of the module's code."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = child.name
            if isinstance(child, ast.Try | ast.TryStar):
                found.append(f"{path.relative_to(root).as_posix()}:{inner}")
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_there_are_routes_to_check() -> None:
    assert len(_routes()) >= 10


def test_no_route_catches() -> None:
    catching = [name for path in _routes() for name in _catching_functions(path)]
    unexplained = sorted(set(catching) - set(CATCHES))
    assert not unexplained, (
        "a route catches instead of letting a kind of service.errors rise (subclass NotFound, "
        f"Invalid, Forbidden, Conflict or Unavailable; see docs/development.md): {unexplained}"
    )


def test_every_exemption_still_catches() -> None:
    catching = {name for path in _routes() for name in _catching_functions(path)}
    assert not set(CATCHES) - catching, "an exemption in CATCHES no longer catches: drop it"


def test_the_check_names_the_catching_function(tmp_path: Path) -> None:
    source = tmp_path / "routes.py"
    source.write_text(
        "async def handler():\n"
        "    try:\n"
        "        return 1\n"
        "    except ValueError:\n"
        "        raise\n"
        "def fine():\n"
        "    return 2\n"
    )
    assert _catching_functions(source, tmp_path) == ["routes.py:handler"]
