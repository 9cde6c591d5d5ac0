"""The design-decision analyses by path segment: pure cost computations, no I/O.

Each analysis has a request Struct (`...In`), a response Struct (`...Out`) and a
pure function `analyse_<name>(req) -> ...Out`, each in its own module:

- `data-strategy` (`data_strategy`): flat quality filtering vs quality-aware upsampling.
- `domain-mix` (`domain_mix`): mid-training domain mixes, expected cost with rework risk and
  the cost/score Pareto front.
- `checkpoint-interval` (`checkpoint_interval`): the checkpoint interval minimising checkpoint
  cost plus expected rework (Young 1974, Daly 2006), with the cost curve around it.
- `storage-lifecycle` (`storage_lifecycle`): storage cost with and without tiering and
  retention rules, and the restore-time trade-off.

What they share: `arithmetic` (exact decimals, formatting, `AnalysisError`) and `schema`
(input string types, and the `Line`, `Savings` and `BreakEven` parts of every answer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from .checkpoint_interval import CheckpointIntervalIn, analyse_checkpoint_interval
from .data_strategy import DataStrategyIn, analyse_data_strategy
from .domain_mix import DomainMixIn, analyse_domain_mix
from .storage_lifecycle import StorageLifecycleIn, analyse_storage_lifecycle

__all__ = ["ANALYSES"]

ANALYSES: dict[str, tuple[type[msgspec.Struct], Callable[[Any], msgspec.Struct]]] = {
    "data-strategy": (DataStrategyIn, analyse_data_strategy),
    "domain-mix": (DomainMixIn, analyse_domain_mix),
    "checkpoint-interval": (CheckpointIntervalIn, analyse_checkpoint_interval),
    "storage-lifecycle": (StorageLifecycleIn, analyse_storage_lifecycle),
}
