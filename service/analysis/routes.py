"""`POST /v1/analysis/...`: the design-decision analyses (pure computations, no ledger data)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from litestar import Controller, post
from litestar.params import JSONBody

from ..http.problems import invalid
from ..http.security import requires
from .arithmetic import AnalysisError
from .checkpoint_interval import (
    CheckpointIntervalIn,
    CheckpointIntervalOut,
    analyse_checkpoint_interval,
)
from .data_strategy import DataStrategyIn, DataStrategyOut, analyse_data_strategy
from .domain_mix import DomainMixIn, DomainMixOut, analyse_domain_mix
from .storage_lifecycle import (
    StorageLifecycleIn,
    StorageLifecycleOut,
    analyse_storage_lifecycle,
)

In = TypeVar("In")
Out = TypeVar("Out")


def _answer(analyse: Callable[[In], Out], data: In) -> Out:
    """Run an analysis; a request it cannot answer is a 422 naming the field."""
    try:
        return analyse(data)
    except AnalysisError as exc:
        raise invalid(exc.field, exc.reason) from exc


class AnalysisController(Controller):
    path = "/v1/analysis"
    tags = ["analysis"]
    guards = [requires("read")]

    @post(
        "/data-strategy",
        status_code=200,
        summary="Flat filtering vs quality-aware upsampling",
        operation_id="postDataStrategyAnalysis",
        description=(
            "Compares flat quality filtering of a corpus with quality-aware upsampling: the tokens"
            " and cost of each, the savings and the break-even. A calculator: nothing is stored."
        ),
    )
    async def data_strategy(self, data: JSONBody[DataStrategyIn]) -> DataStrategyOut:
        return _answer(analyse_data_strategy, data)

    @post(
        "/domain-mix",
        status_code=200,
        summary="Mid-training domain mixes: cost vs score",
        operation_id="postDomainMixAnalysis",
        description=(
            "Prices candidate mid-training domain mixes and sets their cost against their score "
            "(the Pareto front). A calculator: nothing is stored."
        ),
    )
    async def domain_mix(self, data: JSONBody[DomainMixIn]) -> DomainMixOut:
        return _answer(analyse_domain_mix, data)

    @post(
        "/checkpoint-interval",
        status_code=200,
        summary="Checkpoint interval minimising checkpoint and rework cost (Young/Daly)",
        operation_id="postCheckpointIntervalAnalysis",
        description=(
            "The checkpoint interval that minimises the cost of writing checkpoints plus the "
            "rework lost to failures (Young/Daly), with the cost at that interval. A calculator: "
            "nothing is stored."
        ),
    )
    async def checkpoint_interval(
        self, data: JSONBody[CheckpointIntervalIn]
    ) -> CheckpointIntervalOut:
        return _answer(analyse_checkpoint_interval, data)

    @post(
        "/storage-lifecycle",
        status_code=200,
        summary="Storage cost with and without tiering",
        operation_id="postStorageLifecycleAnalysis",
        description=(
            "Storage cost over a horizon with everything kept in one class, and with data moved to"
            " colder tiers as it ages. A calculator: nothing is stored."
        ),
    )
    async def storage_lifecycle(self, data: JSONBody[StorageLifecycleIn]) -> StorageLifecycleOut:
        return _answer(analyse_storage_lifecycle, data)
