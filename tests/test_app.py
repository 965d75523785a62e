"""The Gradio app as visitors and API clients meet it: launched in-process, driven by gradio_client.

Two clients with different probes get different memories, a stranger gets none, compare
returns both sides; only ask/remember/compare are public; probes leave no file behind;
errors arrive as one readable line. The handlers behind the private events (enrol, unlock,
delete, forget, import, calibrate) are checked directly.
"""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from PIL import Image

from biomem import BioMemory
from biomem.engine.demo import DEMO_HOUSEHOLD, DEMO_PEOPLE, DEMO_SHARED, build_demo, demo_capture
from biomem.identity.calibrate import SAMPLE_PALMS
from biomem.identity.samples import group_photo_path
from biomem.notes.llm import OfflineLLM, OpenAIChat
from biomem.ui import Controller, render, uploads
from biomem.ui.bursts import MAX_FRAME_BYTES, Frames, frame_bytes
from biomem.ui.controller import NO_HOUSEHOLD_CHOSEN
from biomem.ui.messages import friendly
from biomem.ui.turns import Crowded, Repeated, Turns
from modalities.palmsynth import palm_capture

from .shared import cached_images, served_app, upload

QUESTION = "What is my bank card PIN?"
PINS = {"Ana": "4821", "Ben": "7390", "Chloe": "1156"}
WIFI, PARTY = (text for text, *_ in DEMO_SHARED)  # the demo household's notes: for all, and hidden from Chloe
HOME_NOTES = {(DEMO_HOUSEHOLD, author, text) for text, _, author, _ in DEMO_SHARED}  # (from, by, note)
YAO_PALM = 7  # the synthetic palm seed of Yao, an ordinary person: none of the sample people's
# Gradio's queue statistics use pandas options that pandas 3 deprecates: not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::Warning:gradio.queueing")


@pytest.fixture(scope="module")
def server(tmp_path_factory, text_encoder, face_encoder) -> Iterator[SimpleNamespace]:
    """The demo store (faces + synthetic palms) served once for this module."""
    root = tmp_path_factory.mktemp("app")
    mem = BioMemory(root / "app.db", text_model=text_encoder, encoder=face_encoder)
    with served_app(mem, root / "gradio-cache", admin=True) as served:
        assert "Loaded Ana, Ben, Chloe" in served.ui.load_demo()
        yield served
    mem.close()


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[str, str]:
    """Probe files as a visitor would upload them: new captures, never the enrolment ones."""
    folder = tmp_path_factory.mktemp("probes")
    images = {label: demo_capture(person, 10) for person, label in enumerate(DEMO_PEOPLE)}
    images["Stranger"] = demo_capture(6, 7)
    images["Ana palm"] = palm_capture(1, 7)
    images["blank"] = np.full((256, 256, 3), 128, np.uint8)
    paths = {}
    for name, image in images.items():
        paths[name] = str(folder / f"{name.replace(' ', '_')}.png")
        Image.fromarray(image).save(paths[name])
    paths["group"] = str(group_photo_path())
    return paths


def ask(client: Client, probe: str, question: str = QUESTION, encoder: str = "face-arcface-s") -> dict:
    return client.predict(question, handle_file(probe), encoder, api_name="/ask")


# ---- the public API ------------------------------------------------------------------------------

def test_only_ask_remember_and_compare_are_public(server):
    info = Client(server.url, verbose=False).view_api(print_info=False, return_format="dict")
    assert set(info["named_endpoints"]) == {"/ask", "/remember", "/compare"}
    assert not info["unnamed_endpoints"]
    private = [d for d in server.demo.fns.values() if d.api_visibility == "private"]
    assert len(private) > 20  # every internal event: sample buttons, rendering, enrol, forget, ...


def labels_in(result: dict) -> set[str]:
    """Which enrolled people's names appear anywhere in a reply."""
    text = json.dumps(result)
    return {label for label in DEMO_PEOPLE if label in text}


def test_two_clients_with_different_probes_get_different_gated_sets(server, probes):
    clients = {who: Client(server.url, verbose=False) for who in ("Ana", "Ben")}
    with ThreadPoolExecutor(2) as pool:  # at the same time, as two visitors would
        ana, ben = pool.map(lambda who: ask(clients[who], probes[who]), ("Ana", "Ben"))
    for label, result in (("Ana", ana), ("Ben", ben)):
        assert result["gate"]["matched"] and result["gate"]["label"] == label
        assert [a["label"] for a in result["gate"]["admitted"]] == [label]
        assert PINS[label] in result["answer"]
        assert result["notes"] and all({"content", "score", "timestamp"} <= set(n) for n in result["notes"])
        # their household's notes (k = 10 reaches them all) say where they came from and who wrote them
        shared = [n for n in result["notes"] if n["scope"] is not None]
        assert {(n["scope_label"], n["author_label"], n["content"]) for n in shared} == HOME_NOTES
        # the private disclosure: their own label, notes and a total kept out, nobody else's anything
        own_notes = [n for n in result["notes"] if n["scope"] is None]
        assert {n["author_label"] for n in own_notes} == {label} and {n["scope_label"] for n in own_notes} == {None}
        assert labels_in({**result, "notes": own_notes, "prompt": ""}) == {label} and "scores" not in result["gate"]
        assert set(result["gated_out"]) == {"total"} and result["gated_out"]["total"] > 0
        own = result["gate"]["admitted"][0]["score"]
        assert own == round(own, 2) and all(n["score"] == round(n["score"], 2) for n in result["notes"])
        others = [pin for who, pin in PINS.items() if who != label]
        assert not any(pin in json.dumps(result) for pin in others)  # not in notes, prompt or summary
    own_ids = [{n["id"] for n in result["notes"] if n["scope"] is None} for result in (ana, ben)]
    assert own_ids[0].isdisjoint(own_ids[1])


