"""What the AI providers share: the prompt, splitting a long document into
chunks that fit the model, merging the chunks' results, and turning HTTP
outcomes into SPEC §6 errorCodes.

Sans-io where it can be: `chunks`, `merge`, `strict_schema` and
`classify_response` are pure; the providers do the I/O around them.

Context length is learnt, not configured: a document is first sent in chunks
of `DEFAULT_CHUNK_CHARS`; when the server answers that the prompt is too
long, the chunk size is halved and the document sent again (down to
`MIN_CHUNK_CHARS`).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import math
import re
import zlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import trio

from daemon import jsonvalues
from daemon.errors import JobError, PermanentJobError, TransientJobError
from daemon.extraction.document import Document
from daemon.extraction.providers.base import ProviderOutput

# About 4 characters a token: 60k tokens of document, room left for the
# schema, the instructions and the answer in a 128k context.
DEFAULT_CHUNK_CHARS = 240_000
MIN_CHUNK_CHARS = 2_000
MAX_OUTPUT_TOKENS = 8192
# An answer is at most MAX_OUTPUT_TOKENS of JSON (some 40 KB) in its envelope, an error a
# page: anything near this is a broken or hostile server, refused unread past it.
MAX_ANSWER_BYTES = 1024 * 1024

INSTRUCTIONS = (
    "You extract data from documents. Read the document text below (pages are marked "
    "'--- page N ---') and fill the JSON schema you are given with the values the document "
    "states. Use the schema's descriptions as hints. Write dates as ISO 8601 (YYYY-MM-DD), "
    "numbers as plain JSON numbers without currency signs or thousands separators, and copy "
    "text values as printed. Arrays of objects are tables: one item per row, in order. "
    "When the document does not state a value, use null (or leave the field out); never invent one."
)


def instructions_with(examples: str) -> str:
    """The system prompt, with the issuer's worked examples after it when there are some."""
    return f"{INSTRUCTIONS}\n\n{examples}" if examples else INSTRUCTIONS


class ContextTooLong(Exception):
    """The server refused the prompt as longer than the model's context."""


def document_text(document: Document) -> list[tuple[int, str]]:
    """(page number, text) per page, cells of a line separated by a tab-like gap."""
    return [(page.number, "\n".join("   ".join(w.text for w in line.words) for line in page.lines))
            for page in document.pages]


def chunks(pages: list[tuple[int, str]], limit: int) -> list[str]:
    """Page-marked text in chunks of at most `limit` characters (a page longer
    than that is cut between lines, or inside a line as a last resort)."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for number, text in pages:
        for piece in _split(f"--- page {number} ---\n{text}\n", limit):
            if size + len(piece) > limit and current:
                out.append("".join(current))
                current, size = [], 0
            current.append(piece)
            size += len(piece)
    if current:
        out.append("".join(current))
    return out or [""]


def _split(text: str, limit: int) -> Iterator[str]:
    if len(text) <= limit:
        yield text
        return
    buffer = ""
    for line in text.splitlines(keepends=True):
        while len(line) > limit:
            if buffer:
                yield buffer
                buffer = ""
            yield line[:limit]
            line = line[limit:]
        if len(buffer) + len(line) > limit:
            yield buffer
            buffer = ""
        buffer += line
    if buffer:
        yield buffer


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from the chunks' results: the first value found for each
    scalar (chunks are in page order), arrays concatenated without repeats,
    objects merged member by member."""
    merged: dict[str, Any] = {}
    for result in results:
        for key, value in result.items():
            if value is None or value == "" or value == []:
                continue
            if key not in merged:
                merged[key] = value
            elif isinstance(merged[key], list) and isinstance(value, list):
                merged[key] = merged[key] + [item for item in value if item not in merged[key]]
            elif isinstance(merged[key], dict) and isinstance(value, dict):
                merged[key] = merge([merged[key], value])
    return merged


