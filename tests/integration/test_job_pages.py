"""What the console shows beside a job's values (issue #15): its pages as pictures
(GET /api/jobs/:id/pages/:n) and, for documents without pictures, their lines
(GET /api/jobs/:id/text). Runs on SQLite and, with DOCEX_TEST_DATABASE_URL, PostgreSQL."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

from hostile_docs import pdf_blank_pages
from jobs_helpers import INVOICE_TXT, blob_files, create_job, docx_bytes, error_of, register
from PIL import Image

from daemon.services import Services


def _picture(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


async def _pdf_job(client: Any, auth: dict[str, str], schema_id: str, tmp_path: Path, pages: int = 2) -> str:
    data = pdf_blank_pages(tmp_path / "doc.pdf", pages=pages, width=612, height=792).read_bytes()
    return str((await create_job(client, auth, schema_id, data, "doc.pdf"))["id"])


async def test_a_pdf_page_is_a_png_of_the_width_asked_with_a_strong_validator(
        client: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    job_id = await _pdf_job(client, alice, schema_id, tmp_path)

    r = await client.get(f"/api/jobs/{job_id}/pages/2", headers=alice)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "image/png"
    assert _picture(await r.get_data()).size == (1400, 1812)  # the default width, the page's proportions
    assert r.headers["Cache-Control"].startswith("private, max-age=")
    etag = r.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"')

    again = await client.get(f"/api/jobs/{job_id}/pages/2", headers={**alice, "If-None-Match": etag})
    assert again.status_code == 304 and await again.get_data() == b""
    assert again.headers["ETag"] == etag

    narrow = await client.get(f"/api/jobs/{job_id}/pages/2", query_string={"width": "612"}, headers=alice)
    assert _picture(await narrow.get_data()).size == (612, 792)
    assert narrow.headers["ETag"] != etag  # another picture, another validator
    other_page = await client.get(f"/api/jobs/{job_id}/pages/1", headers={**alice, "If-None-Match": etag})
    assert other_page.status_code == 200


async def test_pages_past_the_last_and_widths_out_of_bounds_are_refused(
        client: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    job_id = await _pdf_job(client, alice, schema_id, tmp_path)
    body = await error_of(await client.get(f"/api/jobs/{job_id}/pages/3", headers=alice), 404)
    assert "no page 3" in body["message"]
    await error_of(await client.get(f"/api/jobs/{job_id}/pages/0", headers=alice), 404)
    too_wide = await client.get(f"/api/jobs/{job_id}/pages/1", query_string={"width": "100000"}, headers=alice)
    await error_of(too_wide, 400)


async def test_a_page_stays_under_max_render_pixels_whatever_the_width(
        client: Any, services: Services, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    job_id = await _pdf_job(client, alice, schema_id, tmp_path, pages=1)
    services.config = dataclasses.replace(
        services.config, extraction=dataclasses.replace(services.config.extraction, max_render_pixels=200_000))
    r = await client.get(f"/api/jobs/{job_id}/pages/1", query_string={"width": "2000"}, headers=alice)
    width, height = _picture(await r.get_data()).size
    assert (width - 1) * (height - 1) <= 200_000 and width < 2000  # pdfium rounds each side up


async def test_another_users_job_has_no_pages_nor_text(
        client: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    job_id = await _pdf_job(client, alice, schema_id, tmp_path)
    text_job = (await create_job(client, alice, schema_id))["id"]
    bob = await register(client, "bob@example.com")
    await error_of(await client.get(f"/api/jobs/{job_id}/pages/1", headers=bob), 404)
    await error_of(await client.get(f"/api/jobs/{text_job}/text", headers=bob), 404)
    await error_of(await client.get(f"/api/jobs/{job_id}/pages/1"), 401)


async def test_a_jpeg_scan_is_served_as_stored_and_a_tiff_frame_as_png(
        client: Any, alice: dict[str, str], schema_id: str) -> None:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), "white").save(out, format="JPEG")
    jpeg = out.getvalue()
    job_id = (await create_job(client, alice, schema_id, jpeg, "scan.jpg"))["id"]
    r = await client.get(f"/api/jobs/{job_id}/pages/1", headers=alice)
    assert r.status_code == 200 and r.headers["Content-Type"] == "image/jpeg"
    assert await r.get_data() == jpeg and r.headers["ETag"]
    await error_of(await client.get(f"/api/jobs/{job_id}/pages/2", headers=alice), 404)

    out = io.BytesIO()
    frames = [Image.new("RGB", (20, 10), "white"), Image.new("RGB", (30, 50), "black")]
    frames[0].save(out, format="TIFF", save_all=True, append_images=frames[1:])
    tiff_id = (await create_job(client, alice, schema_id, out.getvalue(), "scan.tiff"))["id"]
    second = await client.get(f"/api/jobs/{tiff_id}/pages/2", headers=alice)
    assert second.status_code == 200 and second.headers["Content-Type"] == "image/png"
    assert _picture(await second.get_data()).size == (30, 50)
    await error_of(await client.get(f"/api/jobs/{tiff_id}/pages/3", headers=alice), 404)


async def test_a_text_document_has_no_page_images_but_its_lines_with_boxes(
        client: Any, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    job_id = (await create_job(client, alice, schema_id, INVOICE_TXT))["id"]
    body = await error_of(await client.get(f"/api/jobs/{job_id}/pages/1", headers=alice), 409)
    assert "no page images" in body["message"] and f"/api/jobs/{job_id}/text" in body["message"]

    r = await client.get(f"/api/jobs/{job_id}/text", headers=alice)
    text = await r.get_json()
    assert r.status_code == 200, text
    [page] = text["pages"]
    assert page["number"] == 1
    assert [line["text"] for line in page["lines"]] == ["Invoice Number: INV-42", "Total: 12.50"]
    for line in page["lines"]:
        x0, y0, x1, y1 = line["bbox"]
        assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
    assert page["lines"][0]["bbox"][1] < page["lines"][1]["bbox"][1]  # top to bottom

    docx_id = (await create_job(client, alice, schema_id, docx_bytes("Vendor: ACME\nTotal: 3.00"), "a.docx"))["id"]
    docx = await (await client.get(f"/api/jobs/{docx_id}/text", headers=alice)).get_json()
    assert [line["text"] for line in docx["pages"][0]["lines"]] == ["Vendor: ACME", "Total: 3.00"]

    pdf_id = await _pdf_job(client, alice, schema_id, tmp_path)
    body = await error_of(await client.get(f"/api/jobs/{pdf_id}/text", headers=alice), 409)
    assert f"/api/jobs/{pdf_id}/pages/1" in body["message"]


async def test_a_file_gone_from_the_blob_store_is_410(
        client: Any, services: Services, alice: dict[str, str], schema_id: str, tmp_path: Path) -> None:
    pdf_id = await _pdf_job(client, alice, schema_id, tmp_path)
    text_id = (await create_job(client, alice, schema_id))["id"]
    for path in blob_files(services):
        path.unlink()
    body = await error_of(await client.get(f"/api/jobs/{pdf_id}/pages/1", headers=alice), 410)
    assert body["message"] == "The job's file no longer exists"
    await error_of(await client.get(f"/api/jobs/{text_id}/text", headers=alice), 410)


async def test_one_users_flood_of_pictures_neither_takes_every_parser_nor_delays_another_user(
        client: Any, alice: dict[str, str], schema_id: str, tmp_path: Path, monkeypatch: Any) -> None:
    """Pictures are rendered in the processes that read jobs: 60 renders of one user held all
    of them, and another user's job waited 16 s. A user renders one picture at a time, and
    renders take at most half the processes."""
    import trio

    import daemon.http.job_pages as job_pages
    from daemon.extraction.pages import PageImage

    bob = await register(client, "bob@example.com")
    bob_schema = (await (await client.post("/api/schemas", json={"name": "S", "definition": {
        "type": "object", "properties": {"total": {"type": "number"}}}}, headers=bob)).get_json())["id"]
    alice_job = await _pdf_job(client, alice, schema_id, tmp_path)
    bob_job = await _pdf_job(client, bob, bob_schema, tmp_path)
    rendering: dict[str, int] = {alice_job: 0, bob_job: 0}
    most = {"alice": 0, "all": 0}
    finished: list[str] = []

    async def slow_render(fn: Any, path: str, mime: str, number: int, width: int, *args: Any, **kwargs: Any) -> Any:
        job = alice_job if width < 1000 else bob_job
        rendering[job] += 1
        most["alice"] = max(most["alice"], rendering[alice_job])
        most["all"] = max(most["all"], sum(rendering.values()))
        await trio.sleep(0.05)
        rendering[job] -= 1
        return PageImage(b"\x89PNG")

    monkeypatch.setattr(job_pages, "in_worker", slow_render)

    async def get(job_id: str, width: int, auth: dict[str, str]) -> None:
        r = await client.get(f"/api/jobs/{job_id}/pages/1", query_string={"width": str(width)}, headers=auth)
        assert r.status_code == 200
        finished.append(job_id)

    async with trio.open_nursery() as nursery:
        for width in range(100, 110):  # ten pictures of alice's, each another width (no cache)
            nursery.start_soon(get, alice_job, width, alice)
        await trio.sleep(0.01)
        nursery.start_soon(get, bob_job, 1400, bob)
    assert most["alice"] == 1
    assert most["all"] <= job_pages._RENDER_SLOTS.total_tokens
    # Bob's turn came after at most one of alice's per slot, not after all ten.
    assert finished.index(bob_job) <= 2 * job_pages._RENDER_SLOTS.total_tokens, finished
    assert len(job_pages._renders_by_user) == 0  # nobody's turn is kept once their pictures are done
