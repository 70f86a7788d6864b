"""The console's review screens in a real browser (issue #15): the review queue, a job's pages
beside its values, the box of the value selected, corrections checked against the schema and
saved, approval, the keyboard, a document whose text is hostile HTML, and another user's job."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from console_browser import (
    EXTRACTION_TIMEOUT_MS,
    RECEIPT_SCHEMA,
    Console,
    expect,
    open_console,
    wait_for_job_status,
    write_receipt_pdf,
    write_scan,
)

HOSTILE = "<img src=x onerror=alert(1)>"
BOX_TOLERANCE_PX = 2.0


def _upload(console: Console, token: str, schema_id: str, path: Path, mime: str) -> dict[str, Any]:
    """A job made through the API, as an integration would, once it has completed."""
    auth = {"Authorization": f"Bearer {token}"}
    created = httpx.post(console.daemon.url("/api/jobs"), headers=auth,
                         data={"type": "EXTRACTION", "schemaId": schema_id},
                         files={"file": (path.name, path.read_bytes(), mime)})
    assert created.status_code == 201, created.text
    job = wait_for_job_status(token, console.daemon, created.json()["id"], {"COMPLETED", "FAILED"})
    assert job["status"] == "COMPLETED", job
    return job


def _receipt_schema(console: Console, token: str) -> str:
    created = httpx.post(console.daemon.url("/api/schemas"), headers={"Authorization": f"Bearer {token}"},
                         json={"name": "receipt", "definition": RECEIPT_SCHEMA})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _api_job(console: Console, token: str, job_id: str) -> dict[str, Any]:
    r = httpx.get(console.daemon.url(f"/api/jobs/{job_id}"), headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    job: dict[str, Any] = r.json()
    return job


def _signed_in_with_job(console: Console, pdf: Path) -> tuple[str, dict[str, Any]]:
    """The admin registered in the console, and a job of `pdf` made through the API: (token, job)."""
    console.register("Ann Admin", "ann@example.com")
    token = console.api_token("ann@example.com")
    return token, _upload(console, token, _receipt_schema(console, token), pdf, "application/pdf")


def _assert_box_over(page: Any, bbox: list[float]) -> None:
    """The box on show sits over the page picture where the value's bbox (fractions of the
    page) says, within a pixel or two."""
    box = page.locator(".field-box:visible")
    expect(box).to_have_count(1)
    image = page.locator(".page-frame", has=box).locator("img")
    expect(image).to_be_visible()
    # Visible is not loaded: on a busy machine the picture may still be on its way.
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle(),
                           timeout=15_000)
    assert image.evaluate("img => img.complete && img.naturalWidth > 0")
    shown, picture = box.bounding_box(), image.bounding_box()
    assert shown is not None and picture is not None
    x0, y0, x1, y1 = bbox
    expected = {"x": picture["x"] + x0 * picture["width"], "y": picture["y"] + y0 * picture["height"],
                "width": (x1 - x0) * picture["width"], "height": (y1 - y0) * picture["height"]}
    for key, value in expected.items():
        assert abs(shown[key] - value) <= BOX_TOLERANCE_PX, (key, shown, expected)


# The controls of the screen without a name a person can see: a <label> on screen, the
# headings aria-labelledby points at (a table's cells), or a button's own text.
UNNAMED_CONTROLS_JS = """() => [...document.querySelectorAll("main input, main select, main textarea, main button")]
  .filter((el) => {
    const ids = (el.getAttribute("aria-labelledby") || "").split(/\\s+/).filter(Boolean);
    const namers = ids.length ? ids.map((id) => document.getElementById(id)).filter(Boolean)
      : el.tagName === "BUTTON" ? [el] : [...el.labels];
    const seen = namers.filter((n) => n.checkVisibility()).map((n) => n.textContent.trim()).join("");
    return !seen && !(el.tagName === "BUTTON" && el.getAttribute("aria-label"));
  })
  .map((el) => el.name || el.id || el.tagName)"""


def _field_error(page: Any, label: str) -> Any:
    """The error shown at a value: the element its input is described by."""
    control = page.get_by_label(label, exact=True)
    return page.locator(f"#{control.get_attribute('aria-describedby')}")


def test_review_queue_boxes_corrections_and_approval(start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    pdf = write_receipt_pdf(tmp_path / "northwind.pdf")
    scan = write_scan(write_receipt_pdf(tmp_path / "harbour.pdf", company="HARBOUR BOOKS LTD", total="12.50"),
                      tmp_path / "harbour-scan.png")

    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann Admin", "ann@example.com")
        token = console.api_token("ann@example.com")
        schema_id = _receipt_schema(console, token)
        first = _upload(console, token, schema_id, pdf, "application/pdf")
        second = _upload(console, token, schema_id, scan, "image/png")
        # The rules provider is unsure of an unlabelled issuer: both wait for a person.
        assert first["resultMeta"]["fields"]["/company"]["confidence"] < 0.9

        # The queue: oldest first, each with the value that needs a look.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Review queue").click()
        page.get_by_role("heading", name="Review queue").wait_for()
        links = page.get_by_role("table").get_by_role("link")
        expect(links).to_have_text(["northwind.pdf", "harbour-scan.png"])
        expect(page.get_by_role("row").filter(has_text="northwind.pdf")).to_contain_text("company 0.60")
        console.shot("review-queue")

        # The review: the page's picture beside the values; the doubtful one is marked.
        links.first.click()
        page.get_by_role("heading", name="Review northwind.pdf").wait_for()
        picture = page.get_by_role("img", name="Page 1 of northwind.pdf")
        expect(picture).to_be_visible()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=picture.element_handle())
        company = page.get_by_label("company", exact=True)
        expect(company).to_have_value("NORTHWIND TRADING LTD")
        company_field = page.locator(".field", has=company)
        expect(company_field.get_by_text("low confidence 0.60")).to_be_visible()
        date_field = page.locator(".field", has=page.get_by_label("date", exact=True))
        expect(date_field.get_by_text("low confidence")).to_have_count(0)
        expect(page.locator(".field-box:visible")).to_have_count(0)
        assert page.evaluate(UNNAMED_CONTROLS_JS) == []

        # Selecting a value shows its box over the page.
        company.click()
        _assert_box_over(page, first["resultMeta"]["fields"]["/company"]["bbox"])
        expect(page.locator(".field-box:visible")).to_contain_text("company")
        console.shot("review")

        # The keyboard: Alt+↓ from inside a value, j once out of it.
        page.keyboard.press("Alt+ArrowDown")
        expect(page.get_by_label("date", exact=True)).to_be_focused()
        _assert_box_over(page, first["resultMeta"]["fields"]["/date"]["bbox"])
        page.keyboard.press("j")  # typing in a value: a letter, not a move
        expect(page.get_by_label("date", exact=True)).to_have_value("2024-03-12j")
        page.keyboard.press("Escape")
        page.keyboard.press("j")
        expect(page.get_by_label("total", exact=True)).to_be_focused()
        _assert_box_over(page, first["resultMeta"]["fields"]["/total"]["bbox"])
        page.keyboard.press("Alt+ArrowUp")
        page.keyboard.press("Alt+ArrowUp")
        expect(company).to_be_focused()

        # Values the schema refuses are shown at their fields and not saved.
        company.fill("NORTHWIND TRADING LIMITED")
        page.get_by_label("date", exact=True).fill("31/31/2024")
        page.get_by_label("total", exact=True).fill("forty-eight")
        expect(page.get_by_role("button", name="Approve")).to_be_disabled()
        page.get_by_role("button", name="Save").click()
        expect(_field_error(page, "date")).to_contain_text("'31/31/2024' is not a 'date'")
        expect(_field_error(page, "total")).to_contain_text("is not of type 'number'")
        expect(_field_error(page, "company")).to_be_hidden()
        expect(page.get_by_label("date", exact=True)).to_have_attribute("aria-invalid", "true")
        unsaved = _api_job(console, token, first["id"])
        assert unsaved["result"] == first["result"] and unsaved.get("originalResult") is None

        # Corrected: saved, the extracted value shown beside the new one, no longer doubtful.
        page.get_by_label("date", exact=True).fill("2024-03-12")
        page.get_by_label("total", exact=True).fill("48.20")
        page.get_by_role("button", name="Save").click()
        expect(_field_error(page, "date")).to_be_hidden()
        expect(company_field.get_by_text("Extracted: NORTHWIND TRADING LTD")).to_be_visible()
        expect(page.locator(".field", has=company).get_by_text("low confidence")).to_have_count(0)
        expect(page.get_by_text("Not approved yet.")).to_be_visible()

        page.get_by_role("button", name="Approve").click()
        expect(page.get_by_text(re.compile(r"Approved by you on"))).to_be_visible()
        console.shot("review-approved")

        me = httpx.get(console.daemon.url("/api/auth/me"), headers={"Authorization": f"Bearer {token}"}).json()
        saved = _api_job(console, token, first["id"])
        assert saved["result"] == {"company": "NORTHWIND TRADING LIMITED", "date": "2024-03-12", "total": 48.2}
        assert saved["originalResult"] == first["result"]
        assert saved["reviewedAt"] is not None and saved["reviewedBy"] == me["id"]

        # n (outside a value) opens the next job of the queue.
        page.keyboard.press("n")
        page.get_by_role("heading", name="Review harbour-scan.png").wait_for()
        expect(page.get_by_label("company", exact=True)).to_have_value("HARBOUR BOOKS LTD")
        page.get_by_label("company", exact=True).click()
        _assert_box_over(page, second["resultMeta"]["fields"]["/company"]["bbox"])

        # The approved job has left the queue: from its last job, "next" is the queue itself.
        page.get_by_role("button", name="Next job to review").click()
        page.get_by_role("heading", name="Review queue").wait_for()
        expect(page.get_by_text("No other job waits for review.")).to_be_visible()
        expect(page.get_by_role("table").get_by_role("link")).to_have_text(["harbour-scan.png"])


def test_hostile_text_stays_text_and_another_users_job_is_not_found(
        start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    document = tmp_path / "hostile.txt"
    document.write_text(f"Company: {HOSTILE}\nDate: 12/03/2024\nTotal: 48.20\n")

    with open_console(start_daemon) as console:
        page = console.page
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        console.register("Ann Admin", "ann@example.com")
        token = console.api_token("ann@example.com")
        job = _upload(console, token, _receipt_schema(console, token), document, "text/plain")
        assert job["result"]["company"] == HOSTILE

        console.goto(f"#/jobs/{job['id']}")
        page.get_by_role("heading", name="Review hostile.txt").wait_for()
        company = page.get_by_label("company", exact=True)
        expect(company).to_have_value(HOSTILE)
        # A text document shows its lines; the value selected is marked in them.
        expect(page.get_by_text("Date: 12/03/2024")).to_be_visible()
        company.click()
        expect(page.locator("mark")).to_have_text(HOSTILE)
        expect(page.locator(".line.hit")).to_have_text(f"Company: {HOSTILE}")
        page.get_by_label("total", exact=True).click()
        expect(page.locator("mark")).to_have_text("48.20")
        expect(page.locator("img")).to_have_count(0)
        console.shot("review-text")
        assert page.evaluate("() => document.querySelectorAll('img[src=\"x\"]').length") == 0
        assert dialogs == []

        # Another person: the job is not theirs, neither on the screen nor through the API.
        context, other = console.new_context()
        console.register("Bob Other", "bob@example.com", page=other)
        other.goto(console.url(f"#/jobs/{job['id']}"))
        other.get_by_role("heading", name="Job not found").wait_for()
        expect(other.get_by_label("company", exact=True)).to_have_count(0)
        expect(other.get_by_text("Date: 12/03/2024")).to_have_count(0)
        bob = {"Authorization": f"Bearer {console.api_token('bob@example.com')}"}
        for path in (f"/api/jobs/{job['id']}/pages/1", f"/api/jobs/{job['id']}/text"):
            assert httpx.get(console.daemon.url(path), headers=bob).status_code == 404
        context.close()
        assert dialogs == []


def test_a_failed_job_shows_its_error_and_restarts(start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n" + b"\x00not a pdf body" * 20)

    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann Admin", "ann@example.com")
        token = console.api_token("ann@example.com")
        auth = {"Authorization": f"Bearer {token}"}
        created = httpx.post(console.daemon.url("/api/jobs"), headers=auth,
                             data={"type": "EXTRACTION", "schemaId": _receipt_schema(console, token)},
                             files={"file": (broken.name, broken.read_bytes(), "application/pdf")})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]

        # Opened while it runs, the screen follows the job until it fails.
        console.goto(f"#/jobs/{job_id}")
        page.get_by_role("heading", name="Review broken.pdf").wait_for()
        expect(page.get_by_text("Extraction failed.")).to_be_visible(timeout=EXTRACTION_TIMEOUT_MS)
        failed = _api_job(console, token, job_id)
        expect(page.get_by_text(failed["errorCode"])).to_be_visible()
        console.shot("review-failed")

        # Restarted: queued again, followed again, and failed again (the file is still broken).
        page.get_by_role("button", name="Restart").click()
        expect(page.get_by_text("Queued again.")).to_be_visible()
        expect(page.get_by_text("Extraction failed.")).to_be_visible(timeout=EXTRACTION_TIMEOUT_MS)
        again = _api_job(console, token, job_id)
        assert again["status"] == "FAILED" and again["finishedAt"] != failed["finishedAt"]


INVOICE_SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "object", "properties": {"name": {"type": "string", "description": "Vendor"},
                                                    "vat_id": {"type": "string", "description": "VAT number"}},
                   "required": ["name"]},
        "invoice_number": {"type": "string", "description": "Invoice number"},
        "paid": {"type": "boolean", "description": "Paid"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"], "description": "Currency"},
        "items": {"type": "array", "items": {"type": "object", "required": ["description", "amount"], "properties": {
            "description": {"type": "string"}, "quantity": {"type": "integer"}, "amount": {"type": "number"}}}},
        "total": {"type": "number", "description": "Total"},
    },
    "required": ["invoice_number", "total", "vendor"],
}
# Two lines the rules provider reads as one item, without its amount: an incomplete result.
INVOICE_TEXT = ("Vendor: ACME Supplies\nInvoice Number: INV-7\nPaid: yes\nCurrency: EUR\n\n"
                "Description  Quantity  Amount\nPaper  2  10.00\nInk  1  25.50\n\nTotal: 35.50\n")


def test_nested_values_and_line_items_are_edited_until_complete(
        start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    document = tmp_path / "invoice.txt"
    document.write_text(INVOICE_TEXT)

    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann Admin", "ann@example.com")
        token = console.api_token("ann@example.com")
        created = httpx.post(console.daemon.url("/api/schemas"), headers={"Authorization": f"Bearer {token}"},
                             json={"name": "invoice", "definition": INVOICE_SCHEMA})
        job = _upload(console, token, created.json()["id"], document, "text/plain")
        assert job["resultMeta"]["missing"] == ["/items/0/amount"]

        console.goto(f"#/jobs/{job['id']}")
        page.get_by_role("heading", name="Review invoice.txt").wait_for()
        vendor = page.get_by_role("group", name="vendor")
        expect(vendor.get_by_label("name", exact=True)).to_have_value("ACME Supplies")
        expect(vendor.get_by_label("vat_id", exact=True)).to_have_value("")
        expect(page.get_by_label("paid", exact=True)).to_have_value("true")
        expect(page.get_by_label("currency", exact=True).locator("option:checked")).to_have_text("EUR")
        items = page.get_by_role("table", name="items")
        expect(items.get_by_role("textbox", name="description row 1")).to_have_value("Paper 2 Ink 1 25.50")
        amount = items.get_by_role("textbox", name="amount row 1")
        expect(amount).to_have_value("")
        amount_cell = items.locator("td", has=page.get_by_role("textbox", name="amount row 1"))
        expect(amount_cell.get_by_text("missing")).to_be_visible()
        expect(page.get_by_role("button", name="Approve")).to_be_disabled()
        expect(page.get_by_text("Fill in the missing values and save before approving.")).to_be_visible()
        assert page.evaluate(UNNAMED_CONTROLS_JS) == []

        # A line item's cell shows where the document says it, like any value.
        items.get_by_role("textbox", name="description row 1").click()
        expect(page.locator(".line.hit")).to_have_count(2)

        # Correct the row, add the second, and add then remove a third.
        items.get_by_role("textbox", name="description row 1").fill("Paper")
        items.get_by_role("textbox", name="quantity row 1").fill("2")
        amount.fill("10.00")
        page.get_by_role("button", name="Add a row to items").click()
        expect(items.get_by_role("textbox", name="description row 2")).to_be_focused()
        page.keyboard.type("Ink")
        items.get_by_role("textbox", name="quantity row 2").fill("1")
        items.get_by_role("textbox", name="amount row 2").fill("25.50")
        page.get_by_role("button", name="Add a row to items").click()
        items.get_by_role("textbox", name="description row 3").fill("Stray row")
        page.get_by_role("button", name="Remove row 3 of items").click()
        expect(items.get_by_role("textbox", name="description row 3")).to_have_count(0)
        vendor.get_by_label("vat_id", exact=True).fill("GB123456789")
        page.get_by_label("currency", exact=True).select_option(label="GBP")
        page.get_by_label("paid", exact=True).select_option(label="no")
        # A quantity must be a whole number: the API says so at the cell.
        items.get_by_role("textbox", name="quantity row 2").fill("1.5")
        page.get_by_role("button", name="Save").click()
        quantity = items.get_by_role("textbox", name="quantity row 2")
        quantity_error = page.locator(f"#{quantity.get_attribute('aria-describedby')}")
        expect(quantity_error).to_contain_text("is not of type 'integer'")
        items.get_by_role("textbox", name="quantity row 2").fill("1")
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_role("button", name="Approve")).to_be_enabled()
        page.get_by_role("button", name="Approve").click()
        expect(page.get_by_text(re.compile(r"Approved by you on"))).to_be_visible()
        console.shot("review-items")

        saved = _api_job(console, token, job["id"])
        assert saved["result"] == {
            "vendor": {"name": "ACME Supplies", "vat_id": "GB123456789"}, "invoice_number": "INV-7",
            "paid": False, "currency": "GBP", "total": 35.5,
            "items": [{"description": "Paper", "quantity": 2, "amount": 10.0},
                      {"description": "Ink", "quantity": 1, "amount": 25.5}]}
        assert saved["resultMeta"]["complete"] is True and saved["reviewedAt"] is not None


def _two_page_receipt(path: Path) -> Path:
    """A receipt whose total is on its second page, below a page of items."""
    from reportlab.lib.pagesizes import A5
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A5)
    _, height = A5
    c.setFont("Helvetica-Bold", 16)
    c.drawString(40, height - 60, "LONG LIST STORES LTD")
    c.setFont("Helvetica", 12)
    c.drawString(40, height - 120, "Date: 02/05/2024")
    for i in range(20):
        c.drawString(40, height - 160 - 20 * i, f"Item {i + 1}")
        c.drawRightString(360, height - 160 - 20 * i, "1.00")
    c.showPage()
    c.setFont("Helvetica", 12)
    c.drawString(40, height - 300, "Thank you for shopping with us")
    c.setFont("Helvetica-Bold", 13)
    c.drawString(40, height - 400, "TOTAL")
    c.drawRightString(360, height - 400, "20.00")
    c.showPage()
    c.save()
    return path


def test_a_value_on_a_later_page_is_scrolled_to(start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    pdf = _two_page_receipt(tmp_path / "long.pdf")

    with open_console(start_daemon) as console:
        page = console.page
        _, job = _signed_in_with_job(console, pdf)
        total = job["resultMeta"]["fields"]["/total"]
        assert job["pageCount"] == 2 and total["page"] == 2, job

        console.goto(f"#/jobs/{job['id']}")
        page.get_by_role("heading", name="Review long.pdf").wait_for()
        expect(page.get_by_role("img", name="Page 1 of long.pdf")).to_be_visible()
        page.get_by_label("total", exact=True).click()
        second = page.get_by_role("img", name="Page 2 of long.pdf")
        expect(second).to_be_visible()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=second.element_handle())
        expect(page.locator(".page-frame", has=page.locator(".field-box:visible")).locator("img")).to_have_attribute(
            "alt", "Page 2 of long.pdf")
        _assert_box_over(page, total["bbox"])
        expect(page.get_by_text("“total” is marked on page 2.")).to_be_visible()
        # The pages' column scrolled to the box: it is inside the column's visible area.
        area = page.get_by_role("region", name="Document").bounding_box()
        box = page.locator(".field-box:visible").bounding_box()
        assert area is not None and box is not None
        assert area["y"] <= box["y"] and box["y"] + box["height"] <= area["y"] + area["height"], (area, box)

        # Back to a value on the first page: the column scrolls back up.
        page.keyboard.press("Alt+ArrowUp")
        page.keyboard.press("Alt+ArrowUp")
        expect(page.get_by_label("company", exact=True)).to_be_focused()
        box = page.locator(".field-box:visible").bounding_box()
        assert box is not None and area["y"] <= box["y"] <= area["y"] + area["height"], (area, box)


def test_two_tabs_on_one_job_do_not_undo_each_other_and_unsaved_work_is_not_left_unasked(
        start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    """Tab B's save sent its stale form back: tab A's correction was reverted and its approval
    cleared, without a word. A link in the bar, or Back, dropped unsaved corrections silently."""
    pdf = write_receipt_pdf(tmp_path / "northwind.pdf")
    with open_console(start_daemon) as console:
        page = console.page
        token, job = _signed_in_with_job(console, pdf)
        console.goto(f"#/jobs/{job['id']}")
        page.get_by_role("heading", name="Review northwind.pdf").wait_for()
        other = console.context.new_page()  # the same person's second tab
        other.goto(console.url(f"#/jobs/{job['id']}"))
        other.get_by_role("heading", name="Review northwind.pdf").wait_for()

        page.get_by_label("company", exact=True).fill("NORTHWIND TRADING LIMITED")
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_text("Extracted: NORTHWIND TRADING LTD")).to_be_visible()
        page.get_by_role("button", name="Approve").click()
        expect(page.get_by_text(re.compile(r"Approved by you on"))).to_be_visible()

        other.get_by_label("total", exact=True).fill("99.99")
        other.get_by_role("button", name="Save").click()
        expect(other.get_by_text("this job was changed elsewhere")).to_be_visible()
        saved = _api_job(console, token, job["id"])
        assert saved["result"]["company"] == "NORTHWIND TRADING LIMITED" and saved["reviewedAt"] is not None
        other.get_by_role("button", name="Show the job as it is now (drops your edits)").click()
        expect(other.get_by_label("company", exact=True)).to_have_value("NORTHWIND TRADING LIMITED")
        other.close()

        # Unsaved: leaving by the bar asks; staying keeps the edit and the address.
        page.get_by_label("total", exact=True).fill("12.34")
        asked: list[str] = []

        def answer(dialog: Any, accept: bool) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        def asked_times(count: int) -> None:
            # The question comes after the click has returned (the address changes, then it is asked).
            for _ in range(200):
                if len(asked) >= count:
                    return
                page.wait_for_timeout(50)
            raise AssertionError(f"asked {len(asked)} times, not {count}")

        page.once("dialog", lambda dialog: answer(dialog, False))
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
        asked_times(1)
        expect(page.get_by_label("total", exact=True)).to_have_value("12.34")
        assert asked == ["Your changes to this job are not saved. Leave it anyway?"]
        assert page.url.endswith(f"#/jobs/{job['id']}")
        # Back asks too; staying stays, going goes.
        page.once("dialog", lambda dialog: answer(dialog, False))
        page.go_back()
        asked_times(2)
        expect(page.get_by_label("total", exact=True)).to_have_value("12.34")
        page.wait_for_url(re.compile(f"#/jobs/{job['id']}$"))
        page.once("dialog", lambda dialog: answer(dialog, True))
        page.go_back()
        page.wait_for_url(re.compile(r"#/jobs$"))
        page.get_by_role("heading", name="Jobs").wait_for()
        assert len(asked) == 3


def test_a_long_value_is_edited_whole_in_a_box_of_several_lines(start_daemon: Callable[..., Any],
                                                                tmp_path: Path) -> None:
    """A 5,000-character value, or an address, showed 70 characters of itself in a one-line box."""
    pdf = write_receipt_pdf(tmp_path / "northwind.pdf")
    with open_console(start_daemon) as console:
        page = console.page
        token, job = _signed_in_with_job(console, pdf)
        long_name = "NORTHWIND TRADING LIMITED, A MEMBER OF THE NORTHWIND GROUP OF COMPANIES (MALAYSIA) " * 3
        fixed = httpx.patch(console.daemon.url(f"/api/jobs/{job['id']}/result"),
                            headers={"Authorization": f"Bearer {token}"},
                            json={"result": {**job["result"], "company": long_name.strip()}})
        assert fixed.status_code == 200, fixed.text
        console.goto(f"#/jobs/{job['id']}")
        company = page.get_by_label("company", exact=True)
        expect(company).to_have_value(long_name.strip())
        assert company.evaluate("el => el.tagName") == "TEXTAREA"
        assert company.evaluate("el => el.scrollHeight <= el.clientHeight + 2"), "the value does not show whole"
        company.fill("NORTHWIND TRADING LIMITED")
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_text("Not approved yet.")).to_be_visible()
        page.get_by_role("button", name="Approve").wait_for()
        assert _api_job(console, token, job["id"])["result"]["company"] == "NORTHWIND TRADING LIMITED"
