"""The console's schemas screens in a real browser: make a schema with the field form (a
table of line items included) and check what the API stored; edit it; go through the JSON
Schema and back (the convert route both ways); refused input is shown where it belongs and
not saved; start from an example result; delete; try a saved schema on a file."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from console_browser import EXTRACTION_TIMEOUT_MS, RECEIPT_SCHEMA, expect, open_console, write_receipt_pdf

RECEIPT_DEFINITION = {
    "type": "object",
    "properties": {
        "merchant": {"type": "string"},
        "issued": {"type": "string", "format": "date"},
        "total": {"type": "number", "description": "Total amount paid"},
        "line_items": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"},
            "amount": {"type": "number"},
        }}},
    },
    "required": ["total"],
}


def schemas(console: Any, token: str) -> list[dict[str, Any]]:
    response = httpx.get(console.daemon.url("/api/schemas"), headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def label(page: Any, name: str) -> Any:
    return page.get_by_label(name, exact=True)


def unlabelled(page: Any) -> list[str]:
    """The visible controls without a <label>, and the buttons without a name."""
    found: list[str] = page.evaluate("""() => [
        ...[...document.querySelectorAll("main input, main select, main textarea")]
            .filter((el) => el.offsetParent !== null && !el.labels.length).map((el) => `${el.tagName} ${el.id}`),
        ...[...document.querySelectorAll("main button")]
            .filter((el) => !(el.getAttribute("aria-label") || el.textContent).trim())
            .map((el) => `${el.tagName} ${el.id}`),
    ]""")
    return found


def save(page: Any) -> None:
    """Press Save and wait until the API has answered the schema's POST or PATCH."""
    with page.expect_response(lambda r: "/api/schemas" in r.url and r.request.method in ("POST", "PATCH")) as saved:
        page.get_by_role("button", name="Save").click()
    assert saved.value.status in (200, 201), saved.value.text()


