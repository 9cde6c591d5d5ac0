"""No product code calls one of costcore's plain-Python references: they are the specification
the compiled core is tested against (tests and benchmarks call them), never the product's
path."""

from __future__ import annotations

import ast
from pathlib import Path

import costcore

ROOT = Path(__file__).resolve().parents[3]
REFERENCES = frozenset(name for name in costcore.__all__ if name.endswith("_reference"))


def _uses(tree: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("costcore"):
            if node.module == "costcore.reference":
                found.append("costcore.reference")
            found += [a.name for a in node.names if a.name in REFERENCES]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "costcore.reference"]
        elif isinstance(node, ast.Attribute) and node.attr in REFERENCES:
            found.append(node.attr)
    return found


def test_the_references_are_known() -> None:
    assert {"price_batch_reference", "price_segments_reference"} <= REFERENCES


def test_the_check_finds_a_call() -> None:
    tree = ast.parse(
        "from costcore import price_batch_reference\n"
        "import costcore\ncostcore.price_segments_reference(t, 0, 0, 1)\n"
    )
    assert _uses(tree) == ["price_batch_reference", "price_segments_reference"]


def test_product_code_calls_no_reference() -> None:
    offenders = {
        str(path.relative_to(ROOT)): uses
        for path in sorted((ROOT / "service").rglob("*.py"))
        if (uses := _uses(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}
