"""deploy/kubernetes/import-pods.yaml: a CronJob around `trainledger import pods`, checked offline.

The manifest is read with PyYAML and its parts are held against each other and against the
code: the command line is one the CLI's own parser accepts and reads the file the init
container writes, on the volume both mount; the SKU mapping is a ConfigMap key the importer
accepts, and the dry run of the container's very command on tests/data/pods.json prices its
GPU pods with it; the token comes from a Secret, as a file; RBAC lets the job's service
account list pods and nothing more; the pod runs as the image's non-root user.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from trainledger.cli import build_parser, main
from trainledger.importers.common import parse_mapping

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "deploy" / "kubernetes" / "import-pods.yaml"
PODS = ROOT / "tests" / "data" / "pods.json"


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def one(kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents() if d["kind"] == kind]
    return found


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return spec


def container(name: str) -> dict[str, Any]:
    spec = pod_spec()
    (found,) = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name]
    return found


def mounted_file(c: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """(the pod volume that holds `path` in container `c`, the path inside the volume)."""
    for mount in c["volumeMounts"]:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            (volume,) = [v for v in pod_spec()["volumes"] if v["name"] == mount["name"]]
            return volume, path.removeprefix(prefix)
    raise AssertionError(f"{path} is on no volume of container {c['name']}")


def import_args() -> list[str]:
    args = container("import")["args"]
    assert "command" not in container("import"), "the image's entry point is trainledger"
    return [str(a) for a in args]


def test_the_command_line_is_one_the_cli_accepts() -> None:
    args = build_parser().parse_args(import_args())
    assert (args.command, args.import_command) == ("import", "pods")
    assert not args.dry_run and args.token is None, "the token comes from the Secret"


def test_the_import_reads_the_pod_list_the_init_container_writes() -> None:
    lister = container("list-pods")
    script = lister["command"][-1]
    words = shlex.split(script)
    assert words[:2] == ["kubectl", "get"] and "pods" in words
    assert "--all-namespaces" in words or "-A" in words
    assert words[words.index("-o") + 1] == "json"
    written = words[words.index(">") + 1]
    read = build_parser().parse_args(import_args()).file
    assert read == written
    volume, _ = mounted_file(container("import"), read)
    assert mounted_file(lister, written)[0] == volume and "emptyDir" in volume


def test_the_sku_mapping_is_a_config_map_the_importer_accepts() -> None:
    args = build_parser().parse_args(import_args())
    volume, key = mounted_file(container("import"), args.map_file)
    config = one("ConfigMap")
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    mapping = parse_mapping([], json.loads(config["data"][key]))
    assert mapping["NVIDIA-H100-80GB-HBM3"] == "gpu.h100.hour"


def test_the_containers_command_prices_a_real_pod_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container's own arguments, its paths moved here, in a dry run."""
    args = build_parser().parse_args(import_args())
    _, key = mounted_file(container("import"), args.map_file)
    map_file = tmp_path / key
    map_file.write_text(one("ConfigMap")["data"][key])
    argv = [
        str(PODS) if a == args.file else str(map_file) if a == args.map_file else a
        for a in import_args()
    ]
    monkeypatch.setenv("COLUMNS", "200")
    code = main([*argv, "--dry-run"])
    out, err = capsys.readouterr()
    assert "6 records, 2 pods with GPUs counted" in err
    assert "gpu.h100.hour" in out and "gpu.a100.hour" in out
    assert "nvidia.com/mig-1g.10gb" in out  # not in the map: reported, and the run fails
    assert code == 1 and "dry run: nothing posted" in err


def test_the_token_comes_from_a_secret_as_a_file() -> None:
    importer = container("import")
    env = {e["name"]: e for e in importer["env"]}
    for name, entry in env.items():
        assert "secretKeyRef" not in entry.get("valueFrom", {}), f"{name}: a secret in the env"
        if re.search(r"TOKEN|SECRET|KEY", name):
            assert name.endswith("_FILE"), f"{name}: a secret only through a file"
    volume, key = mounted_file(importer, env["TRAINLEDGER_TOKEN_FILE"]["value"])
    assert volume["secret"]["secretName"] == "trainledger-import" and key == "token"
    assert volume["secret"]["defaultMode"] & 0o007 == 0, "not readable by others"
    assert "Secret" not in {d["kind"] for d in documents()}, "made by hand, never committed"
    sources = "\n".join(p.read_text() for p in (ROOT / "service").rglob("*.py"))
    for name in env:
        assert f'"{name}"' in sources, f"{name} is read nowhere in service/"


def test_the_service_account_may_list_pods_and_nothing_more() -> None:
    account = one("ServiceAccount")
    assert pod_spec()["serviceAccountName"] == account["metadata"]["name"]
    binding = one("ClusterRoleBinding")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    role = one("ClusterRole")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]


def test_the_job_runs_as_the_images_user_once_at_a_time() -> None:
    cron = one("CronJob")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert len(cron["spec"]["schedule"].split()) == 5
    security = pod_spec()["securityContext"]
    assert security["runAsNonRoot"] is True
    (user,) = re.findall(r"^USER (\d+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert security["runAsUser"] == int(user)
    for c in pod_spec()["initContainers"] + pod_spec()["containers"]:
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    namespaces = {d["metadata"].get("namespace") for d in documents()} - {None}
    assert namespaces == {"trainledger"}
