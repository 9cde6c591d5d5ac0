"""Kubernetes pods (`kubectl get pods -o json`) to GPU-hour usage events. Pure: JSON in, events out.

Input: the JSON `kubectl get pods --all-namespaces -o json` prints (a `List`/`PodList` with
`items`), a JSON array of pods, or one pod. Per pod:

* **GPUs**: the sum over `spec.containers[]` of `resources.requests[R]` (else
  `resources.limits[R]`: for extended resources the request defaults to the limit) for every
  resource R named `*/gpu` (`nvidia.com/gpu`, `amd.com/gpu`) or `nvidia.com/mig-*`. Init
  containers are not counted (they run before the pod's containers, usually briefly).
* **Run time**: from `status.startTime` to the latest `state.terminated.finishedAt` of
  `status.containerStatuses[]`, once every container has terminated. A pod still pending or
  running is skipped ("not finished"): import again once it has ended. Succeeded and Failed
  pods both count: they held their GPUs.
* **GPU hours** and **days**: exactly as for Slurm (service/importers/common.py): GPUs × run
  seconds / 3600, cut at 00:00 UTC, one event per pod, resource and day, timed at the slice's
  start.
* **SKU**: the mapping is looked up with the pod's `spec.nodeSelector["nvidia.com/gpu.product"]`
  (the NVIDIA GPU feature discovery label, e.g. `NVIDIA-H100-80GB-HBM3`), then with the resource
  name (`nvidia.com/gpu`). GPU usage with no SKU is reported, never silently dropped.
* **Project**: the namespace, or a pod label (`project_label`), or one fixed project.
  `stage`, `experiment` and `owner` come from the pod labels `trainledger.dev/stage`,
  `trainledger.dev/experiment` and `trainledger.dev/owner` when present.
* **Event ids**: `k8s:<metadata.uid>:<day YYYYMMDD>:<resource>`, stable across re-imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..events.model import STAGES
from .common import (
    ImportEvent,
    ImportResult,
    Skipped,
    clean_label,
    clean_project,
    gpu_hours,
    to_micro_decimal,
    usage_slices,
)

PRODUCT_LABEL = "nvidia.com/gpu.product"
LABEL_PREFIX = "trainledger.dev/"


class PodListError(ValueError):
    """The input is not a pod, a list of pods or a `List` of them."""


def is_gpu_resource(name: str) -> bool:
    return name.endswith("/gpu") or name.startswith("nvidia.com/mig-")


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def pods_of(document: Any) -> list[dict[str, Any]]:
    if isinstance(document, list):
        items: list[Any] = document
    elif isinstance(document, dict) and isinstance(document.get("items"), list):
        items = document["items"]
    elif isinstance(document, dict) and document.get("kind") == "Pod":
        items = [document]
    else:
        raise PodListError(
            "expected `kubectl get pods -o json` output: an object with `items`, "
            "a JSON array of pods, or one pod"
        )
    return [p for p in items if isinstance(p, dict)]


def gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """GPUs per extended-resource name over the pod's (non-init) containers."""
    counts: dict[str, int] = {}
    for container in _list(_dict(pod.get("spec")).get("containers")):
        resources = _dict(_dict(container).get("resources"))
        requests, limits = _dict(resources.get("requests")), _dict(resources.get("limits"))
        for name in {*requests, *limits}:
            if not is_gpu_resource(name):
                continue
            raw = requests.get(name, limits.get(name))
            count = int(str(raw))  # extended resources are whole numbers
            if count > 0:
                counts[name] = counts.get(name, 0) + count
    return counts


def finished_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the last container terminated, or None while any container has not."""
    statuses = _list(_dict(pod.get("status")).get("containerStatuses"))
    if not statuses:
        return None
    ends: list[datetime] = []
    for status in statuses:
        terminated = _dict(_dict(_dict(status).get("state")).get("terminated"))
        end = _time(terminated.get("finishedAt"))
        if end is None:
            return None
        ends.append(end)
    return max(ends)


def import_pods(
    document: Any,
    mapping: Mapping[str, str],
    *,
    project_label: str | None = None,
    project: str | None = None,
) -> ImportResult:
    """Events for the finished GPU pods in a pod list (rules: module docstring)."""
    fixed_project = clean_project(project) if project is not None else None
    if project is not None and fixed_project is None:
        raise ValueError(f"project {project!r} is not a valid project name")
    result = ImportResult()
    seen: set[str] = set()
    for index, pod in enumerate(pods_of(document)):
        result.records += 1
        _import_pod(pod, index, mapping, project_label, fixed_project, seen, result)
    return result


def _import_pod(
    pod: dict[str, Any],
    index: int,
    mapping: Mapping[str, str],
    project_label: str | None,
    fixed_project: str | None,
    seen: set[str],
    result: ImportResult,
) -> None:
    """Count one pod in `result`: as events, or as the reason it has none."""
    meta = _dict(pod.get("metadata"))
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or f"#{index}")
    source = f"{namespace}/{name}"
    labels = {str(k): str(v) for k, v in _dict(meta.get("labels")).items()}
    try:
        gpus = gpu_requests(pod)
        start = _time(_dict(pod.get("status")).get("startTime"))
        end = finished_at(pod)
    except ValueError as exc:
        result.skipped.append(Skipped(source, str(exc)))
        return
    if start is None or end is None:
        result.not_finished += 1
        return
    seconds = int((end - start).total_seconds())
    if not gpus or seconds <= 0:
        result.without_gpus += 1
        return
    if fixed_project is not None:
        project_name: str | None = fixed_project
    elif project_label is not None:
        project_name = clean_project(labels.get(project_label, ""))
    else:
        project_name = clean_project(namespace)
    if project_name is None:
        what = f"label {project_label!r}" if project_label else f"namespace {namespace!r}"
        result.skipped.append(Skipped(source, f"{what} gives no valid project name"))
        return
    stage = labels.get(LABEL_PREFIX + "stage")
    if stage is not None and stage not in STAGES:
        result.warnings.append(f"pod {source}: stage label {stage!r} ignored (not a stage)")
        stage = None
    product = str(_dict(_dict(pod.get("spec")).get("nodeSelector")).get(PRODUCT_LABEL, ""))
    uid = str(meta.get("uid") or f"{namespace}/{name}/{start:%Y%m%dT%H%M%SZ}")
    if uid in seen:  # the same pod twice (lists concatenated): counted once
        result.repeated += 1
        return
    seen.add(uid)
    tags = {"k8s_namespace": namespace, "k8s_pod": name}
    phase = _dict(pod.get("status")).get("phase")
    if isinstance(phase, str) and phase:
        tags["k8s_phase"] = phase
    if product:
        tags["gpu_product"] = product
    counted = False
    for resource, count in sorted(gpus.items()):
        sku = (mapping.get(product) if product else None) or mapping.get(resource)
        if sku is None:
            key = product or resource
            result.add_unmapped(key, to_micro_decimal(gpu_hours(count, seconds)))
            return
        for when, quantity in usage_slices(start, end, count, seconds):
            result.events.append(
                ImportEvent(
                    id=f"k8s:{uid}:{when:%Y%m%d}:{resource}",
                    time=when,
                    project=project_name,
                    sku=sku,
                    quantity=quantity,
                    stage=stage,
                    experiment=clean_label(labels.get(LABEL_PREFIX + "experiment")),
                    owner=clean_label(labels.get(LABEL_PREFIX + "owner")),
                    tags=tags,
                )
            )
            counted = True
    if counted:
        result.counted += 1
