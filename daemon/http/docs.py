"""The API documentation page (`/api/docs`): Swagger UI served from the package.

quart-schema's own page loads Swagger UI from a CDN, so on a server without
internet it is blank. We ship the viewer's files (daemon/http/static/swagger-ui,
see its README.md) and serve them here under a path that carries their version,
so browsers may cache them for a year and a refreshed copy gets a new URL.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import trio
from markupsafe import Markup
from quart import Blueprint, Response, abort, render_template_string, request, url_for
from quart_schema import hide

from daemon.auth.guard import public

# Must match the vendored files; daemon/http/static/swagger-ui/README.md says how to refresh both.
SWAGGER_UI_VERSION = "5.35.0"
ASSET_DIR = Path(__file__).parent / "static" / "swagger-ui"
# The files the page loads, with their content types (not guessed: Python's guess for .js varies by version).
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
ONE_YEAR_SECONDS = 365 * 24 * 3600

blueprint = Blueprint("docs", __name__)

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>docex API</title>
  <link rel="icon" type="image/png" href="{{ asset('favicon-32x32.png') }}">
  <link rel="stylesheet" href="{{ asset('swagger-ui.css') }}">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{{ asset('swagger-ui-bundle.js') }}"></script>
  <script>{{ start }}</script>
</body>
</html>
"""
OPENAPI_PATH = "/api/openapi.json"
# The page's one inline script, allowed by its hash (`POLICY`) and by nothing else.
START = f"""
    SwaggerUIBundle({{
      url: "{OPENAPI_PATH}",
      dom_id: "#swagger-ui",
      deepLinking: true,
      layout: "BaseLayout",
      presets: [SwaggerUIBundle.presets.apis],
      // Swagger UI otherwise sends the document to validator.swagger.io for a badge.
      validatorUrl: null
    }});
  """
# The console's policy, but for what Swagger UI needs: its start script above, its inline
# styles, the data: URLs of its icons. The page runs on the console's origin, where a
# script could use the signed-in user's refresh cookie.
POLICY = "; ".join([
    "default-src 'none'",
    f"script-src 'self' 'sha256-{base64.b64encode(hashlib.sha256(START.encode()).digest()).decode()}'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "form-action 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
])


def _asset_url(name: str) -> str:
    return url_for("docs.swagger_ui_asset", version=SWAGGER_UI_VERSION, name=name)


@blueprint.get("/api/docs")
@public
@hide
async def swagger_ui() -> Response:
    page = await render_template_string(PAGE, asset=_asset_url, start=Markup(START))
    return Response(page, content_type="text/html; charset=utf-8",
                    headers={"Content-Security-Policy": POLICY, "Referrer-Policy": "no-referrer"})


@blueprint.get("/api/docs/swagger-ui/<version>/<name>")
@public
@hide
async def swagger_ui_asset(version: str, name: str) -> Response:
    content_type = ASSETS.get(name)
    if version != SWAGGER_UI_VERSION or content_type is None:
        abort(404)
    # Read whole, in one worker-thread hop: a file body would take two hops per 8 KiB chunk (about 400
    # for the bundle), and browsers fetch these files once a year.
    data = await trio.Path(ASSET_DIR / name).read_bytes()
    response = Response(data, mimetype=content_type)
    # The URL names the version, so the file behind it never changes.
    response.cache_control.public = True
    response.cache_control.max_age = ONE_YEAR_SECONDS
    response.cache_control.immutable = True
    response.set_etag(f"{SWAGGER_UI_VERSION}-{name}")
    return await response.make_conditional(request)
