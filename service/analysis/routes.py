"""`POST /v1/analysis/...`: the design-decision analyses (pure computations; data-strategy and
domain-mix may read their figures from a project's ledger and results: `measured`)."""

from __future__ import annotations

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from ..http.deps import Services
from ..http.security import requires
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
            " and cost of each, the savings and the break-even. Named pilot_experiments are read"
            " from the project, and the answer gains a verdict: which pilot wins on cost per point"
            " on pilot_benchmark, and what scaling it up would take. Nothing is stored."
        ),
        request_example={
            "corpus_tokens": 2000000000000,
            "flat_keep_share": "0.3",
            "upsampling_curve": [
                {"share": "0.1", "repeats": "4", "label": "top"},
                {"share": "0.3", "repeats": "1", "label": "middle"},
                {"share": "0.6", "repeats": "0", "label": "bottom"},
            ],
            "training_cost_per_token": "0.0000005",
            "currency": "USD",
            "scoring_cost_per_token": "0.00000001",
            "scoring_sku": None,
            "flat_tokens_needed": 1200000000000,
            "upsampled_tokens_needed": 1000000000000,
            "unfiltered_tokens_needed": None,
            "pilot_results": [],
            "target_score": None,
            "pilot_token_scale": "1",
            "max_token_repetitions": None,
        },
    )
    async def data_strategy(
        self, data: JSONBody[DataStrategyIn], services: NamedDependency[Services]
    ) -> DataStrategyOut:
        return await data_strategy_answer(services.store, services.rate_cards, data)

    @post(
        "/domain-mix",
        status_code=200,
        summary="Mid-training domain mixes: cost vs score",
        operation_id="postDomainMixAnalysis",
        description=(
            "Prices candidate mid-training domain mixes and sets their cost against their score "
            "(the Pareto front). Mixes named by experiment are read from the project, and the "
            "answer gains a verdict: which wins on cost per point on the target benchmarks, and "
            "what scaling it up would take. Nothing is stored."
        ),
        request_example={
            "mixes": [
                {
                    "name": "general",
                    "scores": {
                        "math": "40",
                        "code": "30",
                        "general_qa": "70",
                        "multiple_choice": "68",
                    },
                    "runs": 1,
                    "cost_per_run": None,
                    "rework_probability": "0.05",
                    "proportions": None,
                },
                {
                    "name": "mathcode",
                    "scores": {
                        "math": "60",
                        "code": "50",
                        "general_qa": "62",
                        "multiple_choice": "62",
                    },
                    "runs": 1,
                    "cost_per_run": "80000",
                    "rework_probability": "0.2",
                    "proportions": {"math": "0.4", "code": "0.3", "general_qa": "0.3"},
                },
                {
                    "name": "heavy",
                    "scores": {
                        "math": "62",
                        "code": "54",
                        "general_qa": "55",
                        "multiple_choice": "57",
                    },
                    "runs": 2,
                    "cost_per_run": None,
                    "rework_probability": "0.6",
                    "proportions": None,
                },
                {
                    "name": "cheap-bad",
                    "scores": {
                        "math": "40",
                        "code": "30",
                        "general_qa": "65",
                        "multiple_choice": "65",
                    },
                    "runs": 1,
                    "cost_per_run": "120000",
                    "rework_probability": "0.05",
                    "proportions": None,
                },
            ],
            "cost_per_run": "100000",
            "rework_cost": "500000",
            "general_floor": "60",
            "currency": "USD",
            "general_domains": ["general_qa", "multiple_choice"],
            "general_score_sd": "0",
            "score_weights": None,
            "pareto_on": "weighted_score",
            "budget": None,
            "min_weighted_score": None,
            "baseline": None,
        },
    )
    async def domain_mix(
        self, data: JSONBody[DomainMixIn], services: NamedDependency[Services]
    ) -> DomainMixOut:
        return await domain_mix_answer(services.store, services.rate_cards, data)

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
        request_example={
            "accelerators": 100,
            "price_per_accelerator_hour": "2",
            "checkpoint_write_seconds": "360",
            "run_hours": "1000",
            "currency": "USD",
            "job_mtbf_hours": None,
            "accelerator_mtbf_hours": "2000",
            "restart_seconds": "180",
            "checkpoint_size_gb": "0",
            "retained_checkpoints": 1,
            "storage_price_per_gb_month": "0",
            "write_cost_per_checkpoint": "0",
            "current_interval_hours": "6",
        },
    )
    async def checkpoint_interval(
        self, data: JSONBody[CheckpointIntervalIn]
    ) -> CheckpointIntervalOut:
        return analyse_checkpoint_interval(data)

    @post(
        "/storage-lifecycle",
        status_code=200,
        summary="Storage cost with and without tiering",
        operation_id="postStorageLifecycleAnalysis",
        description=(
            "Storage cost over a horizon with everything kept in one class, and with data moved to"
            " colder tiers as it ages. A calculator: nothing is stored."
        ),
        request_example={
            "horizon_months": 6,
            "tiers": {
                "hot": {
                    "price_per_gb_month": "0.02",
                    "retrieval_per_gb": "0",
                    "transition_per_gb": "0",
                    "restore_hours": "0",
                },
                "warm": {
                    "price_per_gb_month": "0.01",
                    "retrieval_per_gb": "0.01",
                    "transition_per_gb": "0",
                    "restore_hours": "0",
                },
                "archive": {
                    "price_per_gb_month": "0.002",
                    "retrieval_per_gb": "0.02",
                    "transition_per_gb": "0.01",
                    "restore_hours": "12",
                },
            },
            "classes": [
                {
                    "name": "ckpt",
                    "initial_gb": "1000",
                    "growth_gb_per_month": "500",
                    "warm_after_days": 30,
                    "archive_after_days": 60,
                    "delete_after_days": 120,
                    "reads_gb_per_month": "0",
                }
            ],
            "currency": "USD",
        },
    )
    async def storage_lifecycle(self, data: JSONBody[StorageLifecycleIn]) -> StorageLifecycleOut:
        return analyse_storage_lifecycle(data)
