"""Sending one request to an address that was checked, never to what a resolver says now
(the pinned half of `service.webhooks.targets`: DNS rebinding has nothing to swap)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from ... import __version__
from ..formats.message import OutgoingRequest
from ..targets.checks import (
    AllowList,
    IPAddress,
    Resolver,
    Target,
    UnresolvedTarget,
    UnsafeTarget,
    normalize_host,
    parse_literal,
    resolve_target,
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


def answer_error(answer: Answer) -> str | None:
    """Why an answer is a failed attempt (None: delivered). A 3xx is never followed."""
    status = answer.status
    if 300 <= status < 400:
        where = answer.headers.get("location", "")
        return f"HTTP {status}: redirect not followed" + (f" (to {where})" if where else "")
    if not 200 <= status < 300:
        text = answer.head[:200].decode("utf-8", "replace")
        return f"HTTP {status}: {text}" if text else f"HTTP {status}"
    return None


async def send_checked(
    target: Target,
    request: OutgoingRequest,
    message_id: str,
    *,
    allowlist: AllowList,
    resolver: Resolver | None,
    timeout_s: float,
    ssl_context: ssl.SSLContext,
) -> tuple[int | None, str | None, str | None]:
    """Resolve the target, send the request to a checked address and judge the answer:
    (HTTP status or None, its Retry-After, the error or None when delivered). Errors may
    quote the URL: the caller scrubs its secrets before showing them."""
    headers = dict(request.headers)
    headers.setdefault("webhook-id", message_id)  # the dedup key, in every format
    headers.setdefault("user-agent", f"trainledger-webhooks/{__version__}")
    try:
        # Resolving and sending share one budget, which the lease outlasts.
        async with asyncio.timeout(timeout_s):
            # Looked up again now and every answer checked (DNS rebinding); the send
            # goes to these addresses and nowhere else.
            addresses = await resolve_target(target, allowlist, resolver)
            answer = await send_pinned(
                target,
                addresses,
                method=request.method,
                url=request.url,
                headers=headers,
                body=request.body,
                timeout_s=timeout_s,
                ssl_context=ssl_context,
            )
    except UnsafeTarget as exc:  # nothing was sent
        return None, None, f"target refused: {exc}"
    except UnresolvedTarget as exc:  # nothing was sent
        return None, None, f"target not resolved: {exc}"
    except (httpx.HTTPError, TimeoutError, OSError) as exc:
        return None, None, type(exc).__name__ + (f": {exc}" if str(exc) else "")
    return answer.status, answer.headers.get("retry-after"), answer_error(answer)
