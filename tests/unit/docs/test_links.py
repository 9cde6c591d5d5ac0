"""Every relative link in README.md and docs/ resolves, and every anchor names a heading.

Also: every repository file named in inline code (`service/…/x.py`) exists, so a moved module
shows up here rather than as a dead reference; and every `console` example parses (the examples
themselves run in tests/system/test_doc_examples.py).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.markdown_docs import REPO, anchors, code_paths, console_examples, doc_files, links

FILES = doc_files()
# Files the docs name that a run makes, never committed.
GENERATED = {"bench/results/latest.json"}


def ids(files: list[Path]) -> list[str]:
    return [str(f.relative_to(REPO)) for f in files]


def test_the_docs_are_found() -> None:
    names = set(ids(FILES))
    assert {"README.md", "docs/getting-started.md", "docs/development.md"} <= names


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_relative_links_resolve(path: Path) -> None:
    broken: list[str] = []
    for line, target in links(path.read_text()):
        if "://" in target or target.startswith(("mailto:", "<")):
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not destination.exists():
            broken.append(f"line {line}: {target} (no such file)")
            continue
        known = anchors(destination.read_text()) if destination.suffix == ".md" else set()
        if anchor and destination.suffix == ".md" and anchor not in known:
            broken.append(f"line {line}: {target} (no heading #{anchor})")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_named_repository_files_exist(path: Path) -> None:
    missing = [
        f"line {line}: {name}"
        for line, name in code_paths(path.read_text())
        if name not in GENERATED and not (REPO / name).exists()
    ]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_console_examples_parse(path: Path) -> None:
    for command in console_examples(path):
        assert command.command.strip(), command.where()
