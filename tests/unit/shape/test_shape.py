"""The codebase keeps the shape docs/development.md describes (issue 16).

Files stay around 500 lines, functions around 80: a file or function past the limit is listed
in `LONGER` with the reason its one idea needs the room, so growing past the limit is a
decision someone wrote down, not drift. That holds for the Python of `service/` and
`costcore/`, for the Cython of `costcore/` (`.pyx`, `.pxd`, `.pxi`: a `def`, `cdef` or
`cpdef` function runs to the last line indented under it) and for the Lua scripts of
`service/` (a `function` or `local function` runs to the `end` at its own indentation; a
script without functions is held to the file limit). And the code imports itself by the
product's name: inside `service/` imports are relative, outside it they name `trainledger`;
nothing imports a package called `service`.

Import direction (features, stores, routes) is checked by import-linter (`lint-imports`, in
`python3 dev.py check`), with the contracts in pyproject.toml.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FILE_LIMIT = 500
FUNCTION_LIMIT = 80
SUFFIXES = (".py", ".pyx", ".pxd", ".pxi", ".lua")

# path (or path:function) -> why its one idea needs more room.
LONGER: dict[str, str] = {}

# A Cython function's first line: `def`, `cdef` or `cpdef`, then a name and "(" before any
# "=" (so `cdef int[::1] codes = codes_arr` is a variable; `cdef class`, `cdef extern`,
# `cdef enum` have no "(" before their ":").
CYTHON_FUNCTION = re.compile(r"^(?P<indent>\s*)(?:async\s+)?c?p?def\s+[^=(]*?\b(?P<name>\w+)\s*\(")
LUA_FUNCTION = re.compile(r"^(?P<indent>\s*)(?:local\s+)?function\s+(?P<name>[\w.:]+)\s*\(")


def _sources() -> list[Path]:
    found = [
        p
        for root, pattern in (("service", "**/*"), ("costcore", "*"))
        for p in (REPO / root).glob(pattern)
        if p.suffix in SUFFIXES and p.is_file()
    ]
    return sorted(found)


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _python_functions(text: str) -> Iterator[tuple[str, int]]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, (node.end_lineno or node.lineno) - node.lineno + 1


def _cython_functions(text: str) -> Iterator[tuple[str, int]]:
    """Each function's lines: from its `def` to the last line indented deeper than it, after
    its signature (which may close with `):` at the `def`'s own indentation)."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        match = CYTHON_FUNCTION.match(line)
        if not match:
            continue
        indent, body = len(match["indent"]), start
        depth = line.count("(") - line.count(")")
        while depth > 0 and body + 1 < len(lines):  # the signature's other lines
            body += 1
            depth += lines[body].count("(") - lines[body].count(")")
        if not lines[body].split("#")[0].rstrip().endswith(":"):
            continue  # a declaration (a .pxd's, an extern's): no body
        last = body
        for number in range(body + 1, len(lines)):
            stripped = lines[number].strip()
            if not stripped:
                continue
            if _indent(lines[number]) <= indent:
                break
            last = number
        yield match["name"], last - start + 1


def _lua_functions(text: str) -> Iterator[tuple[str, int]]:
    """Each function's lines: from `function` to the `end` at its own indentation."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        match = LUA_FUNCTION.match(line)
        if not match:
            continue
        indent = len(match["indent"])
        end = next(
            (
                number
                for number in range(start + 1, len(lines))
                if _indent(lines[number]) == indent and re.match(r"end\b", lines[number].strip())
            ),
            len(lines) - 1,
        )
        yield match["name"], end - start + 1


def _functions(path: Path) -> Iterator[tuple[str, int]]:
    text = path.read_text()
    if path.suffix == ".py":
        return _python_functions(text)
    if path.suffix == ".lua":
        return _lua_functions(text)
    return _cython_functions(text)


def _sizes() -> dict[str, int]:
    """Lines of every source file (`path`) and of every function in one (`path:function`)."""
    sizes: dict[str, int] = {}
    for path in _sources():
        sizes[_name(path)] = len(path.read_text().splitlines())
        for function, lines in _functions(path):
            key = f"{_name(path)}:{function}"
            sizes[key] = max(lines, sizes.get(key, 0))
    return sizes


def test_every_kind_of_source_is_measured() -> None:
    """The Cython core and the Lua scripts are read, and their functions found."""
    names = {_name(p) for p in _sources()}
    for suffix in (".py", ".pyx", ".lua"):
        assert any(name.endswith(suffix) for name in names), suffix
    sizes = _sizes()
    assert "costcore/_kernel.pyx:price_batch" in sizes
    assert "service/storage/scripts/apply_increments.lua:apply_increments" in sizes


def test_the_cython_and_lua_readers_find_each_function_s_end() -> None:
    cython = (
        "cdef int[::1] codes = codes_arr\n"
        "cdef extern from *:\n"
        "    int tl_add(long a, long b) nogil\n"
        "cdef int _ok(\n"
        "    long a,\n"
        ") noexcept nogil:\n"
        "    if a:\n"
        "\n"
        "        return 1\n"
        "    return 0\n"
        "\n"
        "cdef class Sums:\n"
        "    def add(self, entry):\n"
        "        pass\n"
    )
    assert dict(_cython_functions(cython)) == {"_ok": 7, "add": 2}
    lua = "local function lt(a, b)\n  if a then\n    return 1\n  end\nend\nreturn lt(1, 2)\n"
    assert dict(_lua_functions(lua)) == {"lt": 5}


def test_files_stay_around_500_lines() -> None:
    long = [
        f"{key}: {n} lines"
        for key, n in _sizes().items()
        if ":" not in key and n > FILE_LIMIT and key not in LONGER
    ]
    assert not long, "split by idea, or give the reason in LONGER:\n" + "\n".join(long)


def test_functions_stay_around_80_lines() -> None:
    long = [
        f"{key}: {n} lines"
        for key, n in _sizes().items()
        if ":" in key and n > FUNCTION_LIMIT and key not in LONGER
    ]
    assert not long, "break into named steps, or give the reason in LONGER:\n" + "\n".join(long)


def test_the_reasons_still_apply() -> None:
    """An entry in LONGER for something now within the limit, or gone, is removed."""
    sizes = _sizes()
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
