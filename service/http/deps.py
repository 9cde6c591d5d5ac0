"""Dependencies the routes receive, built once per app in the lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from service.config import Settings
from service.domain.catalog import RateCards
from service.domain.folding import Folder
from service.domain.ingest import Ingestor
from service.storage.redis_store import Store
from service.storage.sealing import Sealer


@dataclass
class Services:
    settings: Settings
    store: Store
    rate_cards: RateCards
    ingestor: Ingestor
    folder: Folder | None  # None: a folding process runs beside the workers
    sealer: Sealer  # seals and opens the secrets kept in Redis (webhook URLs and secrets)
