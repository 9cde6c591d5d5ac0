"""The deployment files say what docs/operations/docker.md promises, checked offline.

No Docker daemon is needed (CI machines often have none): compose.yaml is read with PyYAML and
the Dockerfile with a small parser of its instructions, and their properties are checked —
the image runs as a numeric non-root user, has a health check against /healthz or /readyz,
runs any `trainledger` command (`docker run … trainledger demo`); the compose stack has a
Redis-protocol server with an append-only file on a named volume, a health check on both
services, and its secrets as files, never as values in the environment. Every variable
compose gives the service is one the service reads. tests/system/test_compose_environment.py
starts `trainledger serve` with that very environment.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from trainledger.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
REDIS_IMAGE = re.compile(r"^(docker\.io/)?(valkey/valkey|redis)[:@]")
SECRET_WORDS = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.IGNORECASE)


def compose() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(document, dict)
    return document


def dockerfile_final_stage() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile's last stage, continuation lines joined."""
    return dockerfile_stages()[-1]


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Each stage of the Dockerfile (from its FROM), as (INSTRUCTION, arguments)."""
    logical: list[str] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    instructions = [tuple(line.split(None, 1)) for line in logical]
    starts = [i for i, (name, _) in enumerate(instructions) if name.upper() == "FROM"]
    return [
        [(name.upper(), args) for name, args in instructions[start:end]]
        for start, end in zip(starts, [*starts[1:], len(instructions)], strict=True)
    ]


def exec_form(args: str) -> list[str]:
    """An instruction's exec form (a JSON array) or its shell form split like a shell."""
    args = args.strip()
    if args.startswith("["):
        value = json.loads(args)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return shlex.split(args)


def the(stage: list[tuple[str, str]], name: str) -> str:
    found = [args for n, args in stage if n == name]
    assert found, f"the image's stage has no {name}"
    return found[-1]  # the last one is the one in force


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    user = the(dockerfile_final_stage(), "USER").split(":")
    assert user[0].isdigit(), "a numeric uid: Kubernetes' runAsNonRoot can check it"
    assert int(user[0]) != 0
    assert len(user) == 1 or int(user[1]) != 0


def test_the_image_checks_its_health_on_the_health_endpoints() -> None:
    check = the(dockerfile_final_stage(), "HEALTHCHECK")
    assert not check.upper().startswith("NONE")
    command = check[check.index("CMD") + len("CMD") :]
    assert re.search(r"http://127\.0\.0\.1:8000/(healthz|readyz)", command), command
    # A bound on each check: a hung server must fail the check, not hang it.
    assert "--timeout=" in check and "timeout=" in command


def test_any_trainledger_command_runs_in_the_image_the_demo_among_them() -> None:
    stage = dockerfile_final_stage()
    entrypoint = exec_form(the(stage, "ENTRYPOINT"))
    assert entrypoint == ["trainledger"]
    # `docker run … trainledger demo` is `trainledger demo`; the default is serve, on every
    # interface of the container, on the port the health check asks.
    parser = build_parser()
    assert parser.parse_known_args(["demo"])[0].command == "demo"
    serve = parser.parse_args(exec_form(the(stage, "CMD")))
    assert (serve.command, serve.host, serve.port) == ("serve", "0.0.0.0", 8000)
    assert "8000" in the(stage, "EXPOSE").split()


def test_the_image_is_built_from_the_sources_and_the_licence_alone() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY .*\bLICENSE\b", dockerfile, re.MULTILINE)
    ignored = set((ROOT / ".dockerignore").read_text().split())
    # Local secrets, data and the virtualenv never reach the build context.
    assert {"secrets", ".trainledger", ".venv", ".git"} <= ignored


def test_the_licence_file_is_the_apache_licence_pyproject_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text.split()) > 1500  # the whole text, not a pointer to it


