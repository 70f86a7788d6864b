"""The console's front door and jobs screen in a real browser: register, upload one file and
a batch, watch statuses change without a reload, filter, sign out (the session ends on the
server), sign in again."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from console_browser import (
    EXTRACTION_TIMEOUT_MS,
    RECEIPT_SCHEMA,
    expect,
    open_console,
    write_receipt_pdf,
    write_scan,
)


def test_register_upload_watch_and_sign_out(start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    pdf = write_receipt_pdf(tmp_path / "northwind.pdf")
    second = write_receipt_pdf(tmp_path / "harbour.pdf", company="HARBOUR BOOKS LTD", total="12.50")
    scan = write_scan(second, tmp_path / "harbour-scan.png")

    with open_console(start_daemon) as console:
        page = console.page
        console.goto()
        page.get_by_role("heading", name="Sign in to docex").wait_for()
        console.shot("signin")
        page.get_by_role("link", name="Create an account").click()
        page.get_by_role("heading", name="Create an account").wait_for()
        console.shot("register")
        console.register("Ann Admin", "ann@example.com")
        # The first account administers docex: the bar offers the admin screen.
        assert page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin").is_visible()
        assert page.get_by_text("Create a schema first").is_visible()

        token = console.api_token("ann@example.com")
        auth = {"Authorization": f"Bearer {token}"}
        created = httpx.post(console.daemon.url("/api/schemas"), headers=auth,
                             json={"name": "receipt", "definition": RECEIPT_SCHEMA})
        assert created.status_code == 201

        # One file: a job, listed at once, COMPLETED without a reload.
        page.reload()
        page.get_by_label("Schema", exact=True).select_option(label="receipt")
        page.get_by_label("Files").set_input_files(pdf)
        page.get_by_role("button", name="Upload").click()
        row = page.get_by_role("row").filter(has=page.get_by_role("link", name="northwind.pdf"))
        row.get_by_text("COMPLETED").wait_for(timeout=EXTRACTION_TIMEOUT_MS)

        # Several files: a batch run whose progress shows until every job has ended.
        page.get_by_label("Files").set_input_files([second, scan])
        page.get_by_role("button", name="Upload").click()
        page.get_by_role("heading", name=re.compile("Batch run")).wait_for()
        page.get_by_text("2 of 2 ended").wait_for(timeout=EXTRACTION_TIMEOUT_MS)
        page.get_by_role("button", name="Show this run's jobs").click()
        expect(page.get_by_role("link", name="northwind.pdf")).to_have_count(0)
        expect(page.get_by_role("link", name="harbour-scan.png")).to_have_count(1)
        console.shot("jobs")

        runs = httpx.get(console.daemon.url("/api/job-runs"), headers=auth).json()["data"]
        assert [run["total"] for run in runs] == [2]
        assert page.get_by_label("Filter by run").input_value() == runs[0]["id"]

        # Drag and drop works as the file picker does.
        page.get_by_label("Filter by run").select_option("")
        dropped = page.evaluate_handle("""() => {
            const transfer = new DataTransfer();
            const text = "Company: Dropped Ltd\\nTotal: 3.50\\n";
            transfer.items.add(new File([text], "dropped.txt", {type: "text/plain"}));
            return transfer;
        }""")
        page.dispatch_event(".drop", "dragenter", {"dataTransfer": dropped})
        expect(page.locator(".drop")).to_have_class(re.compile("over"))
        page.dispatch_event(".drop", "drop", {"dataTransfer": dropped})
        page.get_by_role("button", name="Upload").click()
        page.get_by_role("link", name="dropped.txt").wait_for()

        # The jobs a schema's filter shows download as a spreadsheet (the console had no export).
        expect(page.get_by_text("Filter by a schema to export its jobs")).to_be_visible()
        page.get_by_label("Filter by schema").select_option(label="receipt")
        page.get_by_role("link", name="dropped.txt").wait_for()
        with page.expect_download() as download:
            page.get_by_role("button", name="Export CSV").click()
        assert download.value.suggested_filename == "docex-jobs.csv"
        exported = Path(download.value.path()).read_text(encoding="utf-8")
        assert "dropped.txt" in exported and "northwind.pdf" in exported

        # Filters narrow the list: nothing failed.
        page.get_by_label("Filter by status").select_option("FAILED")
        page.get_by_text("No jobs match.").wait_for()
        assert "status=FAILED" in page.url

        # Sign-out ends the session on the server: the old refresh cookie is refused.
        cookie = next(c for c in console.context.cookies() if c["name"] == "docex_refresh")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("heading", name="Sign in to docex").wait_for()
        refused = httpx.post(console.daemon.url("/api/auth/refresh"), json={"refreshToken": cookie["value"]})
        assert refused.status_code == 401
        console.goto("#/jobs")
        page.get_by_role("heading", name="Sign in to docex").wait_for()

        # A wrong password is said plainly; the right one signs in again.
        page.get_by_label("Email").fill("ann@example.com")
        page.get_by_label("Password").fill("not the password")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("alert").wait_for()
        assert page.get_by_role("alert").inner_text().strip() != ""
        console.sign_in("ann@example.com")
        # A reload keeps the session (a new access token from the cookie), with no token in storage.
        page.reload()
        page.get_by_role("heading", name="Jobs").wait_for()
        stored = page.evaluate("() => JSON.stringify([{...localStorage}, {...sessionStorage}])")
        assert token not in stored and "eyJ" not in stored


def test_a_daemon_that_cannot_be_reached_is_said_in_words(start_daemon: Callable[..., Any]) -> None:
    """Every screen said only the browser's "Failed to fetch"."""
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann Admin", "ann@example.com")
        page.route("**/api/jobs?*", lambda route: route.abort())
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Schemas").click()
        page.get_by_role("heading", name="Schemas").wait_for()
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
        expect(page.get_by_role("alert")).to_have_text("docex cannot be reached (is it running?). Try again.")
        page.unroute("**/api/jobs?*")
