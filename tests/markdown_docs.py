"""Reading the project's Markdown: its relative links, its headings and its runnable examples.

Shared by `tests/unit/docs/test_links.py` (links and paths resolve, examples parse) and
`tests/system/test_doc_examples.py` (examples run against a real service).

The example convention (docs/development.md, "Examples that run"): every fenced block whose
info string is `console` is run. In it, a line starting with `$ ` is a command (it continues
on the next lines while its quotes are open or it ends with a backslash); the lines after it,
up to the next command, are the output it must print (stdout and stderr together). `...` in an
output line stands for any text (an id, a time); a line that is only `...` stands for any
number of lines. A command shown without output is checked for its exit status only. Blocks
marked `sh` (or anything else) are illustrations and are not run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WILDCARD = "..."

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_INLINE_CODE = re.compile(r"`[^`]*`")


def doc_files(root: Path = REPO) -> list[Path]:
    """README.md, every page under docs/, and the other Markdown that links into them."""
    files = [root / "README.md", root / "CHANGELOG.md", root / "bench" / "README.md"]
    files += sorted((root / "docs").rglob("*.md"))
    return [f for f in files if f.exists()]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        m = _FENCE.match(line)
        if m and fence is None:
            fence = m.group(2)
            continue
        if m and fence is not None and m.group(2).startswith(fence[0] * len(fence)):
            fence = None
            continue
        if fence is None:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose_lines(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link outside code."""
    out: list[tuple[int, str]] = []
    for number, line in _prose_lines(text):
        for m in _LINK.finditer(_INLINE_CODE.sub("``", line)):
            out.append((number, m.group(1)))
    return out


_REPO_PATH = re.compile(
    r"`((?:service|costcore|tests|bench|docs|openapi)/[A-Za-z0-9_./-]*\.(?:py|pyx|lua|md|json))`"
)


def code_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) of every file of the repository named in inline code, like `service/x.py`."""
    out: list[tuple[int, str]] = []
    for number, line in _prose_lines(text):
        out += [(number, m.group(1)) for m in _REPO_PATH.finditer(line)]
    return out


@dataclass
class Command:
    path: Path
    line: int
    command: str
    expected: list[str] = field(default_factory=list)

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def _complete(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:  # an open quote, or a final backslash
        return False
    return True


def console_examples(path: Path) -> list[Command]:
    """Every command of every `console` block of one file, in order, with its shown output."""
    commands: list[Command] = []
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(2), m.group(3)
        body_start = i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            i += 1
        body = lines[body_start:i]
        i += 1
        if info != "console":
            continue
        j = 0
        current: Command | None = None
        while j < len(body):
            line = body[j]
            if line.startswith("$ "):
                text = line[2:]
                start = body_start + j + 1
                while not _complete(text) and j + 1 < len(body):
                    j += 1
                    text += "\n" + body[j]
                current = Command(path, start, text)
                commands.append(current)
            elif current is not None:
                current.expected.append(line)
            else:
                raise ValueError(f"{path}:{body_start + j + 1}: output before any `$ ` command")
            j += 1
        for command in commands:
            while command.expected and not command.expected[-1].strip():
                command.expected.pop()
    return commands


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Whether the actual lines are the expected ones, `...` standing for any text or lines."""
    expected = [line.rstrip() for line in expected]
    actual = [line.rstrip() for line in actual]
    while actual and not actual[-1]:
        actual.pop()

    def line_matches(pattern: str, text: str) -> bool:
        parts = [re.escape(p) for p in pattern.split(WILDCARD)]
        return re.fullmatch(".*".join(parts), text, flags=re.DOTALL) is not None

    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(expected):
            result = j == len(actual)
        elif expected[i].strip() == WILDCARD:
            result = match(i + 1, j) or (j < len(actual) and match(i, j + 1))
        else:
            result = (
                j < len(actual) and line_matches(expected[i], actual[j]) and match(i + 1, j + 1)
            )
        memo[(i, j)] = result
        return result

    return match(0, 0)
