"""Every feature's store, built on one shared connection: the wiring, not a store itself.

A use case that spans features (ingest reads the project's settings and budgets, and
writes dead letters) receives `Stores` and asks each feature's store for its part.
"""

from __future__ import annotations

from dataclasses import dataclass

from .auth.store import TokenStore
from .bills.store import BillStore
from .budgets.store import BudgetStore
from .evaluations.store import EvaluationStore
from .ingest.rejected_store import RejectedStore
from .ingest.store import IngestStore
from .jobs.store import JobStore
from .ledger.store import LedgerStore
from .plans.store import PlanStore
from .projects.store import ProjectStore
from .ratecards.store import RateCardStore
from .storage.connection import Connection
from .waste.store import WasteStore
from .webhooks.store import WebhookStore


@dataclass(frozen=True)
class Stores:
    connection: Connection
    projects: ProjectStore
    ratecards: RateCardStore
    tokens: TokenStore
    ingest: IngestStore
    ledger: LedgerStore
    budgets: BudgetStore
    plans: PlanStore
    waste: WasteStore
    rejected: RejectedStore
    webhooks: WebhookStore
    evaluations: EvaluationStore
    jobs: JobStore
    bills: BillStore

    @classmethod
    def on(cls, connection: Connection) -> Stores:
        projects = ProjectStore(connection)
        ratecards = RateCardStore(connection)
        return cls(
            connection=connection,
            projects=projects,
            ratecards=ratecards,
            tokens=TokenStore(connection),
            ingest=IngestStore(connection, ratecards),
            ledger=LedgerStore(connection),
            budgets=BudgetStore(connection, projects),
            plans=PlanStore(connection, projects),
            waste=WasteStore(connection, projects),
            rejected=RejectedStore(connection, projects),
            webhooks=WebhookStore(connection),
            evaluations=EvaluationStore(connection, projects),
            jobs=JobStore(connection),
            bills=BillStore(connection),
        )

    @classmethod
    def from_url(cls, url: str, max_connections: int = 64) -> Stores:
        return cls.on(Connection.from_url(url, max_connections))

    async def close(self) -> None:
        await self.connection.close()
