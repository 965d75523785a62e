"""The voice probe in a real browser (Debian's Chromium via Playwright): a WAV uploaded through a recording box's
file input is measured by the Enrol tab's meter, and beside her face in Chat it makes the gate panel say who is
speaking; the recording is gone from Gradio's cache afterwards. The test waits for what a person sees, never for
a time."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from biomem import BioMemory
from tests.shared import served_app

from .conftest import CHROMIUM_ARGS
from .shared import DAN
from .test_app_voice import SPEAKER, short_clips, speech_seconds_of

STEP_MS = 60_000  # the longest any UI step may take on 2 busy cores
# Gradio's queue statistics use pandas options that pandas 3 deprecates: not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::Warning:gradio.queueing")


def upload_recording(page, box: str, path: Path) -> None:
    """Put the WAV `path` in the recording box `box` as a person does: its upload source, then the file."""
    page.click(f"{box} button[aria-label='Upload file']")
    page.set_input_files(f"{box} input[type='file']", str(path))


def test_a_recording_is_metered_and_says_who_is_speaking(chromium_path, tmp_path, text_encoder, face_encoder,
                                                         capture):
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=STEP_MS)
    hers = short_clips(SPEAKER)
    face = tmp_path / "dana.png"
    Image.fromarray(capture(DAN, 3)).save(face)
    mem = BioMemory(tmp_path / "voice.db", text_model=text_encoder, encoder=face_encoder)
    dana = mem.enroll("Dana", {"face-arcface-s": [capture(DAN, 0), capture(DAN, 1)],
                               "voice-ge2e": [c.path for c in hers[:3]]})
    mem.add("My locker code is 5150", identity=dana.id)
    with served_app(mem, tmp_path / "gradio-cache") as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            page.set_default_timeout(STEP_MS)
            page.goto(server.url, wait_until="domcontentloaded")

            page.click("#bm-tab-enrol-button")
            upload_recording(page, "#bm-enrol-voice-1", hers[3].path)
            heard = speech_seconds_of(hers[3].path)
            expect(page.locator("#bm-enrol-meter-1")).to_contain_text(f"heard {heard:.1f} s of speech (needs 2 s)")

            page.click("#bm-tab-chat-button")
            page.set_input_files("#bm-chat-probe input[data-testid='file-upload']", str(face))
            expect(page.locator("#bm-chat-probe .image-frame img")).to_be_visible()
            upload_recording(page, "#bm-chat-voice", hers[4].path)
            expect(page.locator("#bm-chat-voice audio, #bm-chat-voice [data-testid='waveform-Audio']").first) \
                .to_be_attached()
            page.fill("#bm-question textarea", "What is my locker code?")
            page.click("#bm-ask")
            panel = page.locator("#bm-chat-panel")
            expect(panel.locator(".bm-speaker")).to_contain_text("Who is speaking: Dana")
            expect(page.locator("#bm-chatbot")).to_contain_text("5150")
            expect(page.locator("#bm-ask")).to_be_enabled()
            said = hers[4].path.read_bytes()
            assert not [p for p in server.cache.rglob("*") if p.is_file() and p.read_bytes() == said]  # deleted
        finally:
            browser.close()
    mem.close()
