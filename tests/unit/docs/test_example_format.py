"""The rules by which a doc example is read and its output compared (tests/markdown_docs.py)."""

from __future__ import annotations

from pathlib import Path

from tests.markdown_docs import console_examples, output_matches


def test_wildcards_stand_for_text_in_a_line_and_for_whole_lines() -> None:
    assert output_matches(['{"id":"wh_...","ok":true}'], ['{"id":"wh_5100e66c","ok":true}'])
    assert not output_matches(['{"id":"wh_...","ok":true}'], ['{"id":"wh_1","ok":false}'])
    assert output_matches(["first", "...", "last"], ["first", "a", "b", "last"])
    assert output_matches(["first", "...", "last"], ["first", "last"])
    assert not output_matches(["first", "last"], ["first", "extra", "last"])
    assert output_matches(["table   "], ["table", ""])  # trailing blanks do not count


def test_a_command_continues_while_a_quote_is_open_or_a_line_ends_with_a_backslash(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n"
        "$ curl -s -d '{\n"
        '  "a": 1}\'\n'
        '{"ok":true}\n'
        "$ echo one \\\n"
        "  two\n"
        "one two\n"
        "```\n"
        "```sh\n"
        "not run\n"
        "```\n"
    )
    first, second = console_examples(page)
    assert first.command == "curl -s -d '{\n  \"a\": 1}'" and first.expected == ['{"ok":true}']
    assert second.command == "echo one \\\n  two" and second.expected == ["one two"]
