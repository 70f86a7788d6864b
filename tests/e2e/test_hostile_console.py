"""The web console attacked from outside, in a real browser (console_browser.py): values a
user or a document controls, put where the console shows them, must stay text; addresses a
person is sent (a mangled link) must give a screen, not a page stuck on "Loading…"; a
user's long lists must be reachable from the console, not cut off without a word."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from console_browser import PASSWORD, expect, open_console

# Markup in every shape the console could mistake for HTML: an element, an attribute break
# out, a javascript: URL. If any of it became markup, the DOM would hold an <img src=x>, an
# element with an onerror attribute, or a javascript: link.
HOSTILE = "<img src=x onerror=alert(1)>\"'><svg onload=alert(2)>javascript:alert(3)"
INJECTED = """() => document.querySelectorAll(
    'img[src="x"], svg[onload], [onerror], [onload], a[href^="javascript:" i], iframe, object, embed').length"""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def no_markup_from_data(page: Any) -> None:
    assert page.evaluate(INJECTED) == 0, page.content()


def test_hostile_names_everywhere_stay_text(start_daemon: Callable[..., Any]) -> None:
    """A user's name, a schema's name, description and field names, a file name, an API key's
    name, a session's User-Agent and a webhook's description, each a piece of markup, shown on
    every screen that shows them: as characters, never as elements."""
    with open_console(start_daemon) as console:
        page = console.page
        url = console.daemon.url
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        console.register(HOSTILE[:100], "ann@example.com")
        ann = bearer(console.api_token("ann@example.com"))
        no_markup_from_data(page)
        expect(page.locator("#bar")).to_contain_text(HOSTILE[:40])

        definition = {"type": "object", "description": HOSTILE, "properties": {
            "company": {"type": "string", "description": HOSTILE, "title": HOSTILE},
            "total": {"type": "number", "enum": [1, 2]},
        }}
        made = httpx.post(url("/api/schemas"), headers=ann,
                          json={"name": HOSTILE[:200], "description": HOSTILE, "definition": definition})
        assert made.status_code == 201, made.text
        schema_id = made.json()["id"]
        job = httpx.post(url("/api/jobs"), headers=ann, data={"type": "EXTRACTION", "schemaId": schema_id},
                         files={"file": (f"{HOSTILE}.txt", b"Company: ACME\nTotal: 1\n", "text/plain")})
        assert job.status_code == 201, job.text
        key = httpx.post(url("/api/auth/api-keys"), headers=ann, json={"name": HOSTILE[:100]})
        assert key.status_code == 201, key.text
        other = httpx.post(url("/api/auth/login"), headers={"User-Agent": HOSTILE},
                           json={"email": "ann@example.com", "password": PASSWORD})
        assert other.status_code == 200
        hook = httpx.post(url("/api/webhooks"), headers=ann, json={
            "url": "https://example.com/hook", "description": HOSTILE[:200], "events": ["job.completed"]})
        assert hook.status_code == 201, hook.text

        for hash_, shows in [
            ("#/jobs", f"{HOSTILE}.txt"),
            ("#/schemas", HOSTILE[:200]),
            (f"#/schemas/{schema_id}", None),
            (f"#/jobs/{job.json()['id']}", None),
            ("#/account", HOSTILE[:100]),
            ("#/webhooks", HOSTILE[:200]),
            (f"#/webhooks/{hook.json()['id']}", None),
            ("#/admin", HOSTILE[:100]),
        ]:
            page.goto(console.url(hash_))
            page.reload()  # drawn afresh (the same address again fires no hashchange)
            page.locator("main h1").first.wait_for()
            expect(page.locator("main")).not_to_contain_text("Loading…")
            if shows:
                expect(page.locator("main").get_by_text(shows).first).to_be_visible()
            no_markup_from_data(page)
        assert dialogs == []


def test_a_mangled_address_shows_a_screen_not_loading_forever(start_daemon: Callable[..., Any]) -> None:
    """A link cut in the middle of a %-escape (`#/jobs/%E0%A4%A`: a chat client or a mail
    wrapped it) is not a URI decodeURIComponent accepts: the console must say there is no such
    page or job, not stay on "Loading…" with a script error."""
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann", "ann@example.com")
        for hash_ in ["#/jobs/%E0%A4%A", "#/schemas/%", "#/webhooks/%ZZ"]:
            page.goto(console.url(hash_))
            expect(page.locator("main h1")).to_have_text("Not found")
            expect(page.locator("main")).not_to_contain_text("Loading…")
        # The console still works after them: a good address shows its screen.
        page.goto(console.url("#/schemas"))
        page.get_by_role("heading", name="Schemas").wait_for()
        console.shot("hostile-mangled-address")


def test_every_schema_is_reachable_past_five_hundred(start_daemon: Callable[..., Any]) -> None:
    """A user with 510 schemas: the list screen and the upload's schema picker fetched at most
    500 of them (api.all's cap), newest first, and said nothing: the oldest ten could be
    neither opened nor picked for an upload from the console."""
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann", "ann@example.com")
        ann = bearer(console.api_token("ann@example.com"))
        definition = {"type": "object", "properties": {"total": {"type": "number"}}}
        with httpx.Client(base_url=console.daemon.url(""), headers=ann, timeout=30) as client:
            for i in range(510):
                made = client.post("/api/schemas", json={"name": f"Schema {i:04d}", "definition": definition})
                assert made.status_code == 201, made.text

        page.goto(console.url("#/schemas"))
        page.get_by_role("heading", name="Schemas").wait_for()
        expect(page.get_by_role("link", name="Schema 0509")).to_be_visible()
        expect(page.get_by_role("link", name="Schema 0000")).to_be_visible()
        page.get_by_role("link", name="Schema 0000").click()
        expect(page.get_by_label("Name", exact=True)).to_have_value("Schema 0000")

        page.goto(console.url("#/jobs"))
        page.get_by_role("heading", name="Jobs").wait_for()
        picker = page.get_by_label("Schema", exact=True)
        expect(picker.locator("option")).to_have_count(511)  # "Choose a schema…" and every schema
        picker.select_option(label="Schema 0000")


def test_a_long_text_document_stalls_neither_the_server_nor_the_review_screen(
        start_daemon: Callable[..., Any]) -> None:
    """The review screen of a TXT job asks GET /api/jobs/:id/text for its lines. For 200,000
    lines (a 4.7 MB log file, within extraction.max_text_chars) the parse ran in a worker
    process, but its result came back as 200,000 dicts unpickled on the event loop and then
    encoded as JSON there: 2.9 s in which /api/health (every request of every user) waited.
    And the browser then laid out 200,000 lines: the tab froze for 10 to 25 s (2,400,000
    one-character lines, also within the limit, were 105 MB of JSON). The answer now holds the
    first MAX_TEXT_LINES lines and says how many there are; the screen says so too."""
    import threading
    import time

    from console_browser import wait_for_job_status

    with open_console(start_daemon) as console:
        page = console.page
        url = console.daemon.url
        console.register("Ann", "ann@example.com")
        token = console.api_token("ann@example.com")
        ann = bearer(token)
        schema = httpx.post(url("/api/schemas"), headers=ann, json={"name": "Log", "definition": {
            "type": "object", "properties": {"total": {"type": "number"}}}})
        body = b"".join(b"line %d total 12.00\n" % i for i in range(200_000))
        job = httpx.post(url("/api/jobs"), headers=ann, timeout=60, data={"type": "EXTRACTION",
                         "schemaId": schema.json()["id"]}, files={"file": ("log.txt", body, "text/plain")}).json()
        assert wait_for_job_status(token, console.daemon, job["id"], {"COMPLETED", "FAILED"})["status"] == "COMPLETED"

        waits: list[float] = []
        done = threading.Event()

        def health() -> None:
            with httpx.Client(timeout=60) as client:
                while not done.is_set():
                    started = time.monotonic()
                    assert client.get(url("/api/health")).status_code == 200
                    waits.append(time.monotonic() - started)
                    time.sleep(0.02)

        watcher = threading.Thread(target=health)
        watcher.start()
        try:
            text = httpx.get(url(f"/api/jobs/{job['id']}/text"), headers=ann, timeout=120)
        finally:
            done.set()
            watcher.join()
        assert text.status_code == 200, text.text[:300]
        answer = text.json()
        assert answer["lineCount"] == 200_000 and answer["truncated"] is True
        [first] = answer["pages"]
        assert len(first["lines"]) == 10_000 and first["lines"][-1]["text"] == "line 9999 total 12.00"
        assert max(waits) < 1.0, f"/api/health waited {max(waits):.2f} s while the text was answered"

        started = time.monotonic()
        page.goto(console.url(f"#/jobs/{job['id']}"))
        expect(page.get_by_text("The first 10,000 of 200,000 lines are shown")).to_be_visible(timeout=60_000)
        expect(page.locator(".text-page .line")).to_have_count(10_000)
        shown_after = time.monotonic() - started
        # The parse in the worker takes seconds on a busy machine; laying out the lines must not add to it much.
        assert shown_after < 30, f"the review screen took {shown_after:.1f} s"
        page.keyboard.press("j")  # the screen answers keys again
        console.shot("hostile-long-text")


def test_another_site_can_neither_use_the_session_nor_frame_the_console(start_daemon: Callable[..., Any]) -> None:
    """A page on another site, opened in the browser where a person is signed in, posts forms
    and no-cors fetches to the cookie routes (log out, refresh: a plain form can send neither
    the X-Docex-Session header nor, under SameSite=Strict, the cookie) and frames the console
    (frame-ancestors 'none'). The person's session survives and the frame stays empty."""
    with open_console(start_daemon) as console:
        page = console.page
        console.register("Ann", "ann@example.com")
        docex = console.daemon.url("")
        evil = "http://evil.example/"
        attacker = f"""<!doctype html><html><body>
<form id=out method=post action="{docex}/api/auth/logout" enctype="text/plain" target=sink>
<input name='{{"a":"' value='"}}'></form>
<form id=again method=post action="{docex}/api/auth/refresh" enctype="text/plain" target=sink2>
<input name='{{"a":"' value='"}}'></form>
<iframe name=sink></iframe><iframe name=sink2></iframe>
<iframe id=framed src="{docex}/"></iframe>
<script>
for (const path of ["/api/auth/logout", "/api/auth/refresh", "/api/auth/logout-all"]) {{
  fetch("{docex}" + path, {{method: "POST", mode: "no-cors", credentials: "include", body: "{{}}",
    headers: {{"Content-Type": "text/plain"}}}}).catch(() => null);
}}
document.getElementById("out").submit();
document.getElementById("again").submit();
</script></body></html>"""
        posted: list[tuple[str, str, str | None]] = []

        def on_request(request: Any) -> None:
            if request.url.startswith(docex + "/api/auth"):
                posted.append((request.method, request.url, request.headers.get("cookie")))

        # The attacker's page in the person's own browser profile (their cookies), served by
        # the route (no name resolves here); requests to docex go through.
        page.context.route(f"{evil}**", lambda route: route.fulfill(status=200, content_type="text/html",
                                                                   body=attacker))
        attack = page.context.new_page()
        attack.on("request", on_request)
        attack.goto(evil)
        attack.wait_for_timeout(1500)
        assert len([p for p in posted if p[0] == "POST"]) >= 4, posted
        assert all(cookie is None or "docex_refresh" not in cookie for _, _, cookie in posted), posted
        framed = attack.frame_locator("#framed")
        expect(framed.locator("#main")).to_have_count(0)
        attack.close()

        # The person's tab: a reload restores the session from the cookie (it was neither
        # revoked nor rotated by the other site).
        page.reload()
        page.get_by_role("heading", name="Jobs").wait_for()
        expect(page.get_by_role("button", name="Sign out")).to_be_visible()
