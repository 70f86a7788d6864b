"""`docex users create` and `docex users set-password` as an administrator runs them on the
server: passwords from a pipe (also one written on Windows), what they refuse and with which
exit status, and a reset that the running daemon honours at once."""

from __future__ import annotations

import json

import httpx

OLD, NEW = "first pass 1", "second pass 2"


async def _login(daemon, email: str, password: str) -> int:
    async with httpx.AsyncClient(timeout=10.0) as client:
        r = await client.post(daemon.url("/api/auth/login"), json={"email": email, "password": password})
    return r.status_code


async def test_a_reset_password_signs_in_and_the_old_one_does_not(run_docex, start_daemon) -> None:
    # A Windows line end on the pipe is not part of the password (it was kept: nobody could sign in).
    made = await run_docex("users", "create", "--email", "ops@example.com", "--name", "Ops", input=OLD + "\r\n")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["email"] == "ops@example.com"
    daemon = start_daemon()
    await daemon.wait_http_ready()
    assert await _login(daemon, "ops@example.com", OLD) == 200

    reset = await run_docex("users", "set-password", "--email", "OPS@example.com", input=NEW + "\r\n")
    assert reset.returncode == 0, reset.stderr
    assert json.loads(reset.stdout)["email"] == "ops@example.com"
    assert await _login(daemon, "ops@example.com", OLD) == 401
    assert await _login(daemon, "ops@example.com", NEW) == 200
    await daemon.stop()


async def test_refusals_say_why_with_the_usage_status(run_docex) -> None:
    cases = [
        # (arguments, stdin, exit status, what stderr says)
        (("create", "--email", "nul@example.com", "--name", "N"), "abc\0defgh\n", 2, "NUL"),
        (("create", "--email", "\uff4bate@example.com", "--name", "K"), OLD + "\n", 2, "plain characters"),
        (("create", "--email", "short@example.com", "--name", "S"), "abc\n", 2, "longer than or equal to 6"),
        (("set-password", "--email", "nobody@example.com"), NEW + "\n", 1, "No account has"),
        (("set-password", "--email", "not an address"), NEW + "\n", 2, "email must be an email"),
    ]
    for args, stdin, status, words in cases:
        result = await run_docex("users", *args, input=stdin)
        assert result.returncode == status, (args, result.stderr)
        assert words in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)


async def test_a_taken_address_is_a_runtime_failure(run_docex) -> None:
    first = await run_docex("users", "create", "--email", "a@example.com", "--name", "A", input=OLD + "\n")
    assert first.returncode == 0, first.stderr
    again = await run_docex("users", "create", "--email", "A@example.com", "--name", "A", input=OLD + "\n")
    assert again.returncode == 1 and "already exists" in again.stderr