def test_make_edit_and_round_trip_a_schema(start_daemon: Callable[..., Any]) -> None:
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Sam Schema", "sam@example.com")
        token = console.api_token("sam@example.com")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Schemas").click()
        page.get_by_role("heading", name="Schemas").wait_for()
        page.get_by_text("No schemas yet.").wait_for()

        # --- make one through the field form ---
        page.get_by_role("button", name="New schema").click()
        page.get_by_role("heading", name="New schema").wait_for()
        label(page, "Name").fill("Receipts")
        label(page, "Description").fill("Till receipts from shops")
        label(page, "Field 1 name").fill("merchant")
        page.get_by_role("button", name="Add field", exact=True).click()
        expect(label(page, "Field 2 name")).to_be_focused()
        label(page, "Field 2 name").fill("issued")
        label(page, "Field 2 type").select_option("date")
        page.get_by_role("button", name="Add field", exact=True).click()
        label(page, "Field 3 name").fill("total")
        label(page, "Field 3 type").select_option("number")
        label(page, "Field 3 description").fill("Total amount paid")
        label(page, "Field 3 required").check()
        page.get_by_role("button", name="Add field", exact=True).click()
        label(page, "Field 4 name").fill("line_items")
        label(page, "Field 4 type").select_option("array")
        # An array holds objects (a table) unless told otherwise; its members are indented rows.
        expect(label(page, "Field 4 items")).to_have_value("object")
        page.get_by_role("group", name="Each item of line_items").wait_for()
        label(page, "line_items field 1 name").fill("description")
        page.get_by_role("button", name="Add field to line_items").click()
        label(page, "line_items field 2 name").fill("amount")
        label(page, "line_items field 2 type").select_option("number")
        console.shot("schema-editor")
        assert unlabelled(page) == []
        page.get_by_role("button", name="Save").click()
        page.get_by_role("heading", name="Schema: Receipts").wait_for()

        [stored] = schemas(console, token)
        assert stored["name"] == "Receipts" and stored["description"] == "Till receipts from shops"
        assert stored["definition"] == RECEIPT_DEFINITION
        assert list(stored["definition"]["properties"]) == ["merchant", "issued", "total", "line_items"]
        assert page.url.endswith(f"#/schemas/{stored['id']}")

        # The list shows it with its number of fields.
        page.get_by_role("link", name="← All schemas").click()
        row = page.get_by_role("row").filter(has=page.get_by_role("link", name="Receipts"))
        expect(row.get_by_role("cell")).to_have_text(
            ["Receipts", "Till receipts from shops", "4", re.compile(r"\d"), "Delete"])
        console.shot("schemas")

        # --- edit: rename a field, change a type, move one ---
        page.get_by_role("link", name="Receipts").click()
        expect(label(page, "Field 1 name")).to_have_value("merchant")
        expect(label(page, "Field 3 required")).to_be_checked()
        expect(label(page, "line_items field 2 type")).to_have_value("number")
        label(page, "Field 1 name").fill("shop")
        label(page, "Field 3 type").select_option("integer")
        page.get_by_role("button", name="Move field 2 down").click()
        expect(label(page, "Field 3 name")).to_have_value("issued")
        expect(label(page, "Field 2 type")).to_have_value("integer")
        # Renaming a table renames the labels of its rows as it is typed.
        label(page, "Field 4 name").fill("lines")
        expect(label(page, "lines field 2 name")).to_have_value("amount")
        page.get_by_role("button", name="Add field to lines").wait_for()
        save(page)
        expect(page.get_by_role("status")).to_contain_text("Saved Receipts.")
        [stored] = schemas(console, token)
        properties = stored["definition"]["properties"]
        assert list(properties) == ["shop", "total", "issued", "lines"]
        assert properties["total"] == {"type": "integer", "description": "Total amount paid"}
        assert stored["definition"]["required"] == ["total"]

        # --- the JSON Schema and back: both ways through the convert route ---
        # The tabs answer the arrow keys too.
        page.get_by_role("tab", name="Fields").focus()
        page.keyboard.press("ArrowRight")
        expect(page.get_by_role("tab", name="JSON Schema")).to_be_focused()
        expect(page.get_by_role("tab", name="JSON Schema")).to_have_attribute("aria-selected", "true")
        definition_box = label(page, "JSON Schema definition")
        expect(definition_box).to_be_visible()
        shown = json.loads(definition_box.input_value())
        assert shown == stored["definition"]
        shown["properties"]["currency"] = {"type": "string", "enum": ["EUR", "USD"], "description": "ISO code"}
        shown["properties"]["lines"]["items"]["properties"]["amount"]["type"] = "string"
        shown["required"] = ["total", "currency"]
        definition_box.fill(json.dumps(shown, indent=2))
        page.get_by_role("tab", name="Fields").click()
        expect(label(page, "Field 5 name")).to_have_value("currency")
        expect(label(page, "Field 5 allowed values (one per line)")).to_have_value("EUR\nUSD")
        expect(label(page, "Field 5 description")).to_have_value("ISO code")
        expect(label(page, "Field 5 required")).to_be_checked()
        expect(label(page, "lines field 2 type")).to_have_value("string")
        save(page)
        expect(page.get_by_role("status")).to_contain_text("Saved Receipts.")
        [stored] = schemas(console, token)
        assert stored["definition"] == shown

        # --- refused input: shown where it belongs, nothing saved ---
        # A field without a name: the error is at that field's name.
        page.get_by_role("button", name="Add field", exact=True).click()
        page.get_by_role("button", name="Save").click()
        expect(label(page, "Field 6 name")).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#sf-5-name-error")).to_have_text("Field 6 name should not be empty")
        page.get_by_role("button", name="Remove field 6").click()
        # A name used twice in the table: the error is at that row of the table.
        page.get_by_role("button", name="Add field to lines").click()
        label(page, "lines field 3 name").fill("amount")
        page.get_by_role("button", name="Save").click()
        expect(label(page, "lines field 3 name")).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#sf-3-2-name-error")).to_contain_text("lines field 3 name must be unique")
        page.get_by_role("button", name="Remove lines field 3").click()
        expect(label(page, "lines field 3 name")).to_have_count(0)
        # Text that is not JSON: said at the JSON, and the form stays on it.
        page.get_by_role("tab", name="JSON Schema").click()
        definition_box.fill('{"type": "object", "properties": ')
        page.get_by_role("tab", name="Fields").click()
        expect(definition_box).to_have_attribute("aria-invalid", "true")
        expect(page.get_by_text("This is not valid JSON")).to_be_visible()
        expect(page.get_by_role("tab", name="JSON Schema")).to_have_attribute("aria-selected", "true")
        definition_box.fill("null")
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_text("The definition must be a JSON object")).to_be_visible()
        # A JSON Schema outside what docex supports: the API's message names the path.
        definition_box.fill(json.dumps({"type": "object", "properties": {"total": {"type": "money"}}}))
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_text(re.compile(r"definition\.properties\.total\.type"))).to_be_visible()
        expect(definition_box).to_have_attribute("aria-invalid", "true")
        console.shot("schema-json-error")
        # An empty name is refused at the name.
        definition_box.fill(json.dumps(shown))
        label(page, "Name").fill(" ")
        page.get_by_role("button", name="Save").click()
        expect(label(page, "Name")).to_have_attribute("aria-invalid", "true")
        assert schemas(console, token) == [stored]


