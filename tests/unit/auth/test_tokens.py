"""daemon/auth/tokens.py: access JWTs, refresh tokens and API keys (pure functions, SPEC §4)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
import string

import jwt
import pytest

from daemon.auth import tokens
from daemon.errors import Unauthorized

SECRET = "s3cret-" + "x" * 64  # long enough for HS512 too (pyjwt warns below 64 bytes, and warnings are errors)
# In the past, so that nothing here depends on how pyjwt treats the wall clock; see
# test_validity_does_not_depend_on_the_wall_clock for that.
NOW = dt.datetime(2021, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
BASE62 = set(string.digits + string.ascii_letters)


def issue(**overrides: object) -> str:
    args: dict[str, object] = dict(user_id="u1", role="USER", session_id="s1", now=NOW, ttl_s=900)
    args.update(overrides)
    return tokens.issue_access_token(SECRET, **args)  # type: ignore[arg-type]


def b64(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def claims(**overrides: object) -> dict[str, object]:
    ts = int(NOW.timestamp())
    base: dict[str, object] = {"sub": "u1", "role": "USER", "sid": "s1", "iat": ts, "exp": ts + 900, "typ": "access"}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


# --- access tokens ---------------------------------------------------------------------

def test_issue_and_verify_round_trip() -> None:
    token = issue(user_id="user-42", role="ADMIN", session_id="sess-7")
    got = tokens.verify_access_token(SECRET, token, NOW + dt.timedelta(seconds=1))
    assert got.user_id == "user-42"
    assert got.role == "ADMIN"
    assert got.session_id == "sess-7"
    assert got.expires_at == NOW + dt.timedelta(seconds=900)


def test_issued_token_is_hs256_with_the_spec_claims() -> None:
    token = issue(ttl_s=60)
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "HS256"
    body = jwt.decode(token, options={"verify_signature": False})
    ts = int(NOW.timestamp())
    assert body == {"sub": "u1", "role": "USER", "sid": "s1", "iat": ts, "exp": ts + 60, "typ": "access"}


def test_expiry_is_decided_by_now_not_the_wall_clock() -> None:
    # Issued in 2021 with a 10 s lifetime: long expired by the wall clock, but `now` decides.
    token = issue(ttl_s=10)
    assert tokens.verify_access_token(SECRET, token, NOW + dt.timedelta(seconds=9)).session_id == "s1"
    with pytest.raises(Unauthorized):
        tokens.verify_access_token(SECRET, token, NOW + dt.timedelta(seconds=10))
    with pytest.raises(Unauthorized):
        tokens.verify_access_token(SECRET, token, NOW + dt.timedelta(days=1))
    # An old token checked at its own time is still fine: nothing reads the real clock.
    old_now = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
    old = issue(now=old_now, ttl_s=10)
    assert tokens.verify_access_token(SECRET, old, old_now + dt.timedelta(seconds=5)).user_id == "u1"


def test_validity_does_not_depend_on_the_wall_clock() -> None:
    """`now` is passed in (the module is pure): a token issued by a process whose clock runs
    ahead of this one's (another machine sharing the database) is judged by `now` alone.
    pyjwt's own `iat` check against the real clock must not refuse it."""
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
    token = issue(now=ahead, ttl_s=900)
    assert tokens.verify_access_token(SECRET, token, ahead + dt.timedelta(seconds=1)).user_id == "u1"
    future = dt.datetime(2040, 1, 1, tzinfo=dt.UTC)
    token = issue(now=future, ttl_s=900)
    assert tokens.verify_access_token(SECRET, token, future + dt.timedelta(seconds=1)).user_id == "u1"


def test_wrong_secret_is_rejected() -> None:
    token = issue()
    with pytest.raises(Unauthorized) as info:
        tokens.verify_access_token("another-secret-" + "y" * 32, token, NOW)
    assert info.value.status == 401


def test_alg_none_is_rejected() -> None:
    unsigned = f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims())}."
    with pytest.raises(Unauthorized):
        tokens.verify_access_token(SECRET, unsigned, NOW)
    # Same with a "signature" tacked on.
    with pytest.raises(Unauthorized):
        tokens.verify_access_token(SECRET, unsigned + "AAAA", NOW)


