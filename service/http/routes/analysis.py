"""`POST /v1/analysis/...`: the design-decision analyses (pure computations, no ledger data)."""

from __future__ import annotations

from litestar import Controller, post
from litestar.params import JSONBody

from service.domain.analysis import (
    AnalysisError,
    CheckpointIntervalIn,
    CheckpointIntervalOut,
    DataStrategyIn,
    DataStrategyOut,
    DomainMixIn,
    DomainMixOut,
    StorageLifecycleIn,
    StorageLifecycleOut,
    analyse_checkpoint_interval,
    analyse_data_strategy,
    analyse_domain_mix,
    analyse_storage_lifecycle,
)
from service.http.problems import invalid
from service.http.security import requires


class AnalysisController(Controller):
    path = "/v1/analysis"
    tags = ["analysis"]
    guards = [requires("read")]

    @post("/data-strategy", status_code=200, summary="Flat filtering vs quality-aware upsampling")
    async def data_strategy(self, data: JSONBody[DataStrategyIn]) -> DataStrategyOut:
        try:
            return analyse_data_strategy(data)
        except AnalysisError as exc:
            raise invalid(exc.field, exc.reason) from exc

    @post("/domain-mix", status_code=200, summary="Mid-training domain mixes: cost vs score")
    async def domain_mix(self, data: JSONBody[DomainMixIn]) -> DomainMixOut:
        try:
            return analyse_domain_mix(data)
        except AnalysisError as exc:
            raise invalid(exc.field, exc.reason) from exc

    @post(
        "/checkpoint-interval",
        status_code=200,
        summary="Checkpoint interval minimising checkpoint and rework cost (Young/Daly)",
    )
    async def checkpoint_interval(
        self, data: JSONBody[CheckpointIntervalIn]
    ) -> CheckpointIntervalOut:
        try:
            return analyse_checkpoint_interval(data)
        except AnalysisError as exc:
            raise invalid(exc.field, exc.reason) from exc

    @post("/storage-lifecycle", status_code=200, summary="Storage cost with and without tiering")
    async def storage_lifecycle(self, data: JSONBody[StorageLifecycleIn]) -> StorageLifecycleOut:
        try:
            return analyse_storage_lifecycle(data)
        except AnalysisError as exc:
            raise invalid(exc.field, exc.reason) from exc
