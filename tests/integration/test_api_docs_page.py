"""`/api/docs` and the Swagger UI files it loads, served by docex itself (no CDN).

The browser check with the network blocked is tests/e2e/test_api_docs_browser.py;
these are the HTTP facts behind it: what the page references, content types,
cache headers, and that neither needs a credential.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from daemon.http.docs import ASSET_DIR, SWAGGER_UI_VERSION

ASSET_PREFIX = f"/api/docs/swagger-ui/{SWAGGER_UI_VERSION}/"


async def page_references(client: Any) -> list[str]:
    r = await client.get("/api/docs")
    assert r.status_code == 200 and r.content_type.startswith("text/html")
    html = (await r.get_data()).decode()
    return re.findall(r'(?:src|href)="([^"]+)"', html)


async def test_the_page_references_only_files_docex_serves(client: Any) -> None:
    references = await page_references(client)
    assert sorted(references) == sorted(ASSET_PREFIX + name for name in
                                        ("favicon-32x32.png", "swagger-ui.css", "swagger-ui-bundle.js"))
    html = (await (await client.get("/api/docs")).get_data()).decode()
    assert '"/api/openapi.json"' in html
    assert "validatorUrl: null" in html  # else Swagger UI posts the document to validator.swagger.io


@pytest.mark.parametrize(("name", "content_type"), [
    ("swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    ("swagger-ui.css", "text/css; charset=utf-8"),
    ("favicon-32x32.png", "image/png"),
])
async def test_assets_are_served_with_their_type_and_cached_for_a_year(client: Any, name: str,
                                                                        content_type: str) -> None:
    r = await client.get(ASSET_PREFIX + name)  # no Authorization header: public, like the page
    assert r.status_code == 200
    assert r.headers["Content-Type"] == content_type
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    cache = r.headers["Cache-Control"]
    assert "public" in cache and "max-age=31536000" in cache and "immutable" in cache
    assert await r.get_data() == (ASSET_DIR / name).read_bytes()
    # A browser that revalidates anyway gets a 304 without the body.
    again = await client.get(ASSET_PREFIX + name, headers={"If-None-Match": r.headers["ETag"]})
    assert again.status_code == 304 and await again.get_data() == b""


@pytest.mark.parametrize("path", [
    "/api/docs/swagger-ui/0.0.1/swagger-ui-bundle.js",  # a version this docex does not ship
    f"{ASSET_PREFIX}LICENSE",  # in the directory, but not a file the page loads
    f"{ASSET_PREFIX}README.md",
    f"{ASSET_PREFIX}..%2F..%2Fdocs.py",
])
async def test_anything_else_under_the_asset_path_is_404(client: Any, path: str) -> None:
    r = await client.get(path)
    assert r.status_code == 404
    assert (await r.get_json())["statusCode"] == 404


async def test_the_docs_routes_are_not_operations_of_the_api(client: Any) -> None:
    paths = (await (await client.get("/api/openapi.json")).get_json())["paths"]
    assert not [path for path in paths if path.startswith("/api/docs")]


def test_the_version_constant_names_the_vendored_bundle() -> None:
    """A refresh of the files that forgets SWAGGER_UI_VERSION would be cached under the old URL."""
    bundle = (ASSET_DIR / "swagger-ui-bundle.js").read_text(encoding="utf-8")
    assert f'PACKAGE_VERSION:"{SWAGGER_UI_VERSION}"' in bundle
    readme = (ASSET_DIR / "README.md").read_text(encoding="utf-8")
    assert f"{SWAGGER_UI_VERSION} of npm's `swagger-ui-dist`" in readme
