"""The alert rules' texts print money as the service does for people: the forecast alert's
description, rendered here by a small interpreter of the Go-template subset it uses (the
actions Prometheus offers: variables, `if eq`, `printf`, `reReplaceAll`), gives the currency's
minor units and grouped thousands, never a raw float."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from iso4217 import Currency

from costcore.money import amount_for_people

RULES = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "trainledger-rules.yaml"
_ACTION = re.compile(r"(\s*)\{\{(-?)\s*(.*?)\s*(-?)\}\}(\s*)", re.S)


def rule(name: str) -> dict[str, object]:
    doc = yaml.safe_load(RULES.read_text())
    (found,) = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name]
    return found


_WORD = re.compile(r'"((?:[^"\\]|\\.)*)"|(\S+)')


def _words(stage: str, env: dict[str, str | float]) -> list[str | float]:
    """A command's words: string literals as they are, variables by their value."""
    return [
        lit if name is None else env[name]
        for lit, name in ((m.group(1), m.group(2)) for m in _WORD.finditer(stage))
    ]


def _pipeline(text: str, env: dict[str, str | float]) -> str:
    value: str | None = None
    for stage in (s.strip() for s in text.split("|")):
        command, _, rest = stage.partition(" ")
        args = _words(rest, env)
        if command == "printf":
            value = str(args[0]) % args[1]
        elif command == "reReplaceAll":
            assert value is not None
            repl = re.sub(r"\$\{(\d+)\}", r"\\g<\1>", str(args[1]))
            value = re.sub(str(args[0]), repl, value)
        else:
            assert not rest, stage
            value = str(env[command])
    assert value is not None
    return value


def render(template: str, env: dict[str, str | float]) -> str:
    """The Go-template subset the rules use, with `{{-`/`-}}` trimming."""
    out: list[str] = []
    taking: list[bool] = []  # per open `if`: whether a branch was taken, and now emitting
    emitting: list[bool] = []
    pos = 0
    for m in _ACTION.finditer(template):
        before, left, action, right, after = m.groups()
        text = template[pos : m.start()] + ("" if left else before)
        if all(emitting):
            out.append(text)
        pos = m.end() - (0 if right else len(after))
        cond = re.fullmatch(r"(?:else )?if eq (\$\S+) (.*)", action)
        if cond:
            hit = env[cond.group(1)] in _words(cond.group(2), env)
            if action.startswith("else"):
                emitting[-1] = hit and not taking[-1]
                taking[-1] = taking[-1] or hit
            else:
                taking.append(hit)
                emitting.append(hit)
        elif action == "else":
            emitting[-1] = not taking[-1]
        elif action == "end":
            taking.pop()
            emitting.pop()
        elif not all(emitting):
            continue
        elif m2 := re.fullmatch(r"(\$\w+) :?= \"(.*)\"", action):
            env[m2.group(1)] = m2.group(2)
        else:
            out.append(_pipeline(action, env))
    out.append(template[pos:])
    return "".join(out)


def _people(value: str, currency: str) -> str:
    """The service's own text for the amount (costcore: "17,719.81 USD")."""
    return amount_for_people(Decimal(value), currency)


@pytest.mark.parametrize(
    ("value", "currency"),
    [
        ("17719.811599524", "USD"),
        ("1234567890.5", "EUR"),
        ("999.994", "USD"),
        ("17719.8", "JPY"),
        ("1234.56789", "KWD"),
        ("12.5", "CLF"),
    ],
)
def test_the_forecast_alert_prints_money_for_people(value: str, currency: str) -> None:
    description = rule("TrainledgerBudgetForecastOverLimit")["annotations"]["description"]  # type: ignore[index]
    text = render(str(description), {"$value": float(value), "$labels.currency": currency})
    shown = _people(value, currency)
    if value not in shown:  # no raw figure ("17719.811599524 USD")
        assert value not in text
    assert f" {shown}, above the amount." in text, text


def test_the_minor_units_named_are_the_iso_table() -> None:
    """Every code the description gives other places than 2 has them in ISO 4217, and every
    ISO code with other places is named."""
    description = str(rule("TrainledgerBudgetForecastOverLimit")["annotations"]["description"])  # type: ignore[index]
    for places in (0, 3, 4):
        iso = {c.code for c in Currency if c.exponent == places}
        for code in iso:
            text = render(description, {"$value": 1.0, "$labels.currency": code})
            assert f" {1:.{places}f} {code}," in text, code
