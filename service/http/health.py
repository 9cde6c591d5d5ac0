from __future__ import annotations

import asyncio
import time

import msgspec
from litestar import Response, get
from litestar.datastructures import State

import costcore

from .. import __version__
from ..stores import Stores
from .problems import problem


class Health(msgspec.Struct):
    """Answer of `GET /healthz`: the status, the version and how the pricing kernel was built."""

    status: str
    version: str
    kernel: dict[str, str]


class StoreReachability:
    """When this worker last reached Redis: a background task pings it about once a second.

    `/healthz` (liveness) fails once that was longer ago than `limit_seconds` (0: never), so
    an orchestrator restarts a service whose store stays away, while `/readyz` (readiness)
    answers 503 from the first failed ping."""

    def __init__(self, store: Stores, limit_seconds: float) -> None:
        self.store = store
        self.limit_seconds = limit_seconds
        self.last_reached = time.monotonic()
        self.interval = min(1.0, limit_seconds / 4) if limit_seconds > 0 else 1.0

    def unreachable_for(self) -> float:
        return max(0.0, time.monotonic() - self.last_reached)

    def alive(self) -> bool:
        return self.limit_seconds <= 0 or self.unreachable_for() <= self.limit_seconds

    async def probe(self) -> bool:
        try:
            await asyncio.wait_for(self.store.connection.ping(), timeout=max(self.interval, 0.5))
        except Exception:  # any failure to reach Redis counts as down
            return False
        self.last_reached = time.monotonic()
        return True

    async def check_ready(self) -> None:
        """Ping Redis once, now; raises what reaching it raised. An answer counts as reached."""
        await self.store.connection.ping()
        self.last_reached = time.monotonic()

    async def run(self) -> None:
        while True:
            await self.probe()
            await asyncio.sleep(self.interval)


@get(
    "/healthz",
    exclude_from_auth=True,
    tags=["health"],
    summary="Liveness",
    operation_id="getHealthz",
    description=(
        "Liveness for an orchestrator: 200 while the process works and its Redis answered within "
        "`TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS`, 503 after that (restart the process). No token"
        " needed."
    ),
)
async def healthz(state: State) -> Health:
    """200 while the process works and its Redis was reachable within
    `TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS`; 503 after that (restart me)."""
    reach: StoreReachability | None = state.get("store_reachability")
    # Past the limit, one more ping first: the store may have come back since the last probe.
    if reach is not None and not reach.alive() and not await reach.probe():
        raise problem(
            503,
            "Storage unreachable",
            f"the ledger's Redis has not answered for {reach.unreachable_for():.0f} s "
            f"(TRAINLEDGER_HEALTHZ_UNREACHABLE_SECONDS is {reach.limit_seconds})",
            kind="storage-unreachable",
            headers={"Retry-After": "1"},
        )
    info = {k: str(v) for k, v in costcore.kernel_build_info().items()}
    return Health("ok", __version__, info)


@get(
    "/readyz",
    exclude_from_auth=True,
    tags=["health"],
    summary="Readiness: Redis answers",
    operation_id="getReadyz",
    description=(
        "Readiness for a load balancer: 200 when the ledger's Redis answers a ping now, 503 when "
        "it does not (send traffic elsewhere for a while). No token needed."
    ),
)
async def readyz(state: State) -> Response[dict[str, str]]:
    reach: StoreReachability | None = state.get("store_reachability")
    if reach is None:  # an app without the background probe: a fresh one, for this ping
        reach = StoreReachability(state.services.store, 0)
    try:
        await reach.check_ready()
    except Exception as exc:  # any failure to reach Redis means not ready
        return Response(
            {"status": "unavailable", "redis": type(exc).__name__},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    return Response({"status": "ok", "redis": "ok"})
