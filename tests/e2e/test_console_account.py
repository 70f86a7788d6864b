"""The console's account and admin screens in a real browser: an API key shown once that
works and stops working when revoked; sessions with this one marked, another ended, then
all of them; users disabled and promoted by an admin; the admin screen kept from a USER."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

import httpx
from console_browser import PASSWORD, expect, open_console


def test_api_keys_sessions_and_administration(start_daemon: Callable[..., Any]) -> None:
    with open_console(start_daemon) as console:
        page = console.page
        url = console.daemon.url

        def bearer(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}"}

        console.register("Ann Admin", "ann@example.com")
        ann = bearer(console.api_token("ann@example.com"))

        # --- API keys: created in the console, shown once, usable, revoked ---
        page.get_by_role("navigation", name="Main").get_by_role("link", name="API keys").click()
        page.get_by_role("heading", name="API keys and sessions").wait_for()
        page.get_by_text("No API keys yet.").wait_for()
        expiry = (dt.date.today() + dt.timedelta(days=90)).isoformat()
        page.get_by_label("Key name").fill("ci <b>pipeline</b>")
        page.get_by_label("Key role").select_option("USER")
        page.get_by_label("Expires on (optional)").fill(expiry)
        page.get_by_role("button", name="Create API key").click()
        box = page.locator(".secret")
        expect(box).to_contain_text("will not be shown again")
        expect(box.get_by_role("button", name="Copy API key")).to_be_visible()
        key = box.locator("code").inner_text()
        assert key.startswith("dx_live_"), key
        assert httpx.get(url("/api/jobs"), headers=bearer(key)).status_code == 200

        [listed] = httpx.get(url("/api/auth/api-keys"), headers=ann).json()["data"]
        assert listed["role"] == "USER" and listed["expiresAt"].startswith(expiry[:7])
        row = page.get_by_role("row").filter(has_text="ci <b>pipeline</b>")
        expect(row).to_contain_text(f"{listed['prefix']}…{listed['last4']}")
        assert key.endswith(listed["last4"])
        page.reload()
        page.get_by_role("heading", name="API keys and sessions").wait_for()
        expect(row).to_be_visible()
        expect(page.locator(".secret")).to_have_count(0)
        assert key not in page.content()

        # --- sessions: this one marked; another one ended, its refresh token refused ---
        other = httpx.post(url("/api/auth/login"), headers={"User-Agent": "ledger-sync/1.0"},
                           json={"email": "ann@example.com", "password": PASSWORD})
        assert other.status_code == 200
        page.reload()
        sessions = page.get_by_role("table", name=re.compile("Where you are signed in"))
        expect(sessions.get_by_text("This session")).to_have_count(1)
        expect(sessions.get_by_role("row").filter(has_text="This session")).to_contain_text("HeadlessChrome")
        console.shot("account")

        ledger = sessions.get_by_role("row").filter(has_text="ledger-sync/1.0")
        ledger.get_by_role("button", name="End session").click()
        ledger.get_by_role("button", name="Yes, end it").click()
        expect(ledger).to_have_count(0)
        refused = httpx.post(url("/api/auth/refresh"), json={"refreshToken": other.json()["refreshToken"]})
        assert refused.status_code == 401

        # Revoke (asked first): the key is refused at once.
        row.get_by_role("button", name="Revoke API key ci <b>pipeline</b>").click()
        row.get_by_role("button", name="Yes, revoke it").click()
        page.get_by_text("No API keys yet.").wait_for()
        assert httpx.get(url("/api/jobs"), headers=bearer(key)).status_code == 401

        # --- administration: a second user disabled, enabled, promoted ---
        registered = httpx.post(url("/api/auth/register"),
                                json={"name": "Bob Builder", "email": "bob@example.com", "password": PASSWORD})
        assert registered.status_code == 201
        bob = bearer(registered.json()["accessToken"])
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin").click()
        page.get_by_role("heading", name="Administration").wait_for()
        users = page.get_by_role("table", name="Every user")
        bob_row = users.get_by_role("row").filter(has_text="bob@example.com")
        expect(bob_row).to_contain_text("Bob Builder")
        figures = page.locator("dl.figures")

        def figure(name: str) -> Any:
            return figures.locator(".figure").filter(has=page.get_by_text(name, exact=True)).locator("dd")

        expect(figure("Users")).to_have_text("2")
        expect(figure("Admins")).to_have_text("1")
        # An admin cannot demote or disable themselves (the API refuses): no such control is offered.
        expect(page.get_by_label("Role of Ann Admin")).to_be_disabled()

        bob_row.get_by_role("button", name="Disable Bob Builder").click()
        expect(bob_row).to_contain_text("Their sessions and API keys stop working at once.")
        bob_row.get_by_role("button", name="Yes, disable").click()
        expect(bob_row).to_contain_text("disabled")
        expect(figure("Disabled users")).to_have_text("1")
        assert httpx.get(url("/api/auth/me"), headers=bob).status_code == 401
        bob_row.get_by_role("button", name="Enable Bob Builder").click()
        expect(bob_row).to_contain_text("active")

        # A role changes only when confirmed: an arrow key on the focused box made an admin at once.
        page.get_by_label("Role of Bob Builder").focus()
        page.keyboard.press("ArrowDown")
        expect(bob_row).to_contain_text("Make Bob Builder an admin?")
        bob_row.get_by_role("button", name="Cancel").click()
        expect(page.get_by_label("Role of Bob Builder")).to_have_value("USER")
        expect(figure("Admins")).to_have_text("1")
        page.get_by_label("Role of Bob Builder").select_option("ADMIN")
        bob_row.get_by_role("button", name="Yes, change the role").click()
        expect(figure("Admins")).to_have_text("2")
        listed_users = httpx.get(url("/api/admin/users"), headers=ann).json()["data"]
        assert {u["email"]: (u["role"], u["disabled"]) for u in listed_users} == {
            "ann@example.com": ("ADMIN", False), "bob@example.com": ("ADMIN", False)}
        console.shot("admin")

        # --- a USER sees no Admin link, and #/admin sends them away ---
        carl = httpx.post(url("/api/auth/register"),
                          json={"name": "Carl User", "email": "carl@example.com", "password": PASSWORD})
        assert carl.status_code == 201
        context, carl_page = console.new_context()
        console.sign_in("carl@example.com", page=carl_page)
        nav = carl_page.get_by_role("navigation", name="Main")
        expect(nav.get_by_role("link", name="API keys")).to_be_visible()
        expect(nav.get_by_role("link", name="Admin")).to_have_count(0)
        carl_page.goto(console.url("#/admin"))
        carl_page.get_by_role("heading", name="Jobs").wait_for()
        expect(carl_page.get_by_role("heading", name="Administration")).to_have_count(0)
        # A USER may make USER keys only: no role to choose.
        carl_page.goto(console.url("#/account"))
        carl_page.get_by_role("heading", name="API keys and sessions").wait_for()
        expect(carl_page.get_by_label("Key role")).to_have_count(0)
        context.close()

        # --- sign out everywhere: every session of Ann ends, the console's too ---
        cookie = next(c for c in console.context.cookies() if c["name"] == "docex_refresh")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="API keys").click()
        page.get_by_role("button", name="Sign out everywhere").click()
        page.get_by_role("button", name="Yes, sign out everywhere").click()
        page.get_by_role("heading", name="Sign in to docex").wait_for()
        assert httpx.post(url("/api/auth/refresh"), json={"refreshToken": cookie["value"]}).status_code == 401
        assert httpx.get(url("/api/auth/me"), headers=ann).status_code == 401
        console.goto("#/account")
        page.get_by_role("heading", name="Sign in to docex").wait_for()


def test_a_closed_registration_offers_no_form_once_the_first_account_exists(start_daemon: Callable[..., Any]) -> None:
    """The sign-in screen offered "Create an account" and the form failed only once sent."""
    with open_console(start_daemon, env={"DOCEX_AUTH_REGISTRATION": "closed"}) as console:
        page = console.page
        assert httpx.get(console.daemon.url("/api/settings")).json()["registration"] == "open"
        console.register("Ann Admin", "ann@example.com")  # the first account: the admin
        assert httpx.get(console.daemon.url("/api/settings")).json()["registration"] == "closed"

        other, page = console.new_context()
        page.goto(console.url("#/signin"))
        page.get_by_role("button", name="Sign in").wait_for()
        expect(page.get_by_text("Registration is closed")).to_be_visible()
        expect(page.get_by_role("link", name="Create an account")).to_have_count(0)
        page.goto(console.url("#/register"))
        expect(page.get_by_text("an administrator creates accounts")).to_be_visible()
        expect(page.get_by_role("button", name="Register")).to_have_count(0)
        page.get_by_role("link", name="Sign in").click()
        page.get_by_role("button", name="Sign in").wait_for()
        other.close()


def test_a_first_visit_asks_for_no_session_and_a_reload_keeps_one(start_daemon: Callable[..., Any]) -> None:
    """Every first visit asked /api/auth/refresh for a session it could not have: a 400 in the
    browser's console on every load."""
    with open_console(start_daemon) as console:
        page = console.page
        refreshes: list[str] = []
        page.on("request", lambda request: refreshes.append(request.url) if "/api/auth/refresh" in request.url
                else None)
        console.goto("")
        page.get_by_role("button", name="Sign in").wait_for()
        assert refreshes == []
        console.register("Ann Admin", "ann@example.com")
        page.reload()
        page.get_by_role("heading", name="Jobs").wait_for()  # the cookie's session, restored
        assert len(refreshes) == 1
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("button", name="Sign in").wait_for()
        page.reload()
        page.get_by_role("button", name="Sign in").wait_for()
        assert len(refreshes) == 1


