"""A password's check costs the same whether its account exists (SPEC §4: no account
enumeration), also for a password that NFKC normalisation changes."""

from __future__ import annotations

import bcrypt
import pytest

from daemon.auth import passwords

ROUNDS = 4


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bcrypt checks made, each still made by bcrypt."""
    made: list[bytes] = []
    real = bcrypt.checkpw

    def counted(password: bytes, hashed: bytes) -> bool:
        made.append(password)
        return real(password, hashed)

    monkeypatch.setattr(passwords.bcrypt, "checkpw", counted)
    return made


@pytest.mark.parametrize("typed", ["wrong-password", "ｗrong-password"])  # ASCII; a fullwidth ｗ
async def test_a_wrong_password_costs_as_many_checks_for_a_known_account_as_for_none(
        checks: list[bytes], typed: str) -> None:
    hashed = await passwords.hash_password("correct-horse-1", ROUNDS)
    assert not await passwords.verify_password(typed, hashed, ROUNDS)
    known = len(checks)
    checks.clear()
    assert not await passwords.verify_password(typed, None, ROUNDS)
    assert len(checks) == known  # before: 2 against 1 for "ｗrong-password"


async def test_a_password_typed_before_normalisation_still_logs_in(checks: list[bytes]) -> None:
    typed = "ｐassword-1"  # stored as typed by a daemon that did not normalise
    legacy = bcrypt.hashpw(typed.encode(), bcrypt.gensalt(ROUNDS)).decode()
    assert await passwords.verify_password(typed, legacy, ROUNDS)
    assert not await passwords.verify_password(typed, None, ROUNDS)
