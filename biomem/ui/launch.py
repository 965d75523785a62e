"""Serving the page: Gradio's launch with this app's privacy settings, a test server, and main()."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import gradio as gr

from modalities.images import MAX_FILE_BYTES

from ..engine.memory import BioMemory
from ..settings import Settings
from ..stopping import stopped_by_signals
from .layout import build_app
from .style import CSS, THEME

log = logging.getLogger("biomem.ui")


# The page's privacy and look wherever it is served: launch() here, and mounted by `biomem serve`.
PAGE_OPTIONS: dict[str, Any] = dict(
    run_history=False, enable_monitoring=False, mcp_server=False, ssr_mode=False, pwa=False, show_error=False,
    footer_links=["api", "gradio", "settings"], max_file_size=MAX_FILE_BYTES, theme=THEME, css=CSS)


def launch(page: gr.Blocks, settings: Settings | None = None, **overrides: Any) -> Any:
    """page.launch() with PAGE_OPTIONS and no share link, on settings.host:port. The client address is the
    socket's peer, as under `biomem serve`: X-Forwarded-For counts only through BIOMEM_TRUST_PROXY."""
    settings = settings or Settings.from_env()
    # _frontend=False skips only Gradio's "is localhost reachable, else demand a share link" check: one HEAD of the
    # page with a 3 s timeout, which a busy 2-core machine can miss, aborting a launch whose server is up; this
    # page never has a share link, so the check has nothing to offer it.
    options = dict(server_name=settings.host, server_port=settings.port, share=False, _frontend=False, **PAGE_OPTIONS)
    # Gradio's uvicorn would take the client address from X-Forwarded-For of any loopback peer (its default
    # FORWARDED_ALLOW_IPS): a local program, or a web page through DNS rebinding, could pick its attempt-limit key.
    with mock.patch.dict(os.environ, {"FORWARDED_ALLOW_IPS": ""}):
        return page.launch(**{**options, **overrides})


@contextmanager
def served(mem: BioMemory, cache: Path, **build: Any) -> Iterator[tuple[str, gr.Blocks]]:
    """(url, page) of the app over `mem` on a free 127.0.0.1 port, Gradio's uploads in `cache`;
    closed afterwards. For tests and benchmarks that drive the public page."""
    from ..notes.llamacpp import free_port

    with mock.patch.dict(os.environ, {"GRADIO_TEMP_DIR": str(cache)}):
        page = build_app(mem, **build)
        try:
            _, url, _ = launch(page, server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
                               quiet=True)
            yield url, page
        finally:
            page.close()


def main() -> None:
    """`python app.py`: settings from the environment, the demo built if asked, served on settings.port until
    SIGTERM or SIGINT; every way out closes the page and the store (its SQLite write-ahead log checkpointed)."""
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Gradio's own start-up probes
    with stopped_by_signals():
        page = build_app(settings=settings)
        ui = page.biomem_app
        try:
            if settings.load_demo and not ui.mem.identities():
                log.info("%s", ui.load_demo())
            launch(page, settings)
        finally:
            page.close()
            ui.mem.close()
