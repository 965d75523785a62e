"""The app attacked as an outsider with only the public page and its API would attack it.

Each test replays an attack that worked before the identity policy moved into the engine
(enrolment injection, score oracle, unlimited attempts, anonymous admin actions, probes
left in Gradio's cache, a crafted upload path) and shows that it fails now.
"""

from __future__ import annotations

import json

import gradio as gr
import httpx
import numpy as np
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from PIL import Image

import app
from biomem import BioMemory
from biomem.engine.demo import DEMO_PEOPLE, build_demo, demo_capture
from biomem.ui import Controller, uploads
from biomem.ui.messages import friendly
from tests.test_app import QUESTION, cached_images, served_app, upload

pytestmark = pytest.mark.filterwarnings("ignore::Warning:gradio.queueing")


@pytest.fixture
def demo_store(tmp_path, text_encoder, face_encoder):
    """make(**options): a store with the demo people (faces only), closed afterwards."""
    opened = []

    def make(name: str = "demo.db", **options) -> BioMemory:
        mem = BioMemory(tmp_path / name, text_model=text_encoder, encoder=face_encoder, **options)
        build_demo(mem)
        opened.append(mem)
        return mem
    yield make
    for mem in opened:
        mem.close()


def png(tmp_path, image: np.ndarray, name: str) -> str:
    path = tmp_path / f"{name}.png"
    Image.fromarray(image).save(path)
    return str(path)


def ask(client: Client, probe: str) -> dict:
    return client.predict(QUESTION, handle_file(probe), "face-arcface-s", api_name="/ask")


def test_a_stranger_is_refused_after_the_miss_limit_even_with_a_new_session(demo_store, tmp_path):
    mem = demo_store(limits="3/600/60")
    stranger = png(tmp_path, demo_capture(6, 3), "stranger")
    with served_app(mem, tmp_path / "cache") as served:
        client = Client(served.url, verbose=False)
        for _ in range(3):
            assert ask(client, stranger)["gate"] == {"matched": False, "modality": "face-arcface-s"}
        encodes = []
        encoder = mem.encoder("face-arcface-s")
        original = encoder.encode
        encoder.encode = lambda image: encodes.append(1) or original(image)  # count encoder work
        try:
            with pytest.raises(AppError) as caught:
                ask(client, stranger)
            assert caught.value.title == "Too many attempts" and "Try again in about" in caught.value.message
            with pytest.raises(AppError, match="Try again"):  # a fresh session from the same address
                ask(Client(served.url, verbose=False), stranger)
        finally:
            encoder.encode = original
        assert encodes == []  # refused before any encoder ran
        assert cached_images(served.cache) == []  # and the refused probes were deleted


def test_rejected_uploads_leave_no_file_and_a_crafted_path_reads_nothing(demo_store, tmp_path):
    mem = demo_store()
    fake = tmp_path / "notes.png"
    fake.write_text("not an image at all")  # Gradio would fail to decode it before any handler ran
    secret = tmp_path / "secret.png"
    Image.fromarray(demo_capture(0, 4)).save(secret)  # Ana's face, outside Gradio's cache
    with served_app(mem, tmp_path / "cache") as served:
        with pytest.raises(AppError) as caught:
            ask(Client(served.url, verbose=False), str(fake))
        assert caught.value.title == "Not a usable image"
        assert [p for p in served.cache.rglob("*") if p.is_file()] == []
        # raw HTTP naming a server path as the probe: refused, the file neither read as Ana nor deleted
        reply = httpx.post(served.url + "gradio_api/call/ask", json={"data": [
            QUESTION, {"path": str(secret), "meta": {"_type": "gradio.FileData"}}, "face-arcface-s"]})
        events = httpx.get(served.url + f"gradio_api/call/ask/{reply.json()['event_id']}").text
        assert "event: error" in events and "4821" not in events and "Ana" not in events
    assert secret.exists()
    assert uploads.in_cache(secret) is None
    with pytest.raises(gr.Error, match="uploaded image"):
        uploads.read_once(str(secret))
    assert secret.exists()


