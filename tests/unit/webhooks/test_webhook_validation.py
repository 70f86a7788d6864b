"""Endpoint settings rules (daemon.webhooks.validation)."""

from __future__ import annotations

import pytest

from daemon.events import CATALOG
from daemon.webhooks.validation import events_problems, header_problems, url_problems


@pytest.mark.parametrize("url", ["https://example.com/hook", "https://hooks.example.com:8443/a?b=c",
                                 "https://8.8.8.8/x", "https://[2606:4700::1111]/x"])
def test_public_https_urls_are_accepted(url: str) -> None:
    assert url_problems(url, allow_http=False, allow_private=False) == []


@pytest.mark.parametrize(("url", "message"), [
    ("not a url", "url must be a URL address"),
    ("/relative", "url must be a URL address"),
    ("ftp://example.com/x", "url must start with https:// (or http:// with webhooks.allow_http), not ftp://"),
    ("https://", "url must be a URL address"),
    ("http://example.com/x", "url must use https"),
    ("https://user:pw@example.com/x", "must not contain a user name or password"),
    ("https://127.0.0.1/x", "must not point to a private, loopback or link-local address"),
    ("https://[::1]/x", "must not point to a private"),
    ("https://[::ffff:127.0.0.1]/x", "must not point to a private"),
    ("https://10.0.0.8/x", "must not point to a private"),
    ("https://169.254.169.254/latest/meta-data", "must not point to a private"),
    ("https://localhost:8443/x", "must not point to a private"),
    ("https://api.localhost/x", "must not point to a private"),
    # Labels IDNA refuses to decode (an emoji, an empty one): a 500 before.
    ("https://xn--ls8h.la/", "url's host must be a host name"),
    ("http://xn--/", "url's host must be a host name"),
])
def test_bad_urls(url: str, message: str) -> None:
    problems = url_problems(url, allow_http=False, allow_private=False)
    assert any(message in p for p in problems), problems


def test_development_settings_allow_http_and_private_addresses() -> None:
    assert url_problems("http://127.0.0.1:9000/hook", allow_http=True, allow_private=True) == []
    assert url_problems("http://127.0.0.1:9000/hook", allow_http=True, allow_private=False) != []
    assert url_problems("http://127.0.0.1:9000/hook", allow_http=False, allow_private=True) != []


def test_events() -> None:
    assert events_problems(["job.completed", "job_run.*", "*"], "AUTOMATIC", CATALOG) == []
    assert events_problems([], "MANUAL", CATALOG) == []
    assert events_problems([], "AUTOMATIC", CATALOG) == [
        "events should not be empty (an AUTOMATIC endpoint subscribes through events)"]
    assert events_problems(["job.done", "job.*", "job.*"], "AUTOMATIC", CATALOG) == [
        "events[0] must be an event type of the catalog, \"*\" or a \"prefix.*\" pattern (got 'job.done')",
        "All events's elements must be unique",
    ]


def test_headers() -> None:
    assert header_problems({"Authorization": "Bearer abc", "X-Tenant": "42", "User-Agent": "mine"}) == []
    assert header_problems({f"X-H{i}": "v" for i in range(21)}) == [
        "customHeaders must contain no more than 20 headers"]
    assert header_problems({f"X-H{i}": "v" for i in range(20)}) == []


@pytest.mark.parametrize(("headers", "message"), [
    ({"Content-Type": "text/plain"}, "customHeaders.Content-Type cannot be set: docex sets Content-Type"),
    ({"content-TYPE": "text/plain"}, "customHeaders.content-TYPE cannot be set"),
    ({"X-Webhook-Signature": "x"}, "X-Webhook-* headers are docex's own"),
    ({"x-webhook-anything": "x"}, "X-Webhook-* headers are docex's own"),
    ({"Host": "evil.example"}, "customHeaders.Host cannot be set: it frames the request"),
    ({"Transfer-Encoding": "chunked"}, "frames the request"),
    ({"Bad Name": "x"}, "customHeaders.Bad Name must be a valid HTTP header name"),
    ({"X-A:": "x"}, "must be a valid HTTP header name"),
    ({"": "x"}, "must be a valid HTTP header name"),
    ({"X-Inject": "a\r\nX-Evil: 1"}, "customHeaders.X-Inject must be printable ASCII, without CR, LF"),
    ({"X-Lf": "a\nb"}, "without CR, LF"),
    ({"X-Nul": "a\x00"}, "without CR, LF"),
    ({"X-Utf": "café"}, "must be printable ASCII"),
    ({"X-Long": "v" * 4097}, "must be shorter than or equal to 4096 characters"),
    ({"X-" + "n" * 4_000_000: "v"}, "customHeaders names must be at most 256 characters (X-nnnnnnnnnn"),
    ({"X-A": "1", "x-a": "2"}, "customHeaders.x-a repeats X-A"),
])
def test_bad_headers(headers: dict[str, str], message: str) -> None:
    problems = header_problems(headers)
    assert any(message in p for p in problems), problems
    assert all(len(p) < 5000 for p in problems)  # a name is not quoted whole, whatever its length
