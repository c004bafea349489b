"""/docs and the GraphiQL page load every file they need from the service itself (the package
ships them, served under /assets/): nothing from another host, so both work offline. Only the
files the manifest names are served, each with its content type and cached for good."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from dealbase.ops.web_pages.pages import ASSETS_DIRECTORY

PAGES = {
    "/docs": {"Accept": "text/html"},
    # A browser's GET /graphql: Strawberry answers it with the IDE page.
    "/graphql": {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"},
}
CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
}
A_YEAR = 365 * 24 * 3600


class _Links(HTMLParser):
    """Every src and href of a page, whatever the element."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def page(client: TestClient, path: str) -> str:
    response = client.get(path, headers=PAGES[path])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    html: str = response.text
    return html


def loaded_urls(html: str) -> list[str]:
    """The URLs the page makes a browser fetch (a data: URL fetches nothing)."""
    links = _Links()
    links.feed(html)
    return [url for url in links.urls if urlsplit(url).scheme != "data"]


@pytest.mark.parametrize("path", PAGES)
def test_a_page_loads_its_files_from_the_service_not_from_another_host(
    client: TestClient, path: str
) -> None:
    html = page(client, path)

    urls = loaded_urls(html)
    assert urls
    for url in urls:
        parts = urlsplit(url)
        assert (parts.scheme, parts.netloc) == ("", ""), url
        assert parts.path.startswith("/assets/"), url
    # Not in a script either (a CDN named in code, an online validator).
    assert re.findall(r"\w+://", html) == []


@pytest.mark.parametrize("path", PAGES)
def test_every_file_a_page_loads_is_served_with_its_content_type(
    client: TestClient, path: str
) -> None:
    for url in loaded_urls(page(client, path)):
        response = client.get(url)

        assert response.status_code == 200, url
        assert response.headers["content-type"] == CONTENT_TYPES[Path(url).suffix], url
        assert response.headers["x-content-type-options"] == "nosniff"
        shipped = ASSETS_DIRECTORY / url.removeprefix("/assets/")
        assert response.content == shipped.read_bytes() != b""


def test_a_served_file_is_cached_for_a_year_as_its_path_names_its_version(
    client: TestClient,
) -> None:
    (script,) = [url for url in loaded_urls(page(client, "/docs")) if url.endswith(".js")]

    response = client.get(script)

    assert "@5." in script
    directives = {d.strip() for d in response.headers["cache-control"].split(",")}
    assert directives == {"public", f"max-age={A_YEAR}", "immutable"}


def test_every_file_the_manifest_serves_is_loaded_by_a_page(client: TestClient) -> None:
    """The vendored set is no larger than the pages need."""
    manifest = json.loads((ASSETS_DIRECTORY / "manifest.json").read_text())
    served = {
        f"/assets/{package['name']}@{package['version']}/{name}"
        for package in manifest["packages"]
        for name in package["serve"]
    }

    loaded = {url for path in PAGES for url in loaded_urls(page(client, path))}

    assert served == loaded


def test_docs_shows_the_openapi_document(client: TestClient) -> None:
    html = page(client, "/docs")

    assert "url: '/openapi.json'" in html
    assert "SwaggerUIBundle(" in html


def test_head_of_an_asset_answers_its_headers_without_its_body(client: TestClient) -> None:
    (script,) = [url for url in loaded_urls(page(client, "/docs")) if url.endswith(".js")]

    response = client.head(script)

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert int(response.headers["content-length"]) > 0
    assert response.content == b""


@pytest.mark.parametrize(
    "path",
    [
        # A client that does not remove dot segments itself (httpx, as browsers, does).
        "/assets/../app.py",
        "/assets/%2e%2e/app.py",
        "/assets/%2E%2E%2Fapp.py",
        "/assets/..%2f..%2fapp.py",
        "/assets/swagger-ui-dist@5.35.0/..%2f..%2fpages.py",
        "/assets/swagger-ui-dist@5.35.0/%2e%2e/%2e%2e/web_pages/pages.py",
        "/assets/%252e%252e%252fpages.py",
        "/assets/..%5cpages.py",
        "/assets/%2fetc%2fpasswd",
        "/assets//etc/passwd",
        "/assets/",
        "/assets/manifest.json",
        "/assets/swagger-ui-dist@5.35.0/LICENSE",
        "/assets/swagger-ui-dist@5.35.0/swagger-ui-bundle.js.map",
        "/assets/swagger-ui-dist@5.35.0/index.html",
    ],
)
def test_a_path_that_is_not_a_served_file_is_404(client: TestClient, path: str) -> None:
    response = client.get(path)

    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
