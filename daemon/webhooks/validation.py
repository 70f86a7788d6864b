"""The rules an endpoint's settings must follow (pure): one message per broken rule,
worded like the rest of the API (``"url must be a URL address"``).

URL: absolute http(s) with a host, no credentials, https unless
``webhooks.allow_http``, and not a literal private, loopback or link-local
address (nor ``localhost``) unless ``webhooks.allow_private_networks``; a
host name is checked again at each attempt, when it is resolved.

Events: non-empty for AUTOMATIC; each a known type, ``*`` or ``prefix.*``.

Custom headers: at most 20; names are HTTP tokens (RFC 9110 §5.6.2) of at most
256 characters; values
printable ASCII (tab allowed, but not first or last), at most 4096 characters; none may be
``Content-Type``, an ``X-Webhook-*`` header, or a header that frames the
request (Host, Content-Length, Transfer-Encoding, Connection, …), in any case.
A credential header's value is shown masked; sent back masked, it keeps the value stored.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

import httpx

from daemon.webhooks import ssrf
from daemon.webhooks.models import MASKED_HEADER_VALUE, MAX_CUSTOM_HEADERS, DeliveryMode, is_credential_header
from daemon.webhooks.routing import valid_pattern

MAX_URL_LENGTH = 2048
MAX_HEADER_VALUE_LENGTH = 4096
# A name is quoted in every message about its header: a 4 MB one made an answer as large.
MAX_HEADER_NAME_LENGTH = 256
# ASCII that RFC 3986 has no place for in a URL (httpx would send it percent-encoded, but the
# endpoint would be listed and shown as given).
_NOT_IN_URLS = re.compile(r'[\x00-\x20"<>\\^`{|}\x7f]')
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(r"[\t\x20-\x7e]*")
# Headers that say how the request is framed or routed: docex sets them, or must not have them.
_FRAMING = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer",
    "expect", "proxy-connection", "proxy-authorization",
})


def url_problems(url: str, *, allow_http: bool, allow_private: bool) -> list[str]:
    """Problems with `url` as a webhook target; empty if it is acceptable."""
    if _NOT_IN_URLS.search(url):
        return ["url must be a URL address (a space, quote, <, >, \\, ^, `, {, | or } is written "
                "percent-encoded, as %20 for a space)"]
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, UnicodeError, ValueError):
        return ["url must be a URL address"]
    if parsed.scheme and parsed.scheme not in ("http", "https"):
        return [f"url must start with https:// (or http:// with webhooks.allow_http), not {parsed.scheme}://"]
    try:
        host = parsed.host
    except (UnicodeError, ValueError):  # an xn-- label IDNA refuses to decode ("xn--ls8h", an emoji)
        return [_NOT_A_HOST]
    if not host or not parsed.is_absolute_url:
        return ["url must be a URL address"]
    problems = []
    if not _reachable_host(parsed.raw_host.decode("ascii", "replace"), host):
        problems.append(_NOT_A_HOST)
    if parsed.port is not None and not 0 < parsed.port < 65536:
        problems.append("url's port must be from 1 to 65535")
    if parsed.scheme == "http" and not allow_http:
        problems.append("url must use https (plain http is off: webhooks.allow_http)")
    if parsed.userinfo:
        problems.append("url must not contain a user name or password (send credentials in customHeaders)")
    if not allow_private and ssrf.literal_refused(host):
        problems.append("url must not point to a private, loopback or link-local address "
                        "(webhooks.allow_private_networks is off)")
    return problems


_NOT_A_HOST = ("url's host must be a host name (labels of letters, digits and hyphens, each at most 63 "
               "characters) or an IP address")


def _reachable_host(raw_host: str, host: str) -> bool:
    """Whether a request can be sent to `host` at all: an IP address, or a DNS name (its
    IDNA form `raw_host`) of at most 253 characters in labels of at most 63 (a URL with a
    space or an overlong label in its host was accepted, and its deliveries failed until
    they died)."""
    if ssrf.parse_ip(host) is not None:
        return True
    name = raw_host[:-1] if raw_host.endswith(".") else raw_host
    return len(name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


# A DNS label as hosts name themselves (underscores are found in the wild: "a_b.example.com").
_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def events_problems(events: Sequence[str], mode: str, known_types: Collection[str]) -> list[str]:
    """Problems with the subscription patterns of an endpoint in delivery `mode`."""
    problems = []
    if mode == DeliveryMode.AUTOMATIC and not events:
        problems.append("events should not be empty (an AUTOMATIC endpoint subscribes through events)")
    for i, pattern in enumerate(events):
        if not valid_pattern(pattern, known_types):
            problems.append(f'events[{i}] must be an event type of the catalog, "*" or a "prefix.*" pattern '
                            f"(got {pattern!r})")
    if len(set(events)) != len(events):
        problems.append("All events's elements must be unique")
    return problems


def header_problems(headers: Mapping[str, str]) -> list[str]:
    """Problems with an endpoint's custom headers."""
    if len(headers) > MAX_CUSTOM_HEADERS:
        return [f"customHeaders must contain no more than {MAX_CUSTOM_HEADERS} headers"]
    problems = []
    seen: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if len(name) > MAX_HEADER_NAME_LENGTH:
            problems.append(f"customHeaders names must be at most {MAX_HEADER_NAME_LENGTH} characters "
                            f"({name[:40]}… has {len(name)})")
            continue
        if not _TOKEN.fullmatch(name):
            problems.append(
                f"customHeaders.{name} must be a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~)")
            continue
        if lower == "content-type":
            problems.append(f"customHeaders.{name} cannot be set: docex sets Content-Type from bodyFormat")
        elif lower.startswith("x-webhook-"):
            problems.append(f"customHeaders.{name} cannot be set: X-Webhook-* headers are docex's own")
        elif lower in _FRAMING:
            problems.append(f"customHeaders.{name} cannot be set: it frames the request, docex sets it")
        if lower in seen:
            problems.append(f"customHeaders.{name} repeats {seen[lower]} (header names are case-insensitive)")
        seen.setdefault(lower, name)
        if not _VALUE.fullmatch(value):
            problems.append(
                f"customHeaders.{name} must be printable ASCII, without CR, LF or other control characters")
        elif value != value.strip(" \t"):
            # RFC 9110 §5.5: a field value has none; httpx refuses to send one that does.
            problems.append(f"customHeaders.{name} must not start or end with a space or tab")
        elif len(value) > MAX_HEADER_VALUE_LENGTH:
            problems.append(
                f"customHeaders.{name} must be shorter than or equal to {MAX_HEADER_VALUE_LENGTH} characters")
    return problems


def with_kept_values(sent: Mapping[str, str], stored: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """`sent`, each credential header sent back masked given the value `stored` for it
    (its name matched in any case); a problem for a masked value with none stored."""
    stored_by_name = {name.lower(): value for name, value in stored.items()}
    headers: dict[str, str] = {}
    problems: list[str] = []
    for name, value in sent.items():
        if value == MASKED_HEADER_VALUE and len(name) <= MAX_HEADER_NAME_LENGTH and is_credential_header(name):
            kept = stored_by_name.get(name.lower())
            if kept is None:
                problems.append(f"customHeaders.{name} is {MASKED_HEADER_VALUE}, which keeps the value stored, and "
                                "this endpoint stores none: send the value")
                continue
            value = kept
        headers[name] = value
    return headers, problems
