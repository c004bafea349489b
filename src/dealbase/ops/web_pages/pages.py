"""``GET /docs`` and ``GET /assets/...``, the GraphiQL page, and the pipeline board at
``GET /board``: every script, stylesheet and image they load is served by the service itself
from the files the package ships, so the pages work without internet access and no public CDN
sees who opens them."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypedDict

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, HTMLResponse

_HERE = Path(__file__).parent
ASSETS_DIRECTORY = _HERE / "assets"
ASSETS_PATH = "/assets"
DOCS_PATH = "/docs"
# An asset's path names its package's version (name@version/file), so its content never changes
# under a path: a browser keeps it a year and does not ask again.
CACHE_CONTROL = "public, max-age=31536000, immutable"
# By suffix, not by the mimetypes module, which reads the host's /etc/mime.types: a host that
# maps .js to text/plain would get pages whose scripts a browser refuses (nosniff).
CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
}
# In the GraphiQL template, "{{ package file }}": that file's path under /assets/.
_ASSET_MARKER = re.compile(r"\{\{ (\S+) (\S+) \}\}")

BOARD_PATH = "/board"
BOARD_DIRECTORY = _HERE / "board"
# The board's own files, which its page names as "{{ file }}" (board.js imports the others).
BOARD_FILES = ("board.js", "fields.js", "transport.js", "board.css")
_BOARD_MARKER = re.compile(r"\{\{ (\S+) \}\}")
# The page runs only its own script and style, talks only to this service, and is framed by
# no one: a key pasted into it can be read by nothing else the page could load. Trusted Types
# make the browser refuse any string written as HTML (innerHTML and the like), should the
# script ever try.
BOARD_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
        " img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none';"
        " require-trusted-types-for 'script'; trusted-types 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # The page names its files by their content: asked again each time, it names the new ones
    # after an upgrade.
    "Cache-Control": "no-cache",
}


class _Package(TypedDict):
    name: str
    version: str
    serve: list[str]


@dataclass(frozen=True)
class Asset:
    file: Path
    content_type: str


class WebAssets:
    """The files the manifest names to serve, by their path under /assets/
    (``name@version/file``). Only these are served: no request path reaches any other file."""

    def __init__(self, directory: Path = ASSETS_DIRECTORY) -> None:
        packages: list[_Package] = json.loads((directory / "manifest.json").read_text())["packages"]
        self._versions = {package["name"]: package["version"] for package in packages}
        self.served: dict[str, Asset] = {}
        for package in packages:
            for name in package["serve"]:
                path = f"{package['name']}@{package['version']}/{name}"
                file = directory / path
                # A package built without its files fails at start, not in a user's browser.
                if not file.is_file():
                    raise FileNotFoundError(f"The web asset {path} is missing from {directory}.")
                self.served[path] = Asset(file, CONTENT_TYPES[file.suffix])

    def url(self, package: str, name: str) -> str:
        path = f"{package}@{self._versions[package]}/{name}"
        if path not in self.served:
            raise KeyError(f"{path} is not a served web asset.")
        return f"{ASSETS_PATH}/{path}"


@cache
def shipped_assets() -> WebAssets:
    return WebAssets()


def graphiql_page(assets: WebAssets) -> str:
    """The GraphiQL page (Strawberry's, with its files from /assets/)."""
    template = (_HERE / "graphiql.html").read_text(encoding="utf-8")
    return _ASSET_MARKER.sub(lambda marker: assets.url(marker[1], marker[2]), template)


def docs_page(assets: WebAssets, openapi_url: str, title: str) -> bytes:
    """Swagger UI over the OpenAPI document."""
    page = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=title,
        swagger_js_url=assets.url("swagger-ui-dist", "swagger-ui-bundle.js"),
        swagger_css_url=assets.url("swagger-ui-dist", "swagger-ui.css"),
        swagger_favicon_url=assets.url("swagger-ui-dist", "favicon-32x32.png"),
        # Swagger UI would send the document to swagger.io's validator for a badge.
        swagger_ui_parameters={"validatorUrl": None},
    )
    return bytes(page.body)


@dataclass(frozen=True)
class BoardPage:
    """The board's HTML, and its files by the path it loads them under, below /board/
    (``<digest>/board.js``). The digest is of all of them: a path's content never changes, so a
    browser may keep a file for good, and the modules import one another by their own names
    (``./fields.js``), which resolve beside the importing file's path."""

    html: str
    files: dict[str, Asset]


def board_page(directory: Path = BOARD_DIRECTORY) -> BoardPage:
    digest = hashlib.sha256()
    for name in BOARD_FILES:
        digest.update(f"{name}\0".encode())
        digest.update(hashlib.sha256((directory / name).read_bytes()).digest())
    version = digest.hexdigest()[:16]
    files = {
        f"{version}/{name}": Asset(directory / name, CONTENT_TYPES[Path(name).suffix])
        for name in BOARD_FILES
    }
    template = (directory / "board.html").read_text(encoding="utf-8")
    html = _BOARD_MARKER.sub(lambda marker: _board_url(files, f"{version}/{marker[1]}"), template)
    return BoardPage(html, files)


def _board_url(files: dict[str, Asset], path: str) -> str:
    # A page naming a file the board does not serve fails at start, not in a user's browser.
    if path not in files:
        raise KeyError(f"board.html names {path}, which is not one of BOARD_FILES.")
    return f"{BOARD_PATH}/{path}"


def _served(found: Asset | None) -> FileResponse:
    """A file named by its content, cached for good; 404 for a name no file has."""
    if found is None:
        raise HTTPException(404)
    return FileResponse(
        found.file,
        media_type=found.content_type,
        headers={"Cache-Control": CACHE_CONTROL, "X-Content-Type-Options": "nosniff"},
    )


def install_web_pages(app: FastAPI, assets: WebAssets) -> None:
    """``GET /assets/{path}``, ``GET /docs`` (the app is built with ``docs_url=None``) and
    ``GET /board`` with its files."""
    assert app.openapi_url is not None
    docs = docs_page(assets, app.openapi_url, f"{app.title} - Swagger UI")
    board = board_page()

    @app.get(f"{ASSETS_PATH}/{{path:path}}", include_in_schema=False)
    async def web_asset(path: str) -> FileResponse:
        return _served(assets.served.get(path))

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return HTMLResponse(docs)

    @app.get(BOARD_PATH, include_in_schema=False)
    async def pipeline_board() -> HTMLResponse:
        return HTMLResponse(board.html, headers=BOARD_PAGE_HEADERS)

    @app.get(f"{BOARD_PATH}/{{version}}/{{name}}", include_in_schema=False)
    async def pipeline_board_file(version: str, name: str) -> FileResponse:
        return _served(board.files.get(f"{version}/{name}"))
