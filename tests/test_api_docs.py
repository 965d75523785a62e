"""The API docs at /v1/docs work where the service runs: Swagger UI's script, styles and icon come
from the service itself (the pinned fastapi-standalone-docs package), never from a CDN.

Over HTTP: the page and its assets need no key (the API does) and name no other host. In the real
browser (Debian's Chromium, never downloaded; skipped without it unless BIOMEM_REQUIRE_BROWSER=1),
with every request to a host other than 127.0.0.1 aborted and recorded: Swagger UI renders the
operations, one opens with its "Try it out" button, and no request left 127.0.0.1.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from biomem import BioMemory
from biomem.engine.keys import create_key
from biomem.server import create_app, served
from biomem.settings import Settings

from .conftest import CHROMIUM_ARGS

STEP_MS = 30_000  # the longest the page may take to show what is waited for
ASSETS = {"/v1/docs/swagger/swagger-ui-bundle.js": "javascript", "/v1/docs/swagger/swagger-ui.css": "text/css",
          "/v1/docs/fastapi/favicon.png": "image/png"}


@pytest.fixture(scope="module")
def url(tmp_path_factory, text_encoder) -> Iterator[str]:
    """The REST API and MCP (no page) over an empty store that holds a key, so the API needs one."""
    mem = BioMemory(tmp_path_factory.mktemp("docs") / "docs.db", text_model=text_encoder, limits="off")
    create_key(mem.store, "agent", "agent")
    settings = Settings.from_env().model_copy(update={"host": "127.0.0.1"})
    with served(create_app(mem, settings, ui=False)) as base:
        yield base
    mem.close()


def operation(page, method: str, path: str):
    """The summary line of one operation in Swagger UI, as a reader sees it: "POST /v1/ask ..."."""
    path = re.escape(path).replace("/", r"\/")  # Playwright sends the pattern to the page between slashes
    return page.get_by_role("button", name=re.compile(rf"^{method} {path}( |$)"))


def test_the_docs_and_their_assets_are_served_here_without_a_key(url):
    with httpx.Client(base_url=url, timeout=30) as http:
        page = http.get("/v1/docs")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "/v1/openapi.json" in page.text
        assert not re.search(r"(src|href)=[\"']?(https?:)?//", page.text), "an asset from another host"
        for path, kind in ASSETS.items():
            asset = http.get(path)
            assert asset.status_code == 200 and kind in asset.headers["content-type"], path
            assert asset.content and path in page.text, path
        assert http.get("/v1/openapi.json").status_code == 200
        assert http.get("/v1/memories").status_code == 401  # the API it documents still needs a key


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_swagger_ui_renders_the_operations_with_every_other_host_blocked(url, chromium_path, tmp_path):
    from playwright.sync_api import Route, expect, sync_playwright

    expect.set_options(timeout=STEP_MS)
    elsewhere: list[str] = []  # every request for another host, aborted
    served_here: list[str] = []

    def local_only(route: Route) -> None:
        request_url = route.request.url
        if urlparse(request_url).hostname == "127.0.0.1":
            served_here.append(urlparse(request_url).path)
            route.continue_()
        else:
            elsewhere.append(request_url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})
            context.route("**/*", local_only)
            page = context.new_page()
            page.set_default_timeout(STEP_MS)
            page.goto(f"{url}/v1/docs", wait_until="domcontentloaded")

            expect(page.get_by_role("heading", name=re.compile(r"^Bio-Memory"))).to_be_visible()
            for method, path in (("GET", "/v1/health"), ("POST", "/v1/sessions"), ("POST", "/v1/search"),
                                 ("POST", "/v1/memories"), ("POST", "/v1/ask")):
                expect(operation(page, method, path)).to_be_visible()
            ask = page.locator(".opblock").filter(has=operation(page, "POST", "/v1/ask"))
            operation(page, "POST", "/v1/ask").click()
            expect(ask.get_by_role("button", name="Try it out")).to_be_visible()  # the operation opened
            expect(page.get_by_role("button", name="Authorize")).to_be_visible()  # where a reader puts a key
            page.screenshot(path=tmp_path / "docs.png", full_page=True)
        finally:
            browser.close()

    assert not elsewhere, f"requests that would have left 127.0.0.1: {elsewhere}"
    assert set(ASSETS) <= set(served_here) and "/v1/openapi.json" in served_here