def test_algorithm_is_pinned_to_hs256() -> None:
    other_alg = jwt.encode(claims(), SECRET, algorithm="HS512")
    with pytest.raises(Unauthorized):
        tokens.verify_access_token(SECRET, other_alg, NOW)


def test_token_of_another_type_is_rejected() -> None:
    for typ in ("refresh", "ACCESS", "", None):
        forged = jwt.encode(claims(typ=typ), SECRET, algorithm="HS256")
        with pytest.raises(Unauthorized):
            tokens.verify_access_token(SECRET, forged, NOW)


@pytest.mark.parametrize("missing", ["sub", "sid", "exp", "iat", "typ"])
def test_token_missing_a_required_claim_is_rejected(missing: str) -> None:
    body = claims()
    del body[missing]
    with pytest.raises(Unauthorized):
        tokens.verify_access_token(SECRET, jwt.encode(body, SECRET, algorithm="HS256"), NOW)


def test_a_control_token_forged_like_the_rejected_ones_is_accepted() -> None:
    # Makes sure the rejections above are about the one thing each one changes.
    forged = jwt.encode(claims(), SECRET, algorithm="HS256")
    assert tokens.verify_access_token(SECRET, forged, NOW).user_id == "u1"


@pytest.mark.parametrize("garbage", ["", "a.b.c", "not-a-jwt", "x" * 500, "....", "eyJ.eyJ.sig"])
def test_garbage_is_rejected_with_unauthorized(garbage: str) -> None:
    with pytest.raises(Unauthorized):
        tokens.verify_access_token(SECRET, garbage, NOW)


def test_looks_like_jwt_tells_jwts_from_api_keys() -> None:
    assert tokens.looks_like_jwt(issue())
    assert not tokens.looks_like_jwt(tokens.new_api_key("dx_live_"))
    assert not tokens.looks_like_jwt(tokens.new_refresh_token())


# --- refresh tokens --------------------------------------------------------------------

def test_refresh_tokens_carry_256_bits_and_are_distinct() -> None:
    made = {tokens.new_refresh_token() for _ in range(1000)}
    assert len(made) == 1000
    for token in list(made)[:50]:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        assert len(raw) == 32
        assert re.fullmatch(r"[A-Za-z0-9_\-]+", token)


# --- API keys --------------------------------------------------------------------------

def test_api_key_is_prefix_plus_43_base62_characters() -> None:
    for prefix in ("dx_live_", "acme_test_", "x"):
        key = tokens.new_api_key(prefix)
        assert key.startswith(prefix)
        rest = key[len(prefix):]
        assert len(rest) == 43
        assert set(rest) <= BASE62


def test_api_keys_are_distinct_and_carry_256_random_bits() -> None:
    keys = [tokens.new_api_key("dx_live_") for _ in range(1000)]
    assert len(set(keys)) == 1000
    bodies = [k[len("dx_live_"):] for k in keys]
    # Every base62 digit turns up somewhere (a narrower alphabet would lose entropy).
    assert set("".join(bodies)) == BASE62
    values = [int(_from_base62(b)) for b in bodies]
    assert all(v < 2**256 for v in values)
    # Uniform over 256 bits: the top bit is set about half the time, and the values fill the range.
    top = sum(v >> 255 for v in values)
    assert 400 < top < 600
    assert max(values) > 2**255 and min(values) < 2**250


def _from_base62(text: str) -> int:
    alphabet = string.digits + string.ascii_uppercase + string.ascii_lowercase
    value = 0
    for ch in text:
        value = value * 62 + alphabet.index(ch)
    return value


def test_token_hash_is_sha256_hex() -> None:
    for token in ("abc", tokens.new_refresh_token(), tokens.new_api_key("dx_live_"), "ünïcødé"):
        digest = tokens.token_hash(token)
        assert digest == hashlib.sha256(token.encode()).hexdigest()
        assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert tokens.token_hash("a") != tokens.token_hash("b")
