"""The web console: `/` and the files under `/console/`, shipped in the package.

The console is plain ES modules, HTML and CSS (daemon/http/static/console): no build
step, no Node toolchain, nothing fetched from another origin. It is a client of the
public JSON API and nothing else, so every screen uses the routes, auth and errors an
integration uses.

Its policy (`CONSOLE_HEADERS`): scripts only from this origin and never inline, no
framing (clickjacking), images from this origin or the `blob:` URLs the page makes of
page images it fetched with its token. Document text is put in the page as text
nodes only (static/console/js/dom.js), so a value such as `<img onerror=…>` shows
its characters.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from quart import Blueprint, Response, abort, request
from quart_schema import hide

from daemon.auth.guard import public

CONSOLE_DIR = Path(__file__).parent / "static" / "console"
# Content types by suffix, not guessed: Python's guess for .js varies by version.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' blob:",
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
])
CONSOLE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
}

blueprint = Blueprint("console", __name__)


@dataclass(frozen=True)
class Asset:
    data: bytes
    content_type: str
    etag: str


def load_assets(directory: Path = CONSOLE_DIR) -> dict[str, Asset]:
    """Every console file by its path under `directory`, read once: the console is small
    (tens of KiB), and a file on disk cannot change under a running daemon's page."""
    assets = {}
    for path in sorted(directory.rglob("*")):
        content_type = CONTENT_TYPES.get(path.suffix)
        if path.is_file() and content_type is not None:
            data = path.read_bytes()
            assets[path.relative_to(directory).as_posix()] = Asset(
                data, content_type, hashlib.sha256(data).hexdigest()[:32])
    return assets


ASSETS = load_assets()


async def _serve(name: str) -> Response:
    asset = ASSETS.get(name)
    if asset is None:
        abort(404)
    response = Response(asset.data, content_type=asset.content_type)
    # Revalidated on every load (a 304 on loopback costs little), so an upgraded daemon's
    # console is never mixed with the modules of the old one.
    response.cache_control.no_cache = True
    response.set_etag(asset.etag)
    response.headers.update(CONSOLE_HEADERS)
    return await response.make_conditional(request)


@blueprint.get("/")
@public
@hide
async def console_page() -> Response:
    return await _serve("index.html")


@blueprint.get("/console/<path:name>")
@public
@hide
async def console_asset(name: str) -> Response:
    return await _serve(name)