def test_a_stranger_learns_only_no_match(server, probes):
    result = ask(Client(server.url, verbose=False), probes["Stranger"])
    assert result["gate"] == {"matched": False, "modality": "face-arcface-s"}
    assert result["notes"] == [] and result["gated_out"] is None
    assert "no memories" in result["answer"]
    assert labels_in(result) == set() and "score" not in json.dumps(result)
    assert not any(pin in json.dumps(result) for pin in PINS.values())


def test_compare_returns_both_sides(server, probes):
    client = Client(server.url, verbose=False)
    result = client.predict(QUESTION, handle_file(probes["Chloe"]), handle_file(probes["Stranger"]),
                            "face-arcface-s", api_name="/compare")
    assert result["question"] == QUESTION
    assert result["a"]["gate"]["label"] == "Chloe" and PINS["Chloe"] in result["a"]["answer"]
    assert result["b"]["gate"]["matched"] is False and result["b"]["notes"] == []
    assert labels_in(result["b"]) == set()
    # one side failing does not hide the other: a blank image has no face
    mixed = client.predict(QUESTION, handle_file(probes["Ana"]), handle_file(probes["blank"]),
                           "face-arcface-s", api_name="/compare")
    assert mixed["a"]["gate"]["label"] == "Ana"
    assert mixed["b"] == {"error": "No face found", "message": mixed["b"]["message"]}


def test_a_palm_probe_opens_the_same_person_s_memories(server, probes):
    result = ask(Client(server.url, verbose=False), probes["Ana palm"], encoder="palm-compcode")
    assert result["gate"]["modality"] == "palm-compcode" and result["gate"]["label"] == "Ana"
    assert PINS["Ana"] in result["answer"]


@pytest.fixture(scope="module")
def yao(server, newcomer, tmp_path_factory) -> SimpleNamespace:
    """Yao, enrolled beside the demo people with a face and a synthetic palm as an ordinary person (the demo's
    sample people are read-only to probes): a probe file of a new capture, and more captures."""
    person = server.mem.enroll("Yao", [newcomer(0, 0), newcomer(0, 1)])
    server.mem.add_templates(person.id, [palm_capture(YAO_PALM, 0), palm_capture(YAO_PALM, 1)], "palm-compcode")
    probe = tmp_path_factory.mktemp("yao") / "yao.png"
    Image.fromarray(newcomer(0, 2)).save(probe)
    return SimpleNamespace(id=person.id, probe=str(probe), face=lambda n: newcomer(0, n),
                           palm=lambda n: palm_capture(YAO_PALM, n))


def test_a_sample_person_s_memories_are_read_only_to_the_page(server, probes):
    client = Client(server.url, verbose=False)
    before = server.mem.store.note_total()
    with pytest.raises(AppError, match="Ben is one of the demo's sample people") as refused:
        client.predict("My gym locker is number 317", handle_file(probes["Ben"]), "face-arcface-s",
                       api_name="/remember")
    assert refused.value.title == "Sample person: read-only" and "Enrol yourself" in refused.value.message
    assert server.mem.store.note_total() == before


def test_remember_by_chat_then_only_the_owner_gets_it_back(server, probes, yao):
    client = Client(server.url, verbose=False)
    stored = client.predict("My gym locker is number 318", handle_file(yao.probe), "face-arcface-s",
                            api_name="/remember")
    assert stored["owner"] == "Yao" and stored["note"]["content"] == "My gym locker is number 318"
    assert "318" in ask(client, yao.probe, "Which gym locker is mine?")["answer"]
    assert "318" not in json.dumps(ask(client, probes["Ana"], "Which gym locker is mine?"))
    with pytest.raises(AppError, match="matches nobody enrolled"):
        client.predict("I am not enrolled", handle_file(probes["Stranger"]), "face-arcface-s", api_name="/remember")
    cache = server.cache / "fresh"
    cache.mkdir(exist_ok=True)
    face, palm = cache / "yao.png", cache / "yao-palm.png"
    Image.fromarray(yao.face(3)).save(face)
    with pytest.raises(gr.Error, match="palm-compcode missing"):  # Yao enrolled a face and a palm
        friendly(server.ui.delete_note)(stored["note"]["id"], str(face), "face-arcface-s")
    assert not face.exists()  # a refused action still deletes its probe
    cache.mkdir(exist_ok=True)
    Image.fromarray(yao.face(4)).save(face)
    Image.fromarray(yao.palm(8)).save(palm)
    message = server.ui.delete_note(stored["note"]["id"], str(face), "face-arcface-s", str(palm))
    assert message.startswith("Deleted note") and not face.exists() and not palm.exists()