def redis_service(document: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    found = [
        (name, svc)
        for name, svc in document["services"].items()
        if REDIS_IMAGE.match(svc.get("image", ""))
    ]
    assert len(found) == 1, "one Redis-protocol server"
    return found[0]


def test_compose_runs_the_service_on_a_redis_protocol_server_of_its_own() -> None:
    document = compose()
    name, _ = redis_service(document)
    app = document["services"]["trainledger"]
    url = app["environment"]["TRAINLEDGER_REDIS_URL"]
    assert re.match(rf"^redis://{name}:6379/\d+$", url), url
    assert app["depends_on"][name]["condition"] == "service_healthy"


def test_compose_keeps_the_ledger_in_an_append_only_file_on_a_named_volume() -> None:
    document = compose()
    _, server = redis_service(document)
    command = server["command"]
    args = command if isinstance(command, list) else shlex.split(command)
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] in ("everysec", "always")
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    volumes = [str(v).split(":") for v in server["volumes"]]
    named = [source for source, target, *_ in volumes if target == "/data"]
    assert named and named[0] in document["volumes"], "the server's /data on a named volume"


@pytest.mark.parametrize("service", ["trainledger", "valkey"])
def test_compose_checks_the_health_of_both_services(service: str) -> None:
    check = compose()["services"][service]["healthcheck"]
    test = check["test"]
    assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and len(test) > 1
    assert not check.get("disable", False)
    if service == "trainledger":
        assert re.search(r"/(readyz|healthz)'", " ".join(test))
    else:
        assert "ping" in " ".join(test)


def test_compose_gives_secrets_as_files_never_as_values() -> None:
    document = compose()
    app = document["services"]["trainledger"]
    environment: dict[str, str] = app["environment"]
    assert isinstance(environment, dict), "a mapping: each variable checked by name"
    mounted = {f"/run/secrets/{s if isinstance(s, str) else s['source']}" for s in app["secrets"]}
    for name, value in environment.items():
        if SECRET_WORDS.search(name):
            assert name.endswith("_FILE"), f"{name}: a secret only through a file"
            assert value in mounted, f"{name} names a secret compose mounts"
    assert environment["TRAINLEDGER_ADMIN_TOKEN_FILE"] == "/run/secrets/admin_token"
    assert environment["TRAINLEDGER_SECRET_KEY_FILE"] == "/run/secrets/secret_key"
    for name, secret in document["secrets"].items():
        assert set(secret) == {"file"}, f"secret {name}: read from a file, not the environment"
        assert secret["file"].startswith("./secrets/")
    assert "env_file" not in app
    assert "secrets/" in (ROOT / ".gitignore").read_text().split()


def test_every_variable_compose_sets_is_one_the_service_reads() -> None:
    sources = "\n".join(p.read_text() for p in (ROOT / "service").rglob("*.py"))
    for name in compose()["services"]["trainledger"]["environment"]:
        assert f'"{name}"' in sources, f"{name} is read nowhere in service/"


def test_compose_publishes_the_api_only_and_keeps_valkey_inside() -> None:
    document = compose()
    _, server = redis_service(document)
    assert "ports" not in server
    back = set(server["networks"])
    assert all(document["networks"][n].get("internal") for n in back)
    assert document["services"]["trainledger"]["ports"] == ["127.0.0.1:8000:8000"]


def test_the_schedulers_guide_shows_the_shipped_slurm_wrapper_as_it_is() -> None:
    """docs/guides/schedulers.md quotes deploy/slurm/trainledger-hook.sh whole (no copy that
    drifts), installs that file, and the file exports the PATH it sets."""
    wrapper = (ROOT / "deploy" / "slurm" / "trainledger-hook.sh").read_text()
    guide = (ROOT / "docs" / "guides" / "schedulers.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```$", guide, re.MULTILINE | re.DOTALL)
    assert wrapper in blocks
    assert "install -m 0755 deploy/slurm/trainledger-hook.sh /etc/slurm/" in guide
    assert re.search(r"^export PATH$", wrapper, re.MULTILINE)