def test_start_from_an_example_and_delete(start_daemon: Callable[..., Any]) -> None:
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Eve Example", "eve@example.com")
        token = console.api_token("eve@example.com")
        created = httpx.post(console.daemon.url("/api/schemas"), headers={"Authorization": f"Bearer {token}"},
                             json={"name": "Receipts", "definition": RECEIPT_SCHEMA})
        assert created.status_code == 201

        console.goto("#/schemas/new")
        page.get_by_text("Start from an example result").click()
        example = {"invoice_number": "INV-7", "issued": "2024-03-01", "total": 10.5,
                   "lines": [{"sku": "A-1", "qty": 2, "tax": {"rate": 0.2}}, {"sku": "B-2"}]}
        label(page, "Example result (JSON)").fill(json.dumps(example))
        page.get_by_role("button", name="Make fields from the example").click()
        expect(label(page, "Field 1 name")).to_have_value("invoice_number")
        expect(label(page, "Field 2 type")).to_have_value("date")
        expect(label(page, "Field 3 type")).to_have_value("number")
        expect(label(page, "Field 4 type")).to_have_value("array")
        expect(label(page, "lines field 1 name")).to_have_value("sku")
        expect(label(page, "lines field 1 required")).to_be_checked()
        expect(label(page, "lines field 2 type")).to_have_value("integer")
        expect(label(page, "lines field 2 required")).not_to_be_checked()
        # Deeper rows are labelled by the path of names.
        expect(label(page, "lines field 3 type")).to_have_value("object")
        expect(label(page, "lines.tax field 1 name")).to_have_value("rate")
        page.get_by_role("button", name="Add field to lines.tax").wait_for()
        label(page, "Name").fill("Invoices <b>bold</b>")
        page.get_by_role("button", name="Save").click()
        page.get_by_role("heading", name="Schema: Invoices <b>bold</b>").wait_for()
        invoices = next(s for s in schemas(console, token) if s["name"].startswith("Invoices"))
        assert invoices["definition"] == {
            "type": "object",
            "properties": {
                "invoice_number": {"type": "string"},
                "issued": {"type": "string", "format": "date"},
                "total": {"type": "number"},
                "lines": {"type": "array", "items": {"type": "object", "properties": {
                    "sku": {"type": "string"}, "qty": {"type": "integer"},
                    "tax": {"type": "object", "properties": {"rate": {"type": "number"}}, "required": ["rate"]},
                }, "required": ["sku"]}},
            },
            "required": ["invoice_number", "issued", "total", "lines"],
        }

        # Delete asks first; cancelling keeps it.
        console.goto("#/schemas")
        expect(page.get_by_role("link", name="Invoices <b>bold</b>")).to_have_count(1)
        page.get_by_role("button", name="Delete Invoices <b>bold</b>").click()
        expect(page.get_by_role("button", name="Yes, delete")).to_be_focused()
        page.get_by_role("button", name="Cancel").click()
        expect(page.get_by_role("button", name="Delete Invoices <b>bold</b>")).to_be_focused()
        assert len(schemas(console, token)) == 2
        page.get_by_role("button", name="Delete Invoices <b>bold</b>").click()
        page.get_by_role("button", name="Yes, delete").click()
        expect(page.get_by_role("link", name="Invoices <b>bold</b>")).to_have_count(0)
        expect(page.get_by_role("link", name="Receipts")).to_have_count(1)
        assert [s["name"] for s in schemas(console, token)] == ["Receipts"]
        gone = httpx.get(console.daemon.url(f"/api/schemas/{invoices['id']}"),
                         headers={"Authorization": f"Bearer {token}"})
        assert gone.status_code == 404