@pytest.mark.parametrize("probe,title,words", [
    ("blank", "No face found", "No face was found"),
    ("group", "More than one face", "several faces"),
])
def test_errors_reach_the_client_as_one_readable_line(server, probes, probe, title, words):
    with pytest.raises(AppError) as caught:
        ask(Client(server.url, verbose=False), probes[probe])
    assert caught.value.title == title and words in caught.value.message
    assert "Traceback" not in caught.value.message and str(server.cache) not in caught.value.message


def test_missing_inputs_are_refused_with_a_message(server, probes):
    client = Client(server.url, verbose=False)
    with pytest.raises(AppError, match="Type a question"):
        ask(client, probes["Ana"], question="  ")
    with pytest.raises(AppError, match="Give both probes"):
        client.predict(QUESTION, handle_file(probes["Ana"]), None, "face-arcface-s", api_name="/compare")


def test_no_probe_file_stays_in_gradios_cache(server, probes):
    client = Client(server.url, verbose=False)
    ask(client, probes["Ana"])
    with pytest.raises(AppError):
        ask(client, probes["blank"])
    client.predict(QUESTION, handle_file(probes["Ben"]), handle_file(probes["Stranger"]), "face-arcface-s",
                   api_name="/compare")
    assert cached_images(server.cache) == []


def test_privacy_settings_of_the_launched_app(server, tmp_path):
    demo = server.demo
    assert demo.analytics_enabled is False and os.environ["GRADIO_ANALYTICS_ENABLED"] == "False"
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] in ("1", "True")  # Gradio rewrites it to "True"
    assert demo.run_history is False and "runs" not in demo.footer_links
    assert demo.enable_monitoring is False and not demo.mcp_server and not demo.share
    assert demo.delete_cache is not None
    outside = tmp_path / "keep.png"
    outside.write_bytes(b"x")
    uploads.discard(outside)  # only files inside Gradio's cache are ever deleted
    assert outside.exists()


# ---- webcam bursts ------------------------------------------------------------------------------

def streamed(image: np.ndarray) -> dict:
    """One frame of a started burst camera as the page streams it: a JPEG data: URL in the request, no file."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=92)
    return {"path": None, "url": "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()}


def too_far(image: np.ndarray) -> np.ndarray:
    """A 640 x 480 webcam frame with `image`'s face 60 px wide in its middle: a visitor standing too far away."""
    frame = np.full((480, 640, 3), 120, np.uint8)
    frame[210:270, 290:350] = np.asarray(Image.fromarray(image).resize((60, 60)))
    return frame


def chat_burst(demo: gr.Blocks) -> SimpleNamespace:
    """The page's own handlers of the Chat probe box's burst (its camera's stream, "Take 3 frames", an image
    arriving in the box) and of Ask."""
    def event(test) -> object:
        return next(f.fn for f in demo.fns.values() if test(f))

    def on_chat_box(f) -> bool:
        boxes = {getattr(b, "elem_id", None) for b in f.inputs + f.outputs}
        return bool(boxes & {"bm-chat-probe", "bm-chat-probe-camera"})

    return SimpleNamespace(stream=event(lambda f: f.connection == "stream" and on_chat_box(f)),
                           take=event(lambda f: f.fn.__name__ == "armed" and on_chat_box(f)),  # (frames, box)
                           replaced=event(lambda f: f.fn.__name__ == "replaced" and on_chat_box(f)),
                           # (question, probe, frames, encoder, request) -> the API's JSON (and the State beside it)
                           ask=lambda *args: event(lambda f: f.api_name == "ask")(*args)[0])


def taken(page: SimpleNamespace, images: list[np.ndarray]) -> Frames:
    """A burst of `images` taken through the page's handlers: "Take 3 frames", then the camera's stream."""
    frames = Frames()
    page.take(frames, None)
    for image in images:
        page.stream(streamed(image), frames)
    return frames


