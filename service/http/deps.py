"""Dependencies the routes receive, built once per app in the lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Settings
from ..ingest.service import Ingestor
from ..ledger.folding import Folder
from ..ratecards.catalog import RateCards
from ..spend_metrics.service import SpendGauges
from ..storage.sealing import Sealer
from ..stores import Stores


@dataclass
class Services:
    settings: Settings
    store: Stores
    rate_cards: RateCards
    ingestor: Ingestor
    folder: Folder | None  # None: a folding process runs beside the workers
    sealer: Sealer  # seals and opens the secrets kept in Redis (webhook URLs and secrets)
    spend_gauges: SpendGauges  # the spend figures a /metrics scrape with a token shows
