"""The page for a crowd: eight visitors at once, each in a browser context of their own (real Chromium).

Each clicks Load demo and Compare back to back (in one tick, before the server has answered either), enrols
a person of their own (a synthetic palm), remembers a secret with it, unlocks their notes and locks them again.
No click is dropped, every visitor sees their own results only, and once they have locked nothing of theirs is
left in the server's per-visitor state. Beside it, the page's per-visitor state is tied to the client that
opened it: a second client presenting a visitor's session hash is refused before any handler runs.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import gradio as gr
import pytest
from PIL import Image

from biomem import BioMemory
from biomem.engine.demo import STRANGER, demo_capture
from biomem.errors import NotAuthorisedError
from biomem.ui import Controller, uploads
from biomem.ui.doors import door
from modalities.palmsynth import palm_capture
from tests.shared import personal_images, served_app

from .conftest import CHROMIUM_ARGS

VISITORS = 8
STEP_MS = 180_000  # eight visitors share two cores: the slowest step (load demo, then 8 compares) waits its turn
PALM = "palm-compcode"


def code(i: int) -> str:
    """Visitor i's secret code: a word no timestamp, token or other visitor's text contains."""
    return f"QZX{i}KW"


def secret(i: int) -> str:
    return f"Visitor {i}'s locker code is {code(i)}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_eight_visitors_at_once_lose_no_click_and_read_nothing_of_each_other(chromium_path, tmp_path, text_encoder,
                                                                              face_encoder):
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=STEP_MS)
    palms = {}
    for i in range(VISITORS):
        for capture in range(4):
            palms[i, capture] = tmp_path / f"visitor{i}-{capture}.png"
            Image.fromarray(palm_capture(200 + i, capture)).save(palms[i, capture])

    mem = BioMemory(tmp_path / "crowd.db", text_model=text_encoder, encoder=face_encoder)
    with served_app(mem, tmp_path / "gradio-cache") as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            pages = []
            for _ in range(VISITORS):
                page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
                page.set_default_timeout(STEP_MS)
                page.goto(server.url, wait_until="domcontentloaded")
                expect(page.locator("#bm-load-demo")).to_be_enabled()
                pages.append(page)

            # Load demo and Compare, clicked in one tick in every tab: Compare waits for the demo, then runs
            for page in pages:
                page.evaluate("() => { document.querySelector('#bm-load-demo').click();"
                              " document.querySelector('#bm-cmp-button').click(); }")
            for page in pages:
                side_a, side_b = page.locator("#bm-cmp-panel-a"), page.locator("#bm-cmp-panel-b")
                expect(page.locator("#bm-load-message")).to_contain_text(re.compile("Loaded|already here"))
                expect(side_a.locator(".bm-verdict")).to_contain_text("Matched Ana")
                expect(side_a.locator(".bm-answer")).to_contain_text("4821")
                expect(side_b.locator(".bm-verdict")).to_contain_text("No match")
                expect(page.locator("#bm-cmp-button")).to_be_enabled()
                expect(page.locator("#bm-load-demo")).to_be_enabled()
                for box in "ab":  # a sample probe's box holds a fresh capture of the same sample person
                    expect(page.locator(f"#bm-cmp-probe-{box} .image-frame img")).to_be_visible()
                expect(page.locator("[data-testid='toast-body']")).to_have_count(0)

            # a second Compare with the refilled probes, in every tab at once: the same two people again
            for page in pages:
                page.click("#bm-cmp-q-wifi")
                expect(page.locator("#bm-cmp-question textarea")).to_have_value("What is the Wi-Fi password?")
                page.click("#bm-cmp-button")
            for page in pages:
                expect(page.locator("#bm-cmp-panel-a .bm-answer")).to_contain_text("tulip-river-42")
                expect(page.locator("#bm-cmp-panel-b .bm-verdict")).to_contain_text("No match")
                expect(page.locator("#bm-cmp-button")).to_be_enabled()

            # each visitor enrols a person of their own (palms), all at once
            for i, page in enumerate(pages):
                page.click("#bm-tab-enrol-button")
                page.click("#bm-encoder input")
                page.click(f"ul[role='listbox'] li:has-text('{PALM}')")
                expect(page.locator("#bm-encoder input")).to_have_value(PALM)
                page.fill("#bm-enrol-name textarea", f"Visitor {i}")
                page.set_input_files("#bm-enrol-files input[data-testid='file-upload']",
                                     [str(palms[i, 0]), str(palms[i, 1])])
                expect(page.locator("#bm-enrol-files")).to_contain_text(f"visitor{i}-1")
                page.click("#bm-enrol")
            for i, page in enumerate(pages):
                expect(page.locator("#bm-enrol-message")).to_contain_text(f"Enrolled Visitor {i} from 2 image(s)")

            # each remembers a secret, then unlocks their notes: Remember and Unlock clicked back to back
            for i, page in enumerate(pages):
                page.fill("#bm-memo textarea", secret(i))
                page.set_input_files("#bm-memo-probe input[data-testid='file-upload']", str(palms[i, 2]))
                expect(page.locator("#bm-memo-probe .image-frame img")).to_be_visible()
                page.set_input_files("#bm-unlock-probe input[data-testid='file-upload']", str(palms[i, 3]))
                expect(page.locator("#bm-unlock-probe .image-frame img")).to_be_visible()
                page.click("#bm-memo-button")
            for i, page in enumerate(pages):
                expect(page.locator("#bm-memo-message")).to_contain_text(f"for Visitor {i}")
                page.click("#bm-unlock")
            for i, page in enumerate(pages):
                expect(page.locator("#bm-unlock-message")).to_contain_text(f"Showing the notes of Visitor {i} (1)")
                expect(page.locator("#bm-my-notes")).to_contain_text(secret(i))
                shown = page.locator("body").inner_text()
                assert [j for j in range(VISITORS) if j != i and code(j) in shown] == []

            # Lock: the listing is gone from the page and from the server's state of the visitor
            for page in pages:
                page.click("#bm-lock")
            for i, page in enumerate(pages):
                expect(page.locator("#bm-unlock-message")).to_contain_text("Locked.")
                expect(page.locator("#bm-my-notes")).not_to_contain_text(secret(i))
                expect(page.locator("#bm-lock")).to_be_enabled()
            held = json.dumps([list(state.state_data.values())
                               for state in server.demo.server_app.state_holder.session_data.values()], default=str)
            # a probe box still holds its upload's path, whose folder is a SHA-256 of the image: hex digits that
            # can spell a code by chance (one run in a few hundred did), never the code itself
            held = re.sub(r"[0-9a-f]{64}", "<digest>", held)
            assert [i for i in range(VISITORS) if code(i) in held] == []
            assert "4821" not in held and "tulip-river" not in held  # no Compare result is kept either
        finally:
            browser.close()
        assert personal_images(server) == []  # every visitor's probe and enrolment image was deleted
        assert {i.label for i in mem.identities()} >= {f"Visitor {i}" for i in range(VISITORS)}
    mem.close()


def visit(session: str, address: str, agent: str = "Mozilla/5.0") -> gr.Request:
    """A page event's request from `address` with the page session hash `session`."""
    return gr.Request(session_hash=session, client=SimpleNamespace(host=address), headers={"user-agent": agent})


