"""`POST /v1/analysis/...`: the design-decision analyses (pure computations; data-strategy and
domain-mix may read their figures from a project's ledger and results: `measured`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from ..http.deps import Services
from ..http.problems import invalid
from ..http.security import requires
from .arithmetic import AnalysisError
from .checkpoint_interval import (
    CheckpointIntervalIn,
    CheckpointIntervalOut,
    analyse_checkpoint_interval,
)
from .data_strategy import DataStrategyIn, DataStrategyOut
from .domain_mix import DomainMixIn, DomainMixOut
from .measured import data_strategy_answer, domain_mix_answer
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


async def _measured_answer(answer: Awaitable[Out]) -> Out:
    """`_answer` for an analysis that may read its figures from the project the body names
    (the guard checked it)."""
    try:
        return await answer
    except AnalysisError as exc:
        raise invalid(exc.field, exc.reason) from exc


class AnalysisController(Controller):
    path = "/v1/analysis"
    tags = ["analysis"]
    guards = [requires("read")]

    @post("/data-strategy", status_code=200, summary="Flat filtering vs quality-aware upsampling")
    async def data_strategy(
        self, data: JSONBody[DataStrategyIn], services: NamedDependency[Services]
    ) -> DataStrategyOut:
        return await _measured_answer(
            data_strategy_answer(services.store, services.rate_cards, data)
        )

    @post("/domain-mix", status_code=200, summary="Mid-training domain mixes: cost vs score")
    async def domain_mix(
        self, data: JSONBody[DomainMixIn], services: NamedDependency[Services]
    ) -> DomainMixOut:
        return await _measured_answer(domain_mix_answer(services.store, services.rate_cards, data))

    @post(
        "/checkpoint-interval",
        status_code=200,
        summary="Checkpoint interval minimising checkpoint and rework cost (Young/Daly)",
    )
    async def checkpoint_interval(
        self, data: JSONBody[CheckpointIntervalIn]
    ) -> CheckpointIntervalOut:
        return _answer(analyse_checkpoint_interval, data)

    @post("/storage-lifecycle", status_code=200, summary="Storage cost with and without tiering")
    async def storage_lifecycle(self, data: JSONBody[StorageLifecycleIn]) -> StorageLifecycleOut:
        return _answer(analyse_storage_lifecycle, data)