def drop_nulls(value: Any) -> Any:
    """Nulls stand for "not in the document": leave those fields out."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value if v is not None]
    return value


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as OpenAI's strict structured output wants it: every object
    closed (``additionalProperties: false``) with all its properties required
    and nullable; keywords it does not support dropped.

    Nullable even where the schema requires a value: strict output must fill
    every property, and a model that may not answer null for a value the
    document lacks invents one. A null is dropped (`drop_nulls`), and a
    required value left out makes the result incomplete (SPEC §7)."""
    node = {k: v for k, v in schema.items() if k not in ("$schema", "format", "title")}
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        properties = {name: _nullable(strict_schema(sub)) for name, sub in (node.get("properties") or {}).items()}
        node["properties"] = properties
        node["required"] = list(properties)
        node["additionalProperties"] = False
    if kind == "array" and isinstance(node.get("items"), dict):
        node["items"] = strict_schema(node["items"])
    if "format" in schema and schema["format"] in ("date", "date-time", "email", "uri"):
        hint = {"date": "ISO 8601 date, YYYY-MM-DD", "date-time": "ISO 8601 date-time",
                "email": "e-mail address", "uri": "URI"}[schema["format"]]
        node["description"] = f"{schema.get('description', '')} ({hint})".strip()
    return node


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    kind = node.get("type")
    if isinstance(kind, str):
        node = {**node, "type": [kind, "null"]}
        if "enum" in node:
            node["enum"] = [*node["enum"], None]
    return node


def parse_json_answer(text: str) -> dict[str, Any]:
    """The JSON object in a model's answer (tolerates code fences and prose around it).

    Raises:
        PermanentJobError: AI_PROVIDER_ERROR when there is no JSON object.
    """
    cleaned = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", cleaned, re.DOTALL)
    if fenced:
        cleaned = fenced.group(1).strip()
    try:
        try:
            value = jsonvalues.loads(cleaned)
        except json.JSONDecodeError:
            start, end = cleaned.find("{"), cleaned.rfind("}")
            try:
                value = jsonvalues.loads(cleaned[start : end + 1]) if 0 <= start < end else None
            except json.JSONDecodeError:
                value = None
    except jsonvalues.NotFinite:
        raise PermanentJobError("AI_PROVIDER_ERROR", "the model's answer has a number JSON cannot carry "
                                "(NaN, Infinity, or beyond a double)") from None
    except RecursionError:
        raise PermanentJobError("AI_PROVIDER_ERROR", "the model's answer is nested too deeply") from None
    if not isinstance(value, dict):
        raise PermanentJobError("AI_PROVIDER_ERROR", "the model's answer is not a JSON object")
    return value


# --- HTTP outcomes ----------------------------------------------------------------

_CONTEXT_ERRORS = re.compile(
    r"context[_ ]length|maximum context|context window|too many tokens|prompt is too long|"
    r"reduce the length|input is too long|exceeds? the (?:model'?s? )?(?:maximum|context)",
    re.IGNORECASE,
)


def retry_after(response: httpx.Response, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``."""
    millis = response.headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = now or dt.datetime.now(dt.UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - now).total_seconds())


async def post(provider: str, client: httpx.AsyncClient, url: str, *, body: dict[str, Any],
               headers: dict[str, str], timeout_s: float, secret: str | None) -> httpx.Response:
    """POST `body` as JSON; the answer, read whole.

    `timeout_s` bounds the whole exchange: httpx's own timeout bounds each read, so a server
    dripping a byte every few seconds held a job, and its worker, for good. The answer is
    at most `MAX_ANSWER_BYTES`, and never unpacked past that (docex asks for none packed:
    2 MB of gzip was 2 GiB in the daemon's memory).

    Raises:
        JobError: AI_PROVIDER_TIMEOUT past the deadline, AI_PROVIDER_ERROR for a connection
            that failed or an answer too large.
    """
    try:
        with trio.fail_after(timeout_s):
            request = client.build_request("POST", url, json=body, timeout=timeout_s,
                                           headers={**headers, "Accept-Encoding": "identity"})
            answer = await client.send(request, stream=True)
            try:
                raw = bytearray()
                async for chunk in answer.aiter_raw():
                    raw += chunk
                    if len(raw) > MAX_ANSWER_BYTES:
                        raise _too_large(provider)
            finally:
                await answer.aclose()
    except trio.TooSlowError:
        raise TransientJobError("AI_PROVIDER_TIMEOUT", f"{provider} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise transport_error(provider, exc, secret) from exc
    encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
    content = bytes(raw) if encoding in ("", "identity") else _unpacked(provider, encoding, bytes(raw))
    kept = [(name, value) for name, value in answer.headers.multi_items()
            if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
    return httpx.Response(answer.status_code, headers=kept, content=content, request=request)


def _unpacked(provider: str, encoding: str, packed: bytes) -> bytes:
    """A gzip or deflate answer sent though docex asked for none, unpacked to at most
    `MAX_ANSWER_BYTES`."""
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise PermanentJobError("AI_PROVIDER_ERROR", f"{provider}: the answer is {encoding[:40]}-encoded, "
                                "which docex does not read")
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 32 if "gzip" in encoding else zlib.MAX_WBITS)
    try:
        content = inflater.decompress(packed, MAX_ANSWER_BYTES + 1)
    except zlib.error as exc:
        raise PermanentJobError("AI_PROVIDER_ERROR", f"{provider}: the answer's {encoding} is broken") from exc
    if len(content) > MAX_ANSWER_BYTES:
        raise _too_large(provider)
    return content


def _too_large(provider: str) -> JobError:
    return PermanentJobError("AI_PROVIDER_ERROR", f"{provider}: the answer is larger than {MAX_ANSWER_BYTES:,} "
                             "bytes, which no extraction needs")


def error_message(response: httpx.Response) -> str:
    """The server's own words about an error, from the usual JSON shapes (cut short by
    `classify_response`, once the key is scrubbed from them)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("message") or error.get("type") or error)
        if isinstance(error, str):
            return error
        if "message" in body:
            return str(body["message"])
    return json.dumps(body)