def test_a_webcam_burst_is_fused_into_one_probe_for_one_message(server):
    page = chat_burst(server.demo)
    frames = Frames()
    assert page.stream(streamed(demo_capture(0, 13)), frames) == (gr.skip(), None)  # no burst asked for: dropped
    assert frames.held == 0
    held, status, box = page.take(frames, None)
    assert held is frames and "taking **3 frames**" in status and box is None  # the burst replaces the box's image
    shown = [page.stream(streamed(demo_capture(0, n)), frames) for n in (13, 14, 15, 16)]
    assert [text for text, _ in shown] == ["Hold still… **1 of 3 frames** taken.", "Hold still… **2 of 3 frames** "
                                           "taken.", frames.status(), gr.skip()]  # a fourth frame is dropped
    assert frames.status().startswith("**Burst: 3 frames**") and frames.held == 3
    assert all(camera is None for _, camera in shown)  # Gradio's copy of the camera's value holds no frame
    result = page.ask(QUESTION, None, frames, "face-arcface-s", None)
    assert result["gate"]["label"] == "Ana" and PINS["Ana"] in result["answer"]
    assert frames.held == 0 and "used a burst of **3 frames**" in frames.status()
    assert page.stream(streamed(demo_capture(0, 17)), frames) == (gr.skip(), None) and frames.held == 0
    with pytest.raises(gr.Error, match="No probe"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the hint's toast, outside a page)
        page.ask(QUESTION, None, frames, "face-arcface-s", None)  # used once
    assert cached_images(server.cache) == []


def test_a_burst_says_when_every_frame_is_too_poor_or_the_frames_show_different_people(server):
    page = chat_burst(server.demo)
    for images, title, words in (
            ([too_far(demo_capture(1, n)) for n in (17, 18, 19)], "Poor capture: move closer",
             "None of the burst's 3 frames was clear enough. The face is"),
            ([demo_capture(0, 17), demo_capture(1, 17), demo_capture(0, 18)], "More than one person",
             "The burst's 3 frames show different people")):
        frames = taken(page, images)
        with pytest.raises(gr.Error) as refused:
            page.ask(QUESTION, None, frames, "face-arcface-s", None)
        assert refused.value.title == title and words in refused.value.message
        assert not set(DEMO_PEOPLE) & set(refused.value.message.replace(".", " ").split())
        assert frames.held == 0 and "used a burst of **3 frames**" in frames.status()  # used, whatever happened
    # one frame too far among good ones is skipped: the others still make the probe
    frames = taken(page, [demo_capture(1, 17), too_far(demo_capture(1, 18)), demo_capture(1, 19)])
    assert page.ask(QUESTION, None, frames, "face-arcface-s", None)["gate"]["label"] == "Ben"


def test_the_latest_probe_wins_whatever_order_the_events_run_in(server):
    """Taking a burst empties the box, and the change event of the image it emptied, run late, leaves the burst
    alone; an image put in the box afterwards drops the burst, and an image in the box at the message wins."""
    page = chat_burst(server.demo)
    server.cache.mkdir(parents=True, exist_ok=True)
    shown = {"path": upload(server.cache, demo_capture(6, 21), "shown")}  # a stranger in the box
    frames = Frames()
    assert page.take(frames, shown)[2] is None  # the box is emptied
    for n in (21, 22, 23):
        page.stream(streamed(demo_capture(0, n)), frames)
    assert page.replaced(shown, frames) == gr.skip() and frames.held == 3  # the emptied image's late change
    assert page.replaced(None, frames) == gr.skip() and frames.held == 3  # the box emptied
    later = {"path": upload(server.cache, demo_capture(1, 21), "later")}  # Ben, put in the box afterwards
    assert page.replaced(later, frames).startswith("No burst") and frames.held == 0
    frames = taken(page, [demo_capture(0, n) for n in (21, 22, 23)])
    result = page.ask(QUESTION, later, frames, "face-arcface-s", None)  # (Ben came after this burst too)
    assert result["gate"]["label"] == "Ben" and frames.held == 0 and frames.status().startswith("No burst")
    uploads.discard(shown)  # (the page's own watch deletes what a box held; no page here)
    assert cached_images(server.cache) == []


def test_a_streamed_frame_is_image_bytes_in_the_request_never_a_path(server, tmp_path):
    secret = server.cache / "kept" / "secret.png"
    secret.parent.mkdir(parents=True)
    Image.fromarray(demo_capture(0, 20)).save(secret)
    good = streamed(demo_capture(0, 20))
    assert frame_bytes(good) == base64.b64decode(good["url"].split(",")[1]) == frame_bytes(good["url"])
    for crafted in ({"path": str(secret)}, {"path": str(secret), "url": None}, {"url": f"file://{secret}"},
                    {"url": "data:text/plain;base64,aGVsbG8="}, {"url": "data:image/png,%89PNG"},
                    {"url": "data:image/png;base64,not base64!"}, {"url": "data:image/png;base64,"},
                    {"url": "data:image/jpeg;base64," + "A" * (MAX_FRAME_BYTES * 4 // 3 + 8)}, str(secret), None, 7):
        assert frame_bytes(crafted) is None, crafted
    page = chat_burst(server.demo)
    frames = Frames()
    page.take(frames, None)
    with pytest.raises(gr.Error) as ended:  # no camera frame: that stream ends at once, unseen
        page.stream({"path": str(secret)}, frames)
    assert not ended.value.visible and frames.held == 0
    assert secret.exists()  # nothing read, nothing deleted
    secret.unlink()
    secret.parent.rmdir()


# ---- handlers behind the private events ---------------------------------------------------------



def test_enrol_unlock_delete_and_forget_me(make_memory, capture, cache):
    mem = make_memory()
    ui = Controller(mem, admin=False)
    files = [upload(cache, capture(3, n), f"enrol{n}") for n in range(3)]
    steps = []
    message = ui.enroll("Dana", files[:2], files[2], "face-arcface-s", lambda *a, **k: steps.append(a))
    assert "Enrolled **Dana** from 3 image(s)" in message and len(steps) >= 3
    assert cached_images(cache) == []  # enrolment images are deleted once encoded
    with pytest.raises(gr.Error, match="already enrolled") as caught:
        friendly(ui.enroll)("Dana again", [upload(cache, capture(3, 4), "again")], None, "face-arcface-s")
    assert "Dana" not in caught.value.message  # never says whom
    palms = [upload(cache, palm_capture(5, n), f"palm{n}") for n in range(2)]  # a first palm in a face store
    assert "Enrolled **Pat** from 2 image(s) with `palm-compcode`" in ui.enroll("Pat", palms, None, "palm-compcode")

    ui.remember("My bike lock code is 2468", upload(cache, capture(3, 5), "memo"), "face-arcface-s")
    with pytest.raises(gr.Error, match="fresh, clear probe"):
        friendly(ui.unlock)(upload(cache, capture(6, 1), "stranger"), "face-arcface-s")
    session = ui.unlock(upload(cache, capture(3, 6), "unlock"), "face-arcface-s")
    assert session["label"] == "Dana" and "probe" not in session  # a view and a session token, never a probe
    rows = session["rows"]
    assert [r[2] for r in rows] == ["My bike lock code is 2468"]
    ui.remember("My locker is 12", upload(cache, capture(3, 11), "memo2"), "face-arcface-s")
    assert [r[2] for r in ui.my_notes(session)] == ["My bike lock code is 2468", "My locker is 12"]  # refreshed
    rows = ui.my_notes(session)
    with pytest.raises(gr.Error, match="None of your notes"):
        friendly(ui.delete_note)(10_000, upload(cache, capture(3, 7), "fresh"), "face-arcface-s")
    with pytest.raises(gr.Error, match="fresh, clear probe"):  # someone else's fresh probe
        friendly(ui.delete_note)(rows[0][0], upload(cache, capture(6, 2), "other"), "face-arcface-s")
    for row in rows:
        message = ui.delete_note(row[0], upload(cache, capture(3, 8), f"fresh-{row[0]}"), "face-arcface-s")
        assert "Deleted note" in message
    assert ui.my_notes(session) == []
    ui.lock(session)
    assert ui.my_notes(session) is None  # locked: the session has ended

    with pytest.raises(gr.Error, match="Tick the box"):
        ui.forget(False, upload(cache, capture(3, 9), "unticked"), "face-arcface-s")
    assert "Forgot **Dana**" in ui.forget(True, upload(cache, capture(3, 10), "forget"), "face-arcface-s")
    assert [i.label for i in mem.identities()] == ["Pat"]
    assert cached_images(cache) == []


def test_a_stale_tab_cannot_touch_the_next_person(make_memory, capture, cache):
    """Dan forgets himself in one tab, Eve enrols: Dan's other tab can read or erase nothing."""
    mem = make_memory()
    ui = Controller(mem)
    ui.enroll("Dan", [upload(cache, capture(3, n), f"dan{n}") for n in range(2)], None, "face-arcface-s")
    stale = ui.unlock(upload(cache, capture(3, 2), "dan-tab"), "face-arcface-s")
    dan_id = next(i.id for i in mem.identities() if i.label == "Dan")
    ui.forget(True, upload(cache, capture(3, 3), "dan-forget"), "face-arcface-s")
    assert ui.my_notes(stale) is None  # his other tab's listing ended with him
    eve = ui.enroll("Eve", [upload(cache, capture(5, n), f"eve{n}") for n in range(2)], None, "face-arcface-s")
    assert "Enrolled **Eve**" in eve
    ui.remember("Eve's locker is 77", upload(cache, capture(5, 2), "eve-memo"), "face-arcface-s")
    eve_id = next(i.id for i in mem.identities() if i.label == "Eve")
    assert eve_id != dan_id  # ids are never reused
    for action in (lambda p: ui.forget(True, p, "face-arcface-s"), lambda p: ui.delete_note(1, p, "face-arcface-s"),
                   lambda p: ui.unlock(p, "face-arcface-s")):
        with pytest.raises(gr.Error, match="fresh, clear probe"):
            friendly(action)(upload(cache, capture(3, 4), "dan-again"))
    assert [n.content for n in mem.store.all_notes(eve_id)] == ["Eve's locker is 77"]


def test_llm_unreachable_is_a_readable_message_not_a_traceback(make_memory, text_encoder, face_probe, capture,
                                                             cache):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    llm = OpenAIChat("gone", OfflineLLM(text_encoder), base_url=dead, api_key="x", timeout=2)
    mem = make_memory(llm=llm)
    mem.enroll("Eve", [face_probe(0, 0), face_probe(0, 1)])
    with pytest.raises(gr.Error) as caught:
        friendly(Controller(mem).ask)(QUESTION, upload(cache, capture(0, 3), "probe"), "face-arcface-s")
    assert caught.value.title == "LLM unreachable"
    assert "127.0.0.1" not in caught.value.message and "Traceback" not in caught.value.message


def test_a_demo_person_unlocks_my_notes_with_the_sample_buttons(server, probes):
    """Ana enrolled a face and a palm: the first box's sample is her face, the second box's her palm."""
    ui, folder = server.ui, server.cache / "unlock"
    folder.mkdir(exist_ok=True)
    face, palm = folder / "face.png", folder / "palm.png"
    Image.fromarray(ui.sample_capture("Ana", "face-arcface-s")).save(face)
    Image.fromarray(ui.second_sample("Ana", "face-arcface-s")).save(palm)
    session = ui.unlock(str(face), "face-arcface-s", str(palm))
    assert session["label"] == "Ana" and any(PINS["Ana"] in row[2] for row in session["rows"])
    assert not face.exists() and not palm.exists()
    ui.lock(session)


def test_the_second_probe_samples_need_a_second_kind_in_the_store(make_memory):
    with pytest.raises(gr.Error, match="leave the second one empty") as caught, \
            pytest.warns(UserWarning, match="No second kind"):  # gr.Warning outside a page
        friendly(Controller(make_memory()).second_sample)("Ana", "face-arcface-s")
    assert caught.value.title == "No second kind" and caught.value.visible is False  # a hint, shown as a warning


def test_a_second_start_of_the_same_action_in_the_same_tab_is_ignored(make_memory):
    """Gradio can dispatch one double click twice: the second start stops, invisibly, until the first lands."""
    ui = Controller(make_memory())
    tab, other = gr.Request(session_hash="tab-1"), gr.Request(session_hash="tab-2")
    ui.take_turn(tab, "enrol", "page:enrol")
    with pytest.raises(gr.Error) as twice:
        ui.take_turn(tab, "enrol", "page:enrol")
    assert twice.value.visible is False
    ui.take_turn(tab, "chat", "page:ask")  # another group of the same tab
    ui.take_turn(other, "enrol", "page:enrol")  # the same action in another tab
    assert ui.turn_landed(tab, "enrol") is False  # nobody waits: the buttons come back
    ui.give_back_turn(tab, "enrol")
    ui.take_turn(tab, "enrol", "page:enrol")


def test_another_action_of_the_group_waits_its_turn_and_then_runs():
    """Load demo then Compare, clicked back to back: Compare waits until the demo has been shown, then runs."""
    turns = Turns()
    turns.take("tab", "compare", "page:load_demo")
    started, done = threading.Event(), threading.Event()

    def compare() -> None:
        started.set()
        turns.take("tab", "compare", "page:compare")
        done.set()

    waiter = threading.Thread(target=compare)
    waiter.start()
    started.wait(10)
    assert not done.wait(0.2)  # still waiting: the demo has not been shown yet
    assert turns.landed("tab", "compare") is True  # Compare waits: it takes the buttons from here
    assert not done.is_set()
    turns.give_back("tab", "compare")
    waiter.join(10)
    assert done.is_set()
    with pytest.raises(Repeated):  # the compare's own double dispatch is still one click
        turns.take("tab", "compare", "page:compare")
    turns.landed("tab", "compare")
    waiter = threading.Thread(target=lambda: turns.take("tab", "compare", "page:compare"))
    waiter.start()  # once landed, the same button clicked again is a new click: it waits, then runs
    turns.give_back("tab", "compare")
    waiter.join(10)
    assert not waiter.is_alive()


def test_a_turn_never_given_back_is_taken_over_and_waiting_is_bounded():
    """A tab closed mid-action leaves its turn: the next action takes it after the hold; waiting holds a
    worker thread, so the process lets only so many wait at once."""
    now = [0.0]
    turns = Turns(clock=lambda: now[0], hold=60, max_waiting=1)
    turns.take("tab", "change", "page:delete_note")
    now[0] = 61.0
    turns.take("tab", "change", "page:forget")  # abandoned: taken over at once
    turns.take("other", "change", "page:delete_note")
    blocked = threading.Thread(target=lambda: turns.take("other", "change", "page:forget"), daemon=True)
    blocked.start()
    while turns.waiting == 0:  # until the waiter is registered
        threading.Event().wait(0.01)
    with pytest.raises(Crowded):
        turns.take("tab", "change", "page:delete_note")
    turns.give_back("other", "change")
    blocked.join(10)
    assert not blocked.is_alive()


def test_load_demo_twice_builds_it_once(server):
    before = server.mem.store.counts()
    assert "already here" in server.ui.load_demo()
    assert server.mem.store.counts() == before
    assert [(g.label, g.member_labels) for g in server.mem.store.all_groups()] == [(DEMO_HOUSEHOLD, list(DEMO_PEOPLE))]


def test_a_demo_store_without_its_household_gets_it_alone_and_once(make_memory):
    mem = make_memory()
    ids = build_demo(mem)  # the people and their notes, no household (as an older demo store)
    ui = Controller(mem)
    assert "added their household **Home**" in ui.load_demo()
    counts = mem.store.counts()
    assert "already here" in ui.load_demo()
    assert build_demo(mem, household=True) == ids and mem.store.counts() == counts
    home = mem.store.all_groups()
    assert len(home) == 1 and home[0].members == list(ids.values())


def test_compare_shows_the_household_s_notes_to_its_members_only(server, probes):
    """The demo household: its Wi-Fi password reaches Ana, and its surprise party Ben but never Chloe; each
    note says it came from the household and who wrote it; a stranger gets nothing of it."""
    client = Client(server.url, verbose=False)
    wifi = client.predict("What is the Wi-Fi password?", handle_file(probes["Ana"]), handle_file(probes["Stranger"]),
                          "face-arcface-s", api_name="/compare")
    assert "tulip-river-42" in wifi["a"]["answer"]
    (note,) = [n for n in wifi["a"]["notes"] if n["content"] == WIFI]
    assert (note["scope_label"], note["author_label"]) == (DEMO_HOUSEHOLD, "Ana") and note["scope"] is not None
    assert wifi["b"]["gate"]["matched"] is False and wifi["b"]["notes"] == []
    assert "tulip" not in json.dumps(wifi["b"]) and "party" not in json.dumps(wifi["b"])
    party = client.predict("When is the surprise party?", handle_file(probes["Ben"]), handle_file(probes["Chloe"]),
                           "face-arcface-s", api_name="/compare")
    assert "Saturday" in party["a"]["answer"]
    assert {(n["scope_label"], n["author_label"]) for n in party["a"]["notes"] if n["content"] == PARTY} == {
        (DEMO_HOUSEHOLD, "Ben")}
    chloe = party["b"]
    assert chloe["gate"]["label"] == "Chloe" and "Saturday" not in json.dumps(chloe)
    assert [n["scope_label"] for n in chloe["notes"] if n["content"] == WIFI] == [DEMO_HOUSEHOLD]  # the rest does


def test_found_join_and_share_a_household_through_the_page_s_handlers(make_memory, capture, cache):
    """Dana founds a household and brings Eve in (both present); Dana shares one note with it and hides another
    from Eve; each sees what they may, marked as the household's, in Compare's notes and in "My notes". Finn
    (enrolled, not a member) and a stranger learn nothing of it: a household of Dana's reads as one that does not
    exist. Every probe is deleted, whatever happened."""
    mem = make_memory()
    ui = Controller(mem)
    face = "face-arcface-s"
    for label, person in (("Dana", 3), ("Eve", 4), ("Finn", 5)):
        mem.enroll(label, [capture(person, 0), capture(person, 1)])
    ids = {i.label: i.id for i in mem.identities()}
    shots = iter(range(2, 200))

    def probe(person: int) -> str:
        n = next(shots)
        return upload(cache, capture(person, n), f"probe{n}")

    def refused(call, *args) -> gr.Error:
        with pytest.raises(gr.Error) as caught, warnings.catch_warnings(record=True) as hints:
            warnings.simplefilter("always")
            friendly(call)(*args)
        shown = [h for h in hints if str(h.message).startswith(f"{caught.value.title} — ")]
        assert len(shown) == (not caught.value.visible)  # a hint is a warning (outside a page: a UserWarning)
        return caught.value

    # founding: a name and the founder's fresh probe
    assert refused(ui.homes.found, " ", probe(3), None, face).title == "No household name"
    message = ui.homes.found("Flat 4", probe(3), None, face)
    assert "Founded the household **Flat 4** with **Dana** as its first member" in message
    assert refused(ui.homes.found, "flat 4", probe(3), None, face).title == "Name taken"
    assert "fresh, clear probe" in refused(ui.homes.found, "Den", probe(6), None, face).message  # a stranger
    (flat,) = mem.groups(identity=ids["Dana"])

    # joining: the household's name, a member's and the newcomer's fresh probes
    assert refused(ui.homes.join, "Flat 4", probe(3), None, None, None, face).title == "Two people needed"
    nowhere = refused(ui.homes.join, "Nowhere", probe(3), None, probe(4), None, face)
    not_finn_s = refused(ui.homes.join, "Flat 4", probe(5), None, probe(4), None, face)  # Finn is no member
    assert (nowhere.title, nowhere.message) == (not_finn_s.title, not_finn_s.message)
    assert nowhere.title == "No such household"
    assert "fresh, clear probe" in refused(ui.homes.join, "Flat 4", probe(6), None, probe(4), None, face).message
    joined = ui.homes.join("FLAT 4", probe(3), None, probe(4), None, face)
    assert "**Eve** joined **Flat 4**: its members are Dana, Eve" in joined
    assert [g.member_labels for g in mem.groups(identity=ids["Eve"])] == [["Dana", "Eve"]]

    # the Remember's choices: the requester's own households, after the gate admitted them
    offered = ui.homes.of(probe(3), face)
    assert offered == {"person": ids["Dana"], "label": "Dana", "groups": [
        {"id": flat.id, "label": "Flat 4", "members": [[ids["Dana"], "Dana"], [ids["Eve"], "Eve"]]}]}
    assert ui.homes.of(probe(5), face)["groups"] == []  # Finn: none
    assert refused(ui.homes.of, probe(6), face).title == "Not recognised"

    # writing into it, hiding one note from Eve
    shared = ui.remember("The boiler code is 3141", probe(3), face, None, str(flat.id), [])
    assert (shared["household"], shared["author"], shared["hidden_from"]) == ("Flat 4", "Dana", [])
    secret = ui.remember("Eve's birthday cake hides in the garage", probe(3), face, None, str(flat.id),
                         [str(ids["Eve"])])
    assert secret["hidden_from"] == ["Eve"] and secret["note"]["scope"] == flat.id
    assert refused(ui.remember, "Mine", probe(3), face, None, "own", [str(ids["Eve"])]).title == "No household"
    forged = refused(ui.remember, "Finn was here", probe(5), face, None, str(flat.id), [])
    missing = refused(ui.remember, "Finn was here", probe(5), face, None, "999999", [])
    assert (forged.title, forged.message) == (missing.title, missing.message)
    assert forged.title == NO_HOUSEHOLD_CHOSEN[0] and forged.message.endswith(NO_HOUSEHOLD_CHOSEN[1])
    assert refused(ui.remember, "Nobody", probe(6), face, None, str(flat.id), []).title == "Not recognised"
    assert [n.content for n in mem.store.all_notes(flat.id)] == ["The boiler code is 3141",
                                                                  "Eve's birthday cake hides in the garage"]

    # reading: each member what they may, marked as the household's; Finn and a stranger nothing of it
    eve = ui.ask("What is the boiler code?", probe(4), face)
    assert [(n["scope_label"], n["author_label"]) for n in eve["notes"]] == [("Flat 4", "Dana")]
    assert "3141" in eve["answer"] and "cake" not in json.dumps(eve)
    dana = ui.ask("Where is the birthday cake?", probe(3), face)
    assert "garage" in dana["answer"]
    for outsider in (5, 6):
        seen = json.dumps(ui.ask("What is the boiler code?", probe(outsider), face))
        assert "3141" not in seen and "Flat 4" not in seen and "cake" not in seen
    rows = ui.unlock(probe(4), face)["rows"]
    assert [(r[2], r[4]) for r in rows] == [("The boiler code is 3141", "household Flat 4, by Dana")]
    rows = ui.unlock(probe(3), face)["rows"]
    assert {r[4] for r in rows} == {"household Flat 4, by Dana"} and len(rows) == 2
    assert cached_images(cache) == []

def test_locomo_import_gives_each_conversation_an_identity(make_memory, cache, tmp_path):
    data = [{"sample_id": f"conv-{n}", "qa": [], "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": f"My cat is called Whisker{n}"},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "What a lovely name!"}]}} for n in range(2)]
    path = tmp_path / "locomo_tiny.json"
    path.write_text(json.dumps(data))
    mem = make_memory()
    ui = Controller(mem, admin=True)
    message = ui.import_locomo(str(path), 2)
    assert "conv-0 (Ann & Bo): 2 turns" in message and "LoCoMo 2" in message
    assert "already imported" in ui.import_locomo(str(path), 1)
    probe = upload(cache, ui.sample_capture("LoCoMo 2", "palm-compcode"), "palm")
    result = ui.ask("What is my cat called?", probe, "palm-compcode")
    assert result["gate"]["label"] == "conv-1 (Ann & Bo)" and "Whisker1" in result["answer"]