def test_try_a_schema_on_a_file(start_daemon: Callable[..., Any], tmp_path: Path) -> None:
    pdf = write_receipt_pdf(tmp_path / "northwind.pdf", company="NORTHWIND <i>TRADING</i>", total="48.20")
    definition = {**RECEIPT_SCHEMA, "title": "Till receipt", "x-docex-incomplete": "complete"}
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Tia Try", "tia@example.com")
        token = console.api_token("tia@example.com")
        created = httpx.post(console.daemon.url("/api/schemas"), headers={"Authorization": f"Bearer {token}"},
                             json={"name": "Receipts", "definition": definition}).json()

        console.goto(f"#/schemas/{created['id']}")
        page.get_by_role("heading", name="Schema: Receipts").wait_for()
        # The root's keywords that the field form cannot show survive an edit in the form.
        label(page, "Field 1 description").fill("The shop")
        save(page)
        [stored] = schemas(console, token)
        assert stored["definition"]["x-docex-incomplete"] == "complete"
        assert stored["definition"]["title"] == "Till receipt"
        assert stored["definition"]["properties"]["company"]["description"] == "The shop"
        assert stored["definition"]["required"] == RECEIPT_SCHEMA["required"]

        label(page, "Try on a file").set_input_files(pdf)
        page.get_by_role("button", name="Try", exact=True).click()
        review = page.get_by_role("link", name="Review the job for northwind.pdf")
        review.wait_for(timeout=EXTRACTION_TIMEOUT_MS)
        jobs = httpx.get(console.daemon.url("/api/jobs"), headers={"Authorization": f"Bearer {token}"}).json()
        [job] = jobs["data"]
        assert job["status"] == "COMPLETED" and job["schemaId"] == created["id"]
        expect(review).to_have_attribute("href", f"#/jobs/{job['id']}")
        values = page.locator("dl.values")
        expect(values.locator("dt")).to_have_text(list(job["result"]))
        expect(values.locator("dd")).to_have_text([str(v) for v in job["result"].values()])
        # The values are text: markup read from the document is shown, not run.
        assert job["result"]["company"] == "NORTHWIND <i>TRADING</i>"
        expect(values.locator("i")).to_have_count(0)
        assert job["result"]["total"] == 48.2
        console.shot("schema-try")
        review.click()
        expect(page).to_have_url(re.compile(f"#/jobs/{job['id']}$"))
        expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Schemas")).not_to_have_attribute(
            "aria-current", "page")