def classify_response(provider: str, response: httpx.Response, secret: str | None) -> JobError | ContextTooLong | None:
    """None for a 2xx; else the error to raise (the API key scrubbed from any message)."""
    status = response.status_code
    if 200 <= status < 300:
        return None
    # Scrubbed, then cut: cut first, a key at the cut kept all but its last characters.
    message = scrub(error_message(response), secret)[:300].strip()
    where = f"{provider} answered {status}"
    if status == 429:
        return TransientJobError("AI_PROVIDER_RATE_LIMIT", f"{where} (rate limited): {message}",
                                 retry_after_s=retry_after(response))
    if status >= 500 or status == 408:
        return TransientJobError("AI_PROVIDER_ERROR", f"{where}: {message}", retry_after_s=retry_after(response))
    if status in (400, 413, 422) and _CONTEXT_ERRORS.search(message):
        return ContextTooLong(message)
    return PermanentJobError("AI_PROVIDER_ERROR", f"{where}: {message}")


def transport_error(provider: str, exc: httpx.HTTPError, secret: str | None) -> JobError:
    """A timeout or a connection failure as a retryable errorCode."""
    if isinstance(exc, httpx.TimeoutException):
        return TransientJobError("AI_PROVIDER_TIMEOUT", f"{provider} did not answer in time")
    if isinstance(exc, httpx.LocalProtocolError):
        # Never its words: they quote the request's headers, the API key among them.
        return PermanentJobError("AI_PROVIDER_ERROR", f"{provider}: the request could not be sent as HTTP (is the "
                                 "API key one line of printable characters?)")
    return TransientJobError("AI_PROVIDER_ERROR",
                             f"{provider} could not be reached: {scrub(str(exc) or type(exc).__name__, secret)}")


def scrub(text: str, secret: str | None) -> str:
    """`text` without the API key, in any case (a server may echo it lower-cased)."""
    if secret:
        text = re.sub(re.escape(secret), "********", text, flags=re.IGNORECASE)
    return text


def tokens(usage: object, name: str) -> int:
    """A token count from an answer's `usage`, 0 when it is not one (a server's malformed
    usage costs the count, not the result)."""
    value = usage.get(name) if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return 0
    return int(value)


def usage_total(usages: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {"requests": len(usages)}
    for usage in usages:
        for key, value in usage.items():
            total[key] = total.get(key, 0) + value
    return total


Ask = Callable[[str], Awaitable[tuple[dict[str, Any], list[dict[str, int]]]]]


async def ask_in_chunks(provider: str, model: str, document: Document, ask: Ask) -> ProviderOutput:
    """Ask a model about `document` chunk by chunk and merge the answers.

    Starts with chunks of `DEFAULT_CHUNK_CHARS` and halves them whenever the server
    says the prompt is too long. Raises a permanent AI_PROVIDER_ERROR when even one
    page does not fit.
    """
    pages = document_text(document)
    limit = DEFAULT_CHUNK_CHARS
    while True:
        results: list[dict[str, Any]] = []
        usages: list[dict[str, int]] = []
        try:
            for chunk in chunks(pages, limit):
                result, usage = await ask(chunk)
                results.append(result)
                usages.extend(usage)
            break
        except ContextTooLong as exc:
            if limit <= MIN_CHUNK_CHARS:
                raise PermanentJobError(
                    "AI_PROVIDER_ERROR", f"{provider}: the model's context is too small for one page ({exc})"
                ) from exc
            limit = max(MIN_CHUNK_CHARS, limit // 2)
    return ProviderOutput(drop_nulls(merge(results)), model=model, usage=usage_total(usages))