def test_a_session_hash_presented_by_another_client_reaches_nothing(make_memory, cache):
    """The victim unlocks in their tab; another client presents the victim's session hash: every page event is
    refused before its handler runs. After Lock the victim's own tab cannot read the notes either."""
    ui = Controller(make_memory())
    calls = []
    view = door(ui.operators, "page:view", lambda: calls.append("ran"))
    victim = visit("tab-victim", "203.0.113.7")
    view(request=victim)
    for thief in (visit("tab-victim", "198.51.100.9"), visit("tab-victim", "203.0.113.7", agent="curl/8.0")):
        with pytest.raises(NotAuthorisedError, match="belongs to another browser"):
            view(request=thief)
    assert calls == ["ran"]
    view(request=visit("tab-other", "198.51.100.9"))  # a session of their own works
    assert calls == ["ran", "ran"]


def test_lock_and_the_unlocked_time_end_the_listing(make_memory, cache, monkeypatch):
    """Unlocked notes are readable by the tab's client only, until Lock or the unlocked time is up."""
    mem = make_memory()
    ui = Controller(mem)
    ui.load_demo()
    now = [1000.0]
    monkeypatch.setattr(mem.sessions, "clock", lambda: now[0])

    def ana(kind: str) -> str:
        path = cache / f"ana-{kind}-{len(list(cache.iterdir()))}.png"
        Image.fromarray(ui.sample_capture("Ana", kind)).save(path)
        return str(path)

    tab = visit("tab-1", "203.0.113.7")
    unlocked = ui.unlock(ana("face-arcface-s"), "face-arcface-s", ana(PALM), request=tab)
    assert any("4821" in str(row) for row in ui.my_notes(unlocked))
    assert ui.my_notes({**unlocked, "bound": "ui:session:tab-1|addr:198.51.100.9"}) is None  # another client
    ui.lock(unlocked)
    assert ui.my_notes(unlocked) is None
    again = ui.unlock(ana("face-arcface-s"), "face-arcface-s", ana(PALM), request=tab)
    assert ui.my_notes(again) is not None
    now[0] += 121.0  # UNLOCK_SECONDS have passed: a kiosk's user walked away
    assert ui.my_notes(again) is None
    uploads.discard([str(p) for p in cache.iterdir()])


