from __future__ import annotations

import msgspec
from litestar import Response, get
from litestar.datastructures import State

import costcore
from service import __version__


class Health(msgspec.Struct):
    status: str
    version: str
    kernel: dict[str, str]


@get("/healthz", exclude_from_auth=True, tags=["health"], summary="Liveness")
async def healthz() -> Health:
    info = {k: str(v) for k, v in costcore.kernel_build_info().items()}
    return Health("ok", __version__, info)


@get("/readyz", exclude_from_auth=True, tags=["health"], summary="Readiness: Redis answers")
async def readyz(state: State) -> Response[dict[str, str]]:
    try:
        await state.services.store.ping()
    except Exception as exc:  # any failure to reach Redis means not ready
        return Response(
            {"status": "unavailable", "redis": type(exc).__name__},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    return Response({"status": "ok", "redis": "ok"})