def test_a_password_changed_in_the_console_ends_the_other_sessions(start_daemon: Callable[..., Any]) -> None:
    with open_console(start_daemon) as console:
        page = console.page
        url = console.daemon.url
        console.register("Ann Admin", "ann@example.com")
        other = httpx.post(url("/api/auth/login"), headers={"User-Agent": "ledger-sync/1.0"},
                           json={"email": "ann@example.com", "password": PASSWORD})
        assert other.status_code == 200
        page.get_by_role("navigation", name="Main").get_by_role("link", name="API keys").click()
        sessions = page.get_by_role("table", name=re.compile("Where you are signed in"))
        expect(sessions.get_by_role("row").filter(has_text="ledger-sync/1.0")).to_have_count(1)
        password = page.get_by_role("region", name="Password")
        problem = password.get_by_role("alert")

        password.get_by_label("Current password").fill(PASSWORD)
        password.get_by_label("New password", exact=True).fill("brand new 9")
        password.get_by_label("New password again").fill("brand new 8")
        password.get_by_role("button", name="Change password").click()
        expect(problem).to_have_text("The new password and its repetition differ.")

        password.get_by_label("Current password").fill("not my password")
        password.get_by_label("New password again").fill("brand new 9")
        password.get_by_role("button", name="Change password").click()
        expect(problem).to_have_text("The current password is wrong")

        password.get_by_label("Current password").fill(PASSWORD)
        password.get_by_role("button", name="Change password").click()
        page.get_by_text("Password changed. Every other session of this account was ended.").wait_for()
        expect(problem).to_be_hidden()
        expect(sessions.get_by_role("row").filter(has_text="ledger-sync/1.0")).to_have_count(0)
        expect(sessions.get_by_text("This session")).to_have_count(1)
        console.shot("account-password")
        refused = httpx.post(url("/api/auth/refresh"), json={"refreshToken": other.json()["refreshToken"]})
        assert refused.status_code == 401
        assert httpx.post(url("/api/auth/login"), json={"email": "ann@example.com",
                                                        "password": PASSWORD}).status_code == 401
        assert httpx.post(url("/api/auth/login"), json={"email": "ann@example.com",
                                                        "password": "brand new 9"}).status_code == 200
        # This session lives on: the console still reads the API.
        page.reload()
        page.get_by_role("heading", name="API keys and sessions").wait_for()
        expect(sessions.get_by_text("This session")).to_have_count(1)
