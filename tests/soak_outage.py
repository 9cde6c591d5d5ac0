"""Soak command: a real `trainledger serve` whose Valkey is SIGKILLed and restarted under load.

    .venv/bin/python -m tests.soak_outage --seconds 60 --kills 4 --clients 24 [--workers 2]
    .venv/bin/python -m tests.soak_outage --embedded   # serve's own Valkey, which it restarts

Concurrent clients call many endpoints (events, costs, the summary, the UI, metrics,
budgets, webhooks, the FOCUS export, projects, tokens...) in a loop while the Valkey the
service uses is SIGKILLed and restarted on its append-only file (with `--embedded`, serve's
own Valkey is SIGKILLed and serve's supervisor restarts it), again and again. Every
request must end with an HTTP answer: any status but a 5xx other than 503, every 503 with
Retry-After. A request that ended without one (httpx.RemoteProtocolError, ReadError...) is
printed with its endpoint and the phase (Valkey up or down). Exits 1 if any rule broke.
Not run in CI (issue 33 item 7).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from trainledger.storage.embedded import EmbeddedValkey

from tests.conftest import make_admin_token
from tests.system.test_embedded import Serve, the_valkey_of
from tests.system.test_faults import Service, fault_event, put_card

PROJECT = "soak1"


def requests(n: int) -> tuple[str, str, object | None]:
    """The n-th request of a client: (method, path, json body)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    choices: list[tuple[str, str, object | None]] = [
        ("POST", "/v1/events", [fault_event(n * 10 + i, PROJECT, when) for i in range(5)]),
        ("GET", f"/v1/costs?project={PROJECT}", None),
        ("GET", f"/v1/costs/summary?project={PROJECT}", None),
        ("GET", f"/ui/{PROJECT}", None),
        ("GET", "/metrics", None),
        ("GET", f"/v1/budgets?project={PROJECT}", None),
        ("GET", "/v1/webhooks", None),
        ("GET", f"/v1/webhooks/deliveries?project={PROJECT}", None),
        ("GET", "/v1/projects", None),
        ("GET", f"/v1/projects/{PROJECT}", None),
        ("GET", "/v1/tokens", None),
        ("GET", f"/v1/alerts?project={PROJECT}", None),
        ("GET", "/v1/rate-cards", None),
        ("GET", f"/v1/jobs?project={PROJECT}", None),
        ("GET", f"/v1/export/focus?project={PROJECT}", None),
        ("GET", "/readyz", None),
        ("GET", "/healthz", None),
    ]
    return choices[n % len(choices)]


class Soak:
    def __init__(self) -> None:
        self.down = False
        self.statuses: Counter[str] = Counter()
        self.closed: list[str] = []  # requests that ended without an HTTP answer
        self.bad: list[str] = []  # answers that break a rule
        self.refused: Counter[str] = Counter()  # 4xx by endpoint (the soak's own mistakes)
        self.cut: list[str] = []  # streams cut after their head (the client can tell)

    async def client(self, base_url: str, token: str, stop: asyncio.Event, seed: int) -> None:
        n = seed
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as c:
            while not stop.is_set():
                n += 1
                method, path, body = requests(n if seed % 2 else random.randrange(1000))
                phase = "down" if self.down else "up"
                head: httpx.Response | None = None
                try:
                    async with c.stream(method, path, json=body) as r:
                        head = r
                        await r.aread()
                except httpx.TimeoutException as exc:
                    self.bad.append(f"{method} {path} [{phase}]: {type(exc).__name__}")
                except httpx.TransportError as exc:
                    if head is not None:  # a stream cut after its first bytes: detected
                        self.cut.append(f"{method} {path} [{phase}]: {head.status_code} {exc}")
                        self.statuses["cut"] += 1
                        continue
                    self.closed.append(f"{method} {path} [{phase}]: {type(exc).__name__} {exc}")
                    self.statuses[type(exc).__name__] += 1
                else:
                    self.statuses[str(r.status_code)] += 1
                    if 400 <= r.status_code < 500:
                        self.refused[f"{r.status_code} {method} {path.split('?')[0]}"] += 1
                    if r.status_code >= 500 and r.status_code != 503:
                        self.bad.append(
                            f"{method} {path} [{phase}]: {r.status_code} {r.text[:200]}"
                        )
                    if r.status_code == 503 and "retry-after" not in r.headers:
                        self.bad.append(f"{method} {path} [{phase}]: 503 without Retry-After")
                await asyncio.sleep(0.005)


async def main(seconds: float, kills: int, clients: int, workers: int, embedded: bool) -> int:
    for name in ("httpx", "trainledger.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="tl-soak-"))
    soak = Soak()
    current: EmbeddedValkey | None = None
    svc: Service | Serve
    if embedded:  # `serve`'s own Valkey, which its supervisor restarts after a SIGKILL
        svc = Serve(tmp / "d", tmp / "serve.log", "--workers", str(workers))
        await asyncio.to_thread(svc.start)
        token = (tmp / "d" / "admin-token").read_text().strip()
    else:  # an external Valkey, which the soak restarts on its append-only file
        current = EmbeddedValkey(tmp / "valkey")
        url = current.start()
        svc = Service(url, tmp / "data", tmp / "serve.log", workers=workers)
        token = await make_admin_token(url)
        await asyncio.to_thread(svc.start)
    try:
        await put_card(svc.base_url, token)
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(soak.client(svc.base_url, token, stop, i)) for i in range(clients)
        ]
        period = seconds / max(kills, 1)
        for _ in range(kills):
            await asyncio.sleep(period / 2)
            soak.down = True
            if embedded:
                os.kill(the_valkey_of(tmp / "d"), signal.SIGKILL)
            else:
                assert current is not None
                current.kill()
            await asyncio.sleep(period / 2)
            if not embedded:
                current = EmbeddedValkey(tmp / "valkey")
                assert current.start() == url
            soak.down = False
        await asyncio.sleep(2)
        stop.set()
        await asyncio.gather(*tasks)
    finally:
        await asyncio.to_thread(svc.cleanup if isinstance(svc, Serve) else svc.stop)
        if current is not None:
            current.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"answers: {dict(soak.statuses)}")
    print(f"refused: {dict(soak.refused)}")
    for line in soak.cut[:20]:
        print(f"  cut (detected): {line}")
    for line in soak.closed[:50]:
        print(f"  closed: {line}")
    for line in soak.bad[:50]:
        print(f"  bad: {line}")
    print(f"{len(soak.closed)} closed connections, {len(soak.bad)} broken rules")
    return 1 if soak.closed or soak.bad else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--embedded", action="store_true", help="kill serve's own Valkey (it restarts it)"
    )
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.seconds, args.kills, args.clients, args.workers, args.embedded)))
