"""Every command and every option of `trainledger` says what it is for in `--help`: the test
walks the whole parser (the demo's own options too) and names each one without help."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from trainledger.cli import build_parser
from trainledger.cli import demo as demo_cli


def _subparsers(
    parser: argparse.ArgumentParser,
) -> Iterator[argparse._SubParsersAction[argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def missing_help(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if not helped.get(name):
                    yield f"{path} {name}"
                yield from missing_help(sub, f"{path} {name}")
            continue
        if not action.help or action.help == argparse.SUPPRESS:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


def test_every_command_and_option_has_help() -> None:
    assert list(missing_help(build_parser(), "trainledger")) == []


def test_every_option_of_the_demo_has_help() -> None:
    parser = argparse.ArgumentParser(prog="trainledger demo")
    demo_cli.add_arguments(parser)
    assert list(missing_help(parser, "trainledger demo")) == []


def test_the_walk_finds_an_option_without_help() -> None:
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers()
    run = sub.add_parser("run", help="runs")
    run.add_argument("--fast")
    sub.add_parser("quiet")
    assert list(missing_help(parser, "x")) == ["x run --fast", "x quiet"]
