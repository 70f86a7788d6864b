"""How the console's files are served: from the package, with a policy that allows no inline
script, no framing and no other origin; revalidated by ETag; nothing outside its folder."""

from __future__ import annotations

import re

from daemon.http.console import ASSETS, CONSOLE_DIR

ERROR_KEYS = {"statusCode", "message", "error"}


def _policy(header: str) -> dict[str, str]:
    return {part.split()[0]: " ".join(part.split()[1:]) for part in header.split(";") if part.strip()}


async def test_the_console_is_served_at_the_root_with_a_strict_policy(client) -> None:
    r = await client.get("/")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/html")
    policy = _policy(r.headers["Content-Security-Policy"])
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval', no other host
    assert policy["frame-ancestors"] == "'none'"
    assert policy["connect-src"] == "'self'"
    assert "unsafe" not in r.headers["Content-Security-Policy"]
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    page = (await r.get_data()).decode()
    # Every script is a file of this origin: an inline one would be refused by the policy anyway.
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", page, flags=re.S)
    assert scripts and all('src="/console/' in attrs and body.strip() == "" for attrs, body in scripts)
    assert not re.search(r"\son\w+=", page), "inline event handlers"
    assert "http://" not in page and "https://" not in page


async def test_every_module_the_console_imports_is_served(client) -> None:
    modules = [name for name in ASSETS if name.endswith(".js")]
    assert "js/app.js" in modules
    for name in modules:
        r = await client.get(f"/console/{name}")
        assert r.status_code == 200, name
        assert r.headers["Content-Type"] == "text/javascript; charset=utf-8"
        source = (await r.get_data()).decode()
        for imported in re.findall(r'^import .* from "(\.[^"]+)";$', source, flags=re.M):
            target = (CONSOLE_DIR / name).parent.joinpath(imported).resolve().relative_to(CONSOLE_DIR.resolve())
            assert target.as_posix() in ASSETS, f"{name} imports {imported}, which is not served"
        # Nothing from another origin: no absolute URL in any module (but a form's example text).
        fetchable = re.sub(r'placeholder: "[^"]*"', "", source)
        assert not re.search(r"""["'`]https?://""", fetchable), name


async def test_files_are_revalidated_by_etag(client) -> None:
    first = await client.get("/console/js/app.js")
    assert "no-cache" in first.headers["Cache-Control"]
    again = await client.get("/console/js/app.js", headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304


async def test_nothing_outside_the_console_folder_is_served(client) -> None:
    for path in ["/console/../console.py", "/console/%2e%2e/console.py", "/console/js/../../app.py",
                 "/console/nothing.js", "/console/", "/console/js"]:
        r = await client.get(path)
        assert r.status_code == 404, path
        assert set(await r.get_json()) >= ERROR_KEYS, path


async def test_settings_tell_a_client_what_to_show(client) -> None:
    r = await client.get("/api/settings")
    assert r.status_code == 200
    body = await r.get_json()
    assert body == {"registration": "open", "maxFileSize": 50 * 1024 * 1024, "review": {"confidenceThreshold": 0.9}}