def test_what_corrections_taught_is_shown_marked_and_can_be_forgotten(start_daemon: Callable[..., Any]) -> None:
    """Learning was invisible in the console: a learned value was not marked (its evidence
    read otherwise), no screen listed what was learned, and a wrong correction could not be
    forgotten without curl. Leaving the schema editor with changes dropped them silently."""
    # The name printed with a letter misread, as OCR does: a person corrects it once.
    receipt = (b"KEDAI RUNCIT MAJU JAVA SDN BHD\nCo. Reg. No. 123456-K\nNO. 12, JALAN MAWAR 3, 43000 KAJANG\n"
               b"Receipt No: R-1001\nDate: 03/02/2025\nTOTAL 12.50\n")
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann Admin", "ann@example.com")
        token = console.api_token("ann@example.com")
        auth = {"Authorization": f"Bearer {token}"}
        definition = {"type": "object", "properties": {"company": {"type": "string"}, "total": {"type": "number"}}}
        schema_id = httpx.post(console.daemon.url("/api/schemas"), headers=auth,
                               json={"name": "Receipts", "definition": definition}).json()["id"]

        def upload() -> dict[str, Any]:
            created = httpx.post(console.daemon.url("/api/jobs"), headers=auth,
                                 data={"type": "EXTRACTION", "schemaId": schema_id},
                                 files={"file": ("receipt.txt", receipt, "text/plain")}).json()
            from console_browser import wait_for_job_status
            return wait_for_job_status(token, console.daemon, created["id"], {"COMPLETED", "FAILED"})

        first = upload()
        corrected = {**first["result"], "company": "KEDAI RUNCIT MAJU JAYA SDN BHD"}
        assert httpx.patch(console.daemon.url(f"/api/jobs/{first['id']}/result"), headers=auth,
                           json={"result": corrected}).status_code == 200
        second = upload()
        assert second["result"]["company"] == "KEDAI RUNCIT MAJU JAYA SDN BHD"
        assert second["resultMeta"]["fields"]["/company"]["learnedFrom"]

        console.goto(f"#/jobs/{second['id']}")
        field = page.locator(".field", has=page.get_by_label("company", exact=True))
        expect(field.get_by_text("learned", exact=True)).to_be_visible()
        expect(field.get_by_text(re.compile(r"^page 1 reads:"))).to_be_visible()
        console.shot("review-learned-value")

        console.goto(f"#/schemas/{schema_id}")
        examples = page.get_by_role("region", name="Learned from corrections")
        expect(examples.get_by_role("table")).to_contain_text("KEDAI RUNCIT MAJU JAYA SDN BHD")
        console.shot("schema-learned-examples")
        examples.get_by_role("button", name=re.compile("^Forget the example of job")).click()
        examples.get_by_role("button", name="Yes, forget").click()
        expect(examples.get_by_text("Nothing learned yet")).to_be_visible()
        listed = httpx.get(console.daemon.url(f"/api/schemas/{schema_id}/examples"), headers=auth).json()["data"]
        assert listed == []

        # Unsaved changes to the schema are not dropped without asking.
        label(page, "Name").fill("Receipts (renamed)")
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
        for _ in range(200):  # the question comes after the click has returned
            if asked:
                break
            page.wait_for_timeout(50)
        expect(label(page, "Name")).to_have_value("Receipts (renamed)")
        assert asked == ["Your changes to this schema are not saved. Leave anyway?"]


def test_a_new_schema_can_be_made_by_pasting_json_schema(start_daemon: Callable[..., Any]) -> None:
    """The JSON tab of a new schema refused to open until a field of the form had a name."""
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann Admin", "ann@example.com")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Schemas").click()
        page.get_by_role("button", name="New schema").click()
        page.get_by_role("heading", name="New schema").wait_for()
        label(page, "Name").fill("Pasted")
        page.get_by_role("tab", name="JSON Schema").click()
        box = label(page, "JSON Schema definition")
        expect(box).to_be_visible()
        assert json.loads(box.input_value()) == {"type": "object", "properties": {}}
        box.fill(json.dumps(RECEIPT_DEFINITION))
        page.get_by_role("button", name="Save").click()
        page.get_by_role("heading", name="Schema: Pasted").wait_for()
        [saved] = schemas(console, console.api_token("ann@example.com"))
        assert saved["definition"]["properties"].keys() == RECEIPT_DEFINITION["properties"].keys()
