"""Schemathesis over every operation of the served OpenAPI document, against a real
`docex serve` on loopback (issue 12): as an ADMIN, a USER and a USER's API key, valid
and invalid requests alike. No answer may be a 5xx or contradict the document (an
undocumented status, a Content-Type or a body that does not match its schema).

Bounded: `EXAMPLES` per operation, generation mode and principal (public operations
once): about 2,400 requests, ~65 s of CPU, 2 minutes on 2 busy cores. The daemon runs
with `--role api` (no workers, no webhook dispatcher), so nothing it is fed ever leaves
the machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import schemathesis
from e2e_helpers import STARTUP
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = 8
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
PASSWORD = "correct horse 42"
# Hammering would only meet the rate limits; bcrypt at its cheapest keeps logins fast.
CONFIG = """
[auth]
bcrypt_rounds = 4
[rate_limits]
login = "100000/min"
register = "100000/min"
refresh = "100000/min"
schema_convert = "100000/min"
authenticated = "1000000/min"
"""


def _serve(start_daemon: Callable[..., Any], config_file: Callable[[str], Any]) -> str:
    daemon = start_daemon("--role", "api", "--config", str(config_file(CONFIG)))
    deadline = time.monotonic() + STARTUP
    while True:
        try:
            if httpx.get(daemon.url("/api/health"), timeout=2).status_code == 200:
                return str(daemon.url(""))
        except httpx.TransportError:
            pass
        assert daemon.proc.poll() is None and time.monotonic() < deadline, daemon.describe()
        time.sleep(0.05)


def _principals(base: str) -> dict[str, dict[str, str]]:
    """The first account (ADMIN), a second one (USER) and the USER's API key, as headers."""
    def register(email: str) -> str:
        r = httpx.post(f"{base}/api/auth/register", json={"name": "Fuzz", "email": email, "password": PASSWORD})
        assert r.status_code == 201, r.text
        return str(r.json()["accessToken"])

    admin, user = register("admin@example.com"), register("user@example.com")
    r = httpx.post(f"{base}/api/auth/api-keys", json={"name": "fuzz"}, headers={"Authorization": f"Bearer {user}"})
    assert r.status_code == 201, r.text
    return {"admin": {"Authorization": f"Bearer {admin}"}, "user": {"Authorization": f"Bearer {user}"},
            "api-key": {"Authorization": f"Bearer {r.json()['apiKey']}"}}


def _fresh_login(base: str, who: str, headers: dict[str, str]) -> dict[str, str]:
    """Headers that work now: an operation may have logged the session out (logout-all)."""
    if who == "api-key":
        return headers
    r = httpx.post(f"{base}/api/auth/login", json={"email": f"{who}@example.com", "password": PASSWORD})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['accessToken']}"}


def _fuzzer(base: str, operation: Any, mode: GenerationMode, auth: dict[str, str], sent: list[int]) -> Any:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def fuzz(case: Any) -> None:
        # The credential is the principal's, whatever header the case generated.
        case.headers = {**(case.headers or {}), **auth}
        response = case.call(base_url=base, timeout=30)
        sent.append(response.status_code)
        case.validate_response(response, checks=CHECKS)

    return fuzz


def test_no_operation_answers_a_5xx_or_contradicts_the_document(
    start_daemon: Callable[..., Any], config_file: Callable[[str], Any]
) -> None:
    base = _serve(start_daemon, config_file)
    document = httpx.get(f"{base}/api/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    principals = _principals(base)
    failures: list[str] = []
    sent: list[int] = []
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        public = document["paths"][operation.path][operation.method.lower()].get("security") == []
        for who, headers in principals.items():
            if public and who != "admin":
                continue  # the credential changes nothing there
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                try:
                    _fuzzer(base, operation, mode, _fresh_login(base, who, headers), sent)()
                except Unsatisfiable:
                    assert mode is GenerationMode.NEGATIVE  # an operation without inputs has no invalid ones
                except (FailureGroup, AssertionError) as exc:  # one report per operation, principal and mode
                    failures.append(f"{operation.label} as {who} ({mode.value}): {exc}"[:3000])
    elapsed = time.monotonic() - started
    print(f"fuzzed: {len(sent)} requests in {elapsed:.0f}s; {len([s for s in sent if s < 300])} answered 2xx")
    assert not failures, "\n\n".join(failures)
    assert len(sent) > 1000
