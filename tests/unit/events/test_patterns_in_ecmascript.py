"""Every `pattern` of the checked-in OpenAPI spec means the same to an ECMA-262 engine (what
JSON Schema names, with the `u` flag as validators such as ajv use it) as to Python's `re`,
which the service checks with: a pattern written with a Python-only escape (`\\U000e0000`)
failed or meant something else to every JavaScript validator and generated client."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

SPEC = Path(__file__).resolve().parents[3] / "openapi" / "openapi.json"

# Texts each pattern is tried on: plain, the characters the label rule refuses, digits,
# times, decimals.
SAMPLES = [
    "",
    "pretrain",
    "a b",
    "7b-base",
    "x\u200by",
    "x\ufeffy",
    "x\U000e0041y",
    "x\u3164y",
    "e\u0301\u0301\u0301\u0301",
    "e\u0301",
    "\U0001f600 emoji",
    "12.50",
    "-3",
    "1e5",
    "2026-12-03T10:00:00Z",
    "2026-12-03",
    "a\n",
]

_NODE = """
const {patterns, samples} = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = patterns.map(p => {
  try { const re = new RegExp(p, "u"); return samples.map(s => re.test(s)); }
  catch (e) { return String(e); }
});
process.stdout.write(JSON.stringify(out));
"""


def _patterns(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                found.add(value)
            else:
                found |= _patterns(value)
    elif isinstance(node, list):
        for value in node:
            found |= _patterns(value)
    return found


def test_every_spec_pattern_reads_alike_in_python_and_ecmascript() -> None:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is missing: CI machines have it")
        pytest.skip("node is not installed")
    patterns = sorted(_patterns(json.loads(SPEC.read_text())))
    assert patterns, "the spec holds no pattern: the test would check nothing"
    run = subprocess.run(
        [node, "-e", _NODE],
        input=json.dumps({"patterns": patterns, "samples": SAMPLES}),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    answers = json.loads(run.stdout)
    for pattern, ecma in zip(patterns, answers, strict=True):
        assert not isinstance(ecma, str), f"{pattern!r} does not compile in ECMA-262: {ecma}"
        # Python's `re.search`, as JSON Schema's `pattern` (not anchored unless it says so).
        python = [re.search(pattern, s) is not None for s in SAMPLES]
        differ = [s for s, a, b in zip(SAMPLES, python, ecma, strict=True) if a != b]
        assert not differ, f"{pattern!r} reads differently in ECMA-262 on {differ!r}"