def test_a_compare_with_sample_probes_spends_no_attempts(make_memory, cache, monkeypatch):
    """The page's own Stranger sample is no miss of the visitor's: Compares in a row count against nobody. A
    photo of the visitor's own (pixels the page never handed out) is an attempt like any other."""
    mem = make_memory()
    ui = Controller(mem)
    ui.load_demo()
    counted: list[object] = []
    miss = mem.limiter.miss
    monkeypatch.setattr(mem.limiter, "miss", lambda clients, misses=1: (counted.append(clients),
                                                                        miss(clients, misses))[1])
    tab = visit("tab-1", "203.0.113.7")
    for n in range(25):
        sides = []
        for person in ("Ana", "Stranger"):
            path = cache / f"{person}-{n}.png"
            Image.fromarray(ui.sample_capture(person, None)).save(path)
            sides.append(str(path))
        result = ui.compare("What is my bank card PIN?", *sides, None, tab)
        assert "4821" in result["a"]["answer"] and result["a"]["sample"] == "Ana"
        assert result["b"]["gate"]["matched"] is False and result["b"]["sample"] == "Stranger"
    assert [c for c in counted if c] == []
    own = [cache / f"own-{side}.png" for side in "ab"]
    for path in own:  # the stranger's own photo, as a visitor would upload one: not a capture the page made
        Image.fromarray(demo_capture(STRANGER, 77)).save(path)
    result = ui.compare("What is my bank card PIN?", str(own[0]), str(own[1]), None, tab)
    assert "sample" not in result["a"] and [c for c in counted if c] == [ui.clients(tab)] * 2


def test_a_compare_side_that_is_not_an_image_says_so_and_the_other_side_answers(make_memory, cache):
    """One side's file is not an image: that side says why, the other answers, and both files are gone."""
    ui = Controller(make_memory())
    ui.load_demo()
    ana, junk = cache / "ana.png", cache / "notes.png"
    Image.fromarray(ui.sample_capture("Ana", None)).save(ana)
    junk.write_bytes(b"my shopping list, not a photo")
    result = ui.compare("What is my bank card PIN?", str(ana), str(junk), None, visit("tab-1", "203.0.113.7"))
    assert "4821" in result["a"]["answer"]
    assert result["b"]["error"] and "PNG" in result["b"]["message"] and "JPEG" in result["b"]["message"]
    assert not ana.exists() and not junk.exists()