def test_calibrate_palms_shows_histograms_and_stores_tau(make_memory):
    mem = make_memory()
    ui = Controller(mem, admin=True)
    report = ui.calibration.calibrate("palm-compcode", "samples")
    assert report.modality == "palm-compcode" and report.identities == SAMPLE_PALMS
    plot, text = ui.calibration.view(report)
    assert plot.ndim == 3 and plot.shape[2] == 3 and "intersection" in text and "/tmp" not in text
    assert "Stored τ" in ui.calibration.store_tau(report, "intersection")
    assert mem.threshold("palm-compcode") == pytest.approx(report.intersection.tau)
    names = [row[0] for row in ui.calibration.encoder_table()]
    assert {"face-arcface-s", "palm-compcode"} <= set(names)


def test_configuration_from_the_environment(monkeypatch, tmp_path, text_encoder, face_encoder):
    monkeypatch.setenv("BIOMEM_DB", str(tmp_path / "env.db"))
    monkeypatch.setenv("BIOMEM_LLM", "offline")
    monkeypatch.setenv("BIOMEM_POLICY", "all")
    monkeypatch.setenv("BIOMEM_TAU", "face-arcface-s=0.5, palm-compcode=0.4")
    mem = BioMemory.from_settings(text_model=text_encoder, encoder=face_encoder)
    try:
        assert mem.path == tmp_path / "env.db" and mem.policy == "all" and mem.llm.name == "offline"
        assert mem.threshold("face-arcface-s") == pytest.approx(0.5)
        assert mem.threshold("palm-compcode") == pytest.approx(0.4)
    finally:
        mem.close()


