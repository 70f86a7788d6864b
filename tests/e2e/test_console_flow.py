"""The web console end to end, as issue #15 checks it, every step in the browser: register →
create a schema with the field form → upload a PDF and a scan → both COMPLETED → open the
review → select a value and see its box → correct a value → approve → the API shows the new
result, `originalResult` and `reviewedAt`; a document whose value is markup shows it as text;
another user can open neither the job nor its page image; sign-out ends the session. No
request leaves docex's origin (open_console fails the test on any)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from console_browser import EXTRACTION_TIMEOUT_MS, expect, open_console, write_receipt_pdf, write_scan

HOSTILE = "<img src=x onerror=alert(1)>"


def _api(console: Any, token: str, path: str) -> httpx.Response:
    return httpx.get(console.daemon.url(path), headers={"Authorization": f"Bearer {token}"})


def test_the_whole_review_flow_in_the_browser(start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    pdf = write_receipt_pdf(tmp_path / "northwind.pdf")
    scan = write_scan(write_receipt_pdf(tmp_path / "harbour.pdf", company="HARBOUR BOOKS LTD", total="12.50"),
                      tmp_path / "harbour-scan.png")
    hostile = tmp_path / "hostile.txt"
    hostile.write_text(f"Company: {HOSTILE}\nDate: 12/03/2024\nTotal: 48.20\n", encoding="utf-8")

    with open_console(start_daemon) as console:
        page = console.page
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        console.register("Ann Admin", "ann@example.com")

        # A schema made with the field form.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Schemas").click()
        page.get_by_role("button", name="New schema").click()
        page.get_by_label("Name", exact=True).fill("receipt")
        for n, (name, kind, description) in enumerate([
                ("company", "string", "Name of the shop or company that issued the receipt"),
                ("date", "date", "Date of the purchase"),
                ("total", "number", "Total amount paid")], start=1):
            if n > 1:
                page.get_by_role("button", name="Add field", exact=True).click()
            page.get_by_label(f"Field {n} name", exact=True).fill(name)
            page.get_by_label(f"Field {n} type", exact=True).select_option(kind)
            page.get_by_label(f"Field {n} description", exact=True).fill(description)
            page.get_by_label(f"Field {n} required", exact=True).check()
        page.get_by_role("button", name="Save").click()
        page.get_by_role("heading", name="Schema: receipt").wait_for()

        # Upload a PDF and a scan together (a batch run), then the hostile text alone.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
        page.get_by_label("Schema", exact=True).select_option(label="receipt")
        page.get_by_label("Files").set_input_files([pdf, scan])
        page.get_by_role("button", name="Upload").click()
        page.get_by_text("2 of 2 ended").wait_for(timeout=EXTRACTION_TIMEOUT_MS)
        page.get_by_label("Files").set_input_files(hostile)
        page.get_by_role("button", name="Upload").click()
        for name in ("northwind.pdf", "harbour-scan.png", "hostile.txt"):
            row = page.get_by_role("row").filter(has=page.get_by_role("link", name=name))
            row.get_by_text("COMPLETED").wait_for(timeout=EXTRACTION_TIMEOUT_MS)
        console.shot("flow-jobs")

        # The review: the page image, a value's box over it, a correction, an approval.
        page.get_by_role("link", name="northwind.pdf").click()
        page.get_by_role("heading", name="Review northwind.pdf").wait_for()
        picture = page.get_by_role("img", name="Page 1 of northwind.pdf")
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=picture.element_handle())
        company = page.get_by_label("company", exact=True)
        company.click()
        box = page.locator(".field-box:visible")
        expect(box).to_contain_text("company")
        shown, under = box.bounding_box(), picture.bounding_box()
        assert shown and under and under["x"] <= shown["x"] and shown["x"] + shown["width"] <= under["x"] + under[
            "width"] and under["y"] <= shown["y"] <= under["y"] + under["height"] / 3  # the issuer, at the top
        job_id = page.url.split("#/jobs/")[1].split("?")[0]
        token = console.api_token("ann@example.com")
        extracted = _api(console, token, f"/api/jobs/{job_id}").json()["result"]
        company.fill("Northwind Trading Limited")
        page.get_by_role("button", name="Save").click()
        page.get_by_text("Extracted: NORTHWIND TRADING LTD").wait_for()
        page.get_by_role("button", name="Approve").click()
        page.get_by_text("Approved by you on").wait_for()
        console.shot("flow-review")

        job = _api(console, token, f"/api/jobs/{job_id}").json()
        assert job["result"] == {**extracted, "company": "Northwind Trading Limited"}
        assert job["originalResult"] == extracted
        assert job["reviewedAt"] is not None
        assert job["reviewedBy"] == _api(console, token, "/api/auth/me").json()["id"]

        # The hostile document's value is text on the screen: no element made of it, no script run.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
        page.get_by_role("link", name="hostile.txt").click()
        page.get_by_role("heading", name="Review hostile.txt").wait_for()
        expect(page.get_by_label("company", exact=True)).to_have_value(HOSTILE)
        page.get_by_label("company", exact=True).click()
        expect(page.locator("mark")).to_contain_text(HOSTILE)
        assert page.locator("main img").count() == 0
        assert dialogs == []

        # Another user: neither the job nor its page image.
        _, other = console.new_context()
        console.register("Bob Other", "bob@example.com", page=other)
        other.goto(console.url(f"#/jobs/{job_id}"))
        other.get_by_role("heading", name="Job not found").wait_for()
        bob = console.api_token("bob@example.com")
        assert _api(console, bob, f"/api/jobs/{job_id}/pages/1").status_code == 404
        assert _api(console, token, f"/api/jobs/{job_id}/pages/1").status_code == 200

        # Sign-out ends the session on the server: the refresh cookie no longer works.
        refresh = next(c for c in console.context.cookies() if c["name"] == "docex_refresh")["value"]
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("heading", name="Sign in to docex").wait_for()
        assert httpx.post(console.daemon.url("/api/auth/refresh"),
                          json={"refreshToken": refresh}).status_code == 401
        page.reload()
        console.goto("#/review")
        page.get_by_role("heading", name="Sign in to docex").wait_for()