def test_admin_actions_are_off_for_an_anonymous_client(demo_store, tmp_path, monkeypatch):
    monkeypatch.delenv("BIOMEM_ADMIN", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    mem = demo_store()
    tau = mem.threshold("face-arcface-s")
    with served_app(mem, tmp_path / "cache") as served:
        assert served.ui.admin is False
        calibrate = next(i for i, fn in served.demo.fns.items() if [b._id for b in fn.inputs][1:2]
                         and fn.inputs[1].elem_id is None and isinstance(fn.inputs[1], gr.Radio))
        session = "attacker"
        joined = httpx.post(served.url + "gradio_api/queue/join", json={
            "data": ["face-arcface-s", "folder", str(served.cache)], "fn_index": calibrate,
            "session_hash": session, "event_data": None, "trigger_id": None})
        assert joined.status_code == 200
        with httpx.stream("GET", served.url + f"gradio_api/queue/data?session_hash={session}") as events:
            text = "".join(line for line in events.iter_lines() if "process_completed" in line
                           or "Not authorised" in line)
        assert "Not authorised" in text and "needs an admin key" in text
    assert mem.threshold("face-arcface-s") == tau


def test_the_server_binds_localhost_unless_told_and_honours_gradio_s_variables(monkeypatch):
    seen = {}

    class FakeDemo:
        def launch(self, **options):
            seen.clear()
            seen.update(options)

    for name in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "PORT", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    app.launch(FakeDemo())
    assert seen["server_name"] == "127.0.0.1" and seen["server_port"] == 7860
    monkeypatch.setenv("PORT", "8000")
    app.launch(FakeDemo())
    assert seen["server_port"] == 8000
    monkeypatch.setenv("GRADIO_SERVER_PORT", "9000")
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    app.launch(FakeDemo())
    assert seen["server_name"] == "0.0.0.0" and seen["server_port"] == 9000
    for name in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "PORT"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("SPACE_ID", "someone/bio-memory")
    app.launch(FakeDemo())
    assert seen["server_name"] == "0.0.0.0"


def test_enrolment_injection_through_the_enrol_tab_fails(demo_store, tmp_path, cache):
    mem = demo_store()
    ui = Controller(mem)
    before = mem.store.counts()
    mixed = [upload(cache, demo_capture(5, 1), "own")] + [upload(cache, demo_capture(0, n), f"ana{n}")
                                                         for n in range(2, 8)]
    with pytest.raises(gr.Error) as caught:
        friendly(ui.enroll)("Mallory", mixed, None, "face-arcface-s")
    assert caught.value.title == "Not one person"
    with pytest.raises(gr.Error) as caught:  # a new name from photos of an enrolled person
        friendly(ui.enroll)("Ana 2", [upload(cache, demo_capture(0, n), f"again{n}") for n in (3, 4)],
                                 None, "face-arcface-s")
    assert caught.value.title == "Already enrolled" and "Ana" not in caught.value.message
    with pytest.raises(gr.Error) as caught:
        friendly(ui.enroll)("ana", [upload(cache, demo_capture(5, 2), "name")], None, "face-arcface-s")
    assert caught.value.title == "Name taken"
    assert mem.store.counts() == before and cached_images(cache) == []
    assert mem.identify(demo_capture(0, 9)).labels == {1: "Ana"}


def test_demo_disclosure_shows_sample_people_but_never_a_real_enrolment(demo_store, tmp_path, cache):
    mem = demo_store(disclosure="demo")
    ui = Controller(mem)
    ui.enroll("Zoe Real", [upload(cache, demo_capture(5, n), f"zoe{n}") for n in range(2)], None, "face-arcface-s")
    ui.remember("Zoe's door code is 5511", upload(cache, demo_capture(5, 2), "zoe-memo"), "face-arcface-s")
    stranger = ui.ask(QUESTION, upload(cache, demo_capture(6, 2), "stranger"), "face-arcface-s")
    shown = {row["label"] for row in stranger["gate"]["scores"]}
    assert shown == set(DEMO_PEOPLE)  # the demo's transparency, for its sample people only
    assert all(row["score"] == round(row["score"], 2) for row in stranger["gate"]["scores"])
    assert {o["label"] for o in stranger["gated_out"]["owners"]} == set(DEMO_PEOPLE)
    assert "Zoe" not in json.dumps(stranger) and "Zoe" not in ui.status()
    with pytest.raises(Exception, match="real enrolment"):  # reopening in demo mode is refused
        BioMemory(mem.path, text_model=mem.text, encoder=mem.encoder(), disclosure="demo")