def test_panels_escape_what_people_typed():
    result = {"kind": "answer", "question": "q", "answer": "<script>x</script>", "prompt": "",
              "gate": {"matched": True, "label": "<b>", "threshold": 0.95, "modality": "face-arcface-s",
                       "admitted": [{"identity": 1, "label": "<b>", "score": 0.99}],
                       "policy": "best", "scores": [{"identity": 1, "label": "<img src=x>", "score": 0.99,
                                                     "admitted": True}]},
              "notes": [{"id": 1, "content": "<iframe>", "timestamp": "2024-03-02T09:15:00", "score": 0.5}],
              "gated_out": {"total": 2, "owners": [{"label": "<svg>", "count": 2, "latest": None}]}}
    html = render.panel_html(result, with_answer=True)
    assert "<script>" not in html and "<img" not in html and "<iframe>" not in html and "<svg>" not in html
    assert "2 Mar 2024, 09:15" in html


def test_clicks_are_served_in_the_order_the_visitor_made_them():
    """Two clicks in one instant travel on two connections: the later one, arriving first, waits for the earlier
    one and then for its turn, so Load demo runs before the Compare clicked right after it."""
    turns = Turns()
    order: list[str] = []

    def click(action: str, number: int) -> None:
        turns.take("tab", "compare", action, number)
        order.append(action)

    compare = threading.Thread(target=click, args=("page:compare", 2))
    compare.start()  # the Compare's request arrives first
    while turns.waiting == 0 and not order:
        threading.Event().wait(0.01)
    assert order == []  # it waits for click 1, which has not arrived
    click("page:load_demo", 1)
    assert order == ["page:load_demo"]
    turns.landed("tab", "compare")
    turns.give_back("tab", "compare")
    compare.join(10)
    assert order == ["page:load_demo", "page:compare"]
