"""The codebase keeps the shape docs/development.md describes (issue 16).

Files stay around 500 lines, functions around 80: a file or function past the limit is listed
in `LONGER` with the reason its one idea needs the room, so growing past the limit is a
decision someone wrote down, not drift. And the code imports itself by the product's name:
inside `service/` imports are relative, outside it they name `trainledger`; nothing imports a
package called `service`.

Import direction (features, stores, routes) is checked by import-linter (`lint-imports`, in
`python3 dev.py check`), with the contracts in pyproject.toml.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FILE_LIMIT = 500
FUNCTION_LIMIT = 80

# path (or path:function) -> why its one idea needs more room.
LONGER: dict[str, str] = {}


def _sources() -> list[Path]:
    return sorted((REPO / "service").rglob("*.py")) + sorted((REPO / "costcore").glob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_files_stay_around_500_lines() -> None:
    long = [
        f"{_name(p)}: {n} lines"
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > FILE_LIMIT and _name(p) not in LONGER
    ]
    assert not long, "split by idea, or give the reason in LONGER:\n" + "\n".join(long)


def test_functions_stay_around_80_lines() -> None:
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                key = f"{_name(path)}:{node.name}"
                if lines > FUNCTION_LIMIT and key not in LONGER:
                    long.append(f"{key}: {lines} lines")
    assert not long, "break into named steps, or give the reason in LONGER:\n" + "\n".join(long)


def test_the_reasons_still_apply() -> None:
    """An entry in LONGER for something now within the limit, or gone, is removed."""
    sizes: dict[str, int] = {}
    for path in _sources():
        sizes[_name(path)] = len(path.read_text().splitlines())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                end = node.end_lineno or node.lineno
                sizes[f"{_name(path)}:{node.name}"] = end - node.lineno + 1
    stale = [
        key for key in LONGER if sizes.get(key, 0) <= (FUNCTION_LIMIT if ":" in key else FILE_LIMIT)
    ]
    assert not stale, stale


SERVICE_IMPORT = re.compile(r"^\s*(from service(\.| import)|import service\b)", re.M)


def test_nothing_imports_the_folder_name() -> None:
    """`service/` is installed as `trainledger` (setup.py `package_dir`): an import of
    `service` works only in a checkout and would load a second copy of every module."""
    roots = ["service", "tests", "bench", "costcore"]
    offenders = [
        _name(p)
        for root in roots
        for p in (REPO / root).rglob("*.py")
        if SERVICE_IMPORT.search(p.read_text())
    ]
    assert not offenders, offenders
    absolute = [
        _name(p)
        for p in (REPO / "service").rglob("*.py")
        if re.search(r"^\s*(from|import) trainledger\b", p.read_text(), re.M)
    ]
    assert not absolute, f"inside service/ imports are relative: {absolute}"
