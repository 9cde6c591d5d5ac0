"""Sending one request to an address that was checked, never to what a resolver says now
(the pinned half of `service.webhooks.targets`: DNS rebinding has nothing to swap)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from .targets import (
    IPAddress,
    Target,
    UnresolvedTarget,
    UnsafeTarget,
    normalize_host,
    parse_literal,
)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx.Headers
    head: bytes  # the first `read_limit` bytes of the body (or fewer)


async def send_pinned(
    target: Target,
    addresses: Sequence[IPAddress],
    *,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    timeout_s: float,
    ssl_context: ssl.SSLContext,
    read_limit: int = 2048,
) -> Answer:
    """Send one request for `url` (the target's URL, perhaps with more query parameters) to
    the first of `addresses` that accepts a connection, never to anything a resolver says
    now. Redirects are not followed (the transport has no notion of them). Raises httpx
    errors as httpx does; `UnsafeTarget` if `url` is not on the target's origin."""
    request_url = httpx.URL(url)
    same_origin = (
        request_url.scheme == target.scheme
        and (request_url.port or (443 if target.scheme == "https" else 80)) == target.port
        and (
            parse_literal(request_url.host) == target.ip
            if target.ip is not None
            else normalize_host(request_url.raw_host.decode("ascii")) == target.host
        )
    )
    if not same_origin:
        raise UnsafeTarget("the request is not for the checked host")
    if not addresses:
        raise UnresolvedTarget(f"{target.host} has no address to send to")
    host_header = request_url.netloc.decode("ascii")
    extensions: dict[str, object] = {"timeout": httpx.Timeout(timeout_s).as_dict()}
    if target.scheme == "https" and target.ip is None:
        # TLS: SNI and certificate verification for the name, the socket to the address.
        extensions["sni_hostname"] = target.host
    last: httpx.TransportError | None = None
    for addr in addresses:
        pinned = request_url.copy_with(host=addr.compressed)
        request = httpx.Request(
            method,
            pinned,
            headers={**headers, "host": host_header},
            content=body,
            extensions=extensions,
        )
        # A transport per attempt: no pooled connection (opened for another name, or for an
        # address checked earlier) is ever reused, and nothing follows a redirect.
        async with httpx.AsyncHTTPTransport(
            verify=ssl_context, trust_env=False, retries=0
        ) as transport:
            try:
                response = await transport.handle_async_request(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc  # this address is down; the next one (if any) may answer
                continue
            head = b""
            try:
                async for chunk in response.aiter_bytes():
                    head += chunk
                    if len(head) >= read_limit:
                        break
            except (httpx.HTTPError, OSError):
                pass  # it answered; the status says how, whatever the rest of the body
            finally:
                await response.aclose()
            return Answer(response.status_code, response.headers, head[:read_limit])
    assert last is not None
    raise last
