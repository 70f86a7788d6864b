"""One delivery attempt over HTTP: resolve and check the host, POST, read a little back.

`send` never raises for what the receiver or the network does: every
failure becomes an `Outcome` with an `error` a user can act on, so the
dispatcher records and retries it. Only cancellation propagates.

The request goes to the address `ssrf.resolve` checked, never to a name
resolved again later: the URL carries the IP, the ``Host`` header the
original host, and for https httpx's ``sni_hostname`` extension makes TLS
send and verify the original name. Because the connection pool keys
connections by (scheme, IP, port), an https request also asks the server to
close its connection (``Connection: close``): a TLS session verified for one
host must not be reused for another host that shares its address. Plain
http on a shared address is harmless (``Host`` picks the site) and keeps
its connections alive.

The injected client must not follow redirects (a 3xx is a failure, SPEC §9)
and must not read proxy settings from the environment (the connection must
go to the checked address).
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
import trio

from daemon import __version__
from daemon.clock import utcnow
from daemon.webhooks import ssrf
from daemon.webhooks.models import RESPONSE_BODY_MAX_BYTES
from daemon.webhooks.schedule import parse_retry_after

USER_AGENT = f"docex-webhooks/{__version__}"
# How much of an answer is read at most; the first RESPONSE_BODY_MAX_BYTES are kept for the log.
_READ_LIMIT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to."""

    duration_ms: int
    status_code: int | None = None
    error: str | None = None
    response_body: str | None = None
    retry_after_s: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.error is None and self.status_code is not None and 200 <= self.status_code < 300


def open_client() -> httpx.AsyncClient:
    """The client the dispatcher sends with: no redirects, no proxies from the environment.

    The dispatcher's limiters bound concurrency; the pool only keeps connections alive.
    """
    return httpx.AsyncClient(
        follow_redirects=False,
        trust_env=False,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=30.0),
        headers={"User-Agent": USER_AGENT},
    )


def request_headers(
    *,
    content_type: str,
    delivery_id: str,
    event_type: str,
    timestamp: int,
    signature: str,
    custom: Mapping[str, str],
) -> dict[str, str]:
    """The headers of the seed (§6) plus the endpoint's own; the seed's always win."""
    return {
        **custom,
        "Content-Type": content_type,
        "X-Webhook-Id": delivery_id,
        "X-Webhook-Event": event_type,
        "X-Webhook-Timestamp": str(timestamp),
        "X-Webhook-Signature": signature,
    }


async def send(
    client: httpx.AsyncClient,
    *,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout_s: float,
    allow_private: bool,
) -> Outcome:
    """POST `body` to `url` within `timeout_s` (resolution and reading included).

    Cancellation (other than by the timeout) propagates; nothing else does.
    """
    started = time.perf_counter()
    status: int | None = None
    response_body: str | None = None
    retry_after: float | None = None
    error: str | None = None

    def elapsed_ms() -> int:
        return round((time.perf_counter() - started) * 1000)

    with trio.move_on_after(timeout_s) as deadline:
        try:
            target = httpx.URL(url)
            host = target.raw_host.decode("ascii")
            port = target.port or (443 if target.scheme == "https" else 80)
            ip = await ssrf.resolve(host, port, allow_private=allow_private)
            extensions: dict[str, object] = {}
            sent = {k: v for k, v in headers.items() if k.lower() != "host"}
            sent["Host"] = target.netloc.decode("ascii")
            # What a receiver answers is kept only to show it: never worth unpacking (a
            # 64 KiB gzip answer is 64 MB unpacked, on the loop that serves the API).
            sent["Accept-Encoding"] = "identity"
            if target.scheme == "https":
                extensions["sni_hostname"] = host
                sent["Connection"] = "close"
            request = client.build_request(
                "POST",
                target.copy_with(host=str(ip)),
                content=body,
                headers=sent,
                extensions=extensions,
                timeout=httpx.Timeout(timeout_s),
            )
            response = await client.send(request, stream=True)
            try:
                status = response.status_code
                retry_after = parse_retry_after(response.headers.get("Retry-After"), utcnow())
                if 300 <= status < 400:
                    location = response.headers.get("Location")
                    error = f"HTTP {status}: redirects are not followed"
                    error += f" (Location: {location})" if location else ""
                elif not 200 <= status < 300:
                    error = f"HTTP {status}"
                response_body = await _read_some(response)
            finally:
                await response.aclose()
        except (ssrf.AddressRefused, ssrf.ResolutionFailed) as exc:
            error = str(exc)
        except httpx.TimeoutException:
            error = f"timed out after {elapsed_ms()} ms (WEBHOOK_TIMEOUT_MS is {round(timeout_s * 1000)})"
        except httpx.ConnectError as exc:
            error = f"connection failed: {str(exc) or type(exc).__name__}"
        except httpx.LocalProtocolError:
            # Never its message: it quotes the header it refused, whose value may be a
            # credential (a header stored before values were checked as they are now).
            error = "the request could not be sent as HTTP: a custom header's value is not one HTTP allows"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
            error = f"invalid URL: {exc}"
    if deadline.cancelled_caught and status is None:
        error = f"no answer within {round(timeout_s * 1000)} ms (WEBHOOK_TIMEOUT_MS)"
    return Outcome(
        duration_ms=elapsed_ms(),
        status_code=status,
        error=error,
        response_body=response_body,
        retry_after_s=retry_after,
    )


async def _read_some(response: httpx.Response) -> str:
    """The start of the answer, cut to RESPONSE_BODY_MAX_BYTES (read at most _READ_LIMIT_BYTES),
    a NUL shown as U+FFFD; an answer compressed all the same (we ask for none) is not unpacked."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        return f"({encoding[:40]}-encoded answer, not unpacked)"
    data = bytearray()
    async for chunk in response.aiter_bytes():  # not encoded: checked above
        data += chunk
        if len(data) >= _READ_LIMIT_BYTES:
            break
    # Not final: a character cut in half at the limit is dropped rather than shown as garbage.
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(bytes(data[:RESPONSE_BODY_MAX_BYTES]))
    # PostgreSQL refuses NUL in text: the attempt could not be recorded, and was sent again for ever.
    return text.replace("\x00", "\ufffd")
