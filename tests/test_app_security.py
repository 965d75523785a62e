"""The app attacked as an outsider with only the public page and its API would attack it.

Each test replays an attack that worked before the identity policy moved into the engine
(enrolment injection, score oracle, unlimited attempts, anonymous admin actions, probes
left in Gradio's cache, a crafted upload path) and shows that it fails now.
"""

from __future__ import annotations

import json
import re
from unittest import mock

import gradio as gr
import httpx
import numpy as np
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from PIL import Image

import app
from biomem import BioMemory
from biomem.engine.demo import DEMO_PEOPLE, build_demo, demo_capture, demo_household
from biomem.engine.keys import create_key
from biomem.engine.origins import admitted, served_names
from biomem.errors import InvalidInputError
from biomem.settings import Settings
from biomem.ui import Controller, uploads
from biomem.ui.messages import friendly
from biomem.vocabulary import AttemptLimits
from tests.shared import cached_images, served_app, upload
from tests.test_access import call_event
from tests.test_app import QUESTION

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


def test_a_stranger_is_refused_once_the_daily_budget_is_spent_even_with_a_new_session(demo_store, tmp_path):
    mem = demo_store(limits=AttemptLimits(misses=3, window=600.0, cooldown=60.0, budget=3))
    stranger = png(tmp_path, demo_capture(6, 3), "stranger")
    with served_app(mem, tmp_path / "cache") as served:
        client = Client(served.url, verbose=False)
        for _ in range(3):
            assert ask(client, stranger)["gate"] == {"matched": False, "modality": "face-arcface-s"}
        encodes = []
        encoder = mem.encoder("face-arcface-s")
        original = encoder.capture  # a live probe is encoded through the quality gate: count encoder work
        encoder.capture = lambda image, quality="probe": encodes.append(1) or original(image, quality)
        try:
            with pytest.raises(AppError) as caught:
                ask(client, stranger)
            assert caught.value.title == "Too many attempts" and "Try again in about" in caught.value.message
            assert "about 1440 minutes" in caught.value.message  # until the first miss ages out, a day on
            with pytest.raises(AppError, match="Try again"):  # a fresh session from the same address
                ask(Client(served.url, verbose=False), stranger)
        finally:
            del encoder.capture
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


def door_index(page: gr.Blocks, name: str) -> int:
    """The fn_index of the page event whose handler is the door `name` (biomem.ui.doors)."""
    return next(i for i, fn in page.fns.items() if getattr(fn.fn, "door", None) == name)


def test_another_site_s_page_cannot_drive_the_page_through_dns_rebinding(tmp_path, text_encoder, face_encoder,
                                                                        monkeypatch):
    """A page of evil.example whose name the attacker re-points at 127.0.0.1 posts Load demo to the queue with its
    own Host; a cross-site post carries its own Origin. Either is refused before the handler runs, and the store
    stays empty. The page's local names, a name in BIOMEM_ALLOWED_HOSTS and a Space's own SPACE_HOST are served."""
    for name in ("GRADIO_SERVER_NAME", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BIOMEM_ALLOWED_HOSTS", "kiosk.lan")
    monkeypatch.setenv("SPACE_HOST", "someone-bio-memory.hf.space")
    mem = BioMemory(tmp_path / "empty.db", text_model=text_encoder, encoder=face_encoder)
    with served_app(mem, tmp_path / "cache") as served:
        load, port = door_index(served.demo, "page:load_demo"), httpx.URL(served.url).port

        def post(session: str, headers: dict[str, str]) -> dict:
            return call_event(served.url, load, ["face-arcface-s"], session, headers)

        for n, foreign in enumerate(({"Host": f"evil.example:{port}"}, {"Origin": f"http://evil.example:{port}"},
                                     {"Host": "kiosk.lan", "Origin": "http://evil.example"}, {"Origin": "null"})):
            refused = post(f"rebound-{n}", foreign)
            assert refused["success"] is False and "answers only at its own address" in json.dumps(refused), foreign
        assert mem.identities() == []
        assert post("local", {"Host": f"localhost:{port}", "Origin": f"http://127.0.0.1:{port}"})["success"]
        assert {i.label for i in mem.identities()} >= set(DEMO_PEOPLE)
        for host in ("kiosk.lan", "someone-bio-memory.hf.space"):
            assert post(host, {"Host": host, "Origin": f"https://{host}"})["success"], host
    mem.close()


def test_the_names_a_request_may_reach_this_server_by():
    """biomem.engine.origins, the one check of the page and of a keyless REST caller: loopback names, the bind
    address unless it is every address, BIOMEM_ALLOWED_HOSTS and SPACE_HOST; ports and case do not matter."""
    settings = Settings.from_env({"GRADIO_SERVER_NAME": "192.168.1.5", "BIOMEM_ALLOWED_HOSTS": "Kiosk.LAN,[FE80::1]",
                                  "SPACE_HOST": "someone-bio-memory.hf.space"})
    names = served_names(settings)
    assert names == {"192.168.1.5", "kiosk.lan", "fe80::1", "someone-bio-memory.hf.space"}
    assert served_names(settings.model_copy(update={"host": "0.0.0.0", "allowed_hosts": ()})) == frozenset()
    for headers in ({"host": "localhost:7860"}, {"host": "127.0.0.1", "origin": "http://[::1]:7860"},
                    {"host": "KIOSK.lan:80", "origin": "https://kiosk.lan"}, {"host": "[fe80:0::1]:7860"},
                    {"host": "192.168.1.5:7860"}, {"host": "someone-bio-memory.hf.space"}, {}):
        assert admitted(headers, names), headers
    for headers in ({"host": "evil.example"}, {"host": "localhost", "origin": "http://evil.example"},
                    {"host": "localhost", "origin": "null"}, {"host": "kiosk.lan.evil.example"}, {"host": ""},
                    {"host": "192.168.1.6"}):
        assert not admitted(headers, names), headers
    with pytest.raises(InvalidInputError, match="BIOMEM_ALLOWED_HOSTS"):
        Settings.from_env({"BIOMEM_ALLOWED_HOSTS": "http://kiosk.lan:8080"})


def test_a_forged_x_forwarded_for_from_loopback_does_not_change_the_attempt_limit_key(demo_store, tmp_path):
    """Gradio's uvicorn would take the client address from the X-Forwarded-For of any loopback peer: a local
    program, or a web page through DNS rebinding, could pick a fresh attempt-limit key for every probe. The key
    is the socket's peer unless BIOMEM_TRUST_PROXY says a proxy sets that header."""
    mem = demo_store()
    stranger = png(tmp_path, demo_capture(6, 3), "stranger")
    keys: list[list[str]] = []
    check = mem.limiter.check
    mem.limiter.check = lambda clients: keys.append(list(clients or [])) or check(clients)
    forged = {"X-Forwarded-For": "203.0.113.9"}
    with served_app(mem, tmp_path / "cache") as served:
        assert ask(Client(served.url, verbose=False, headers=forged), stranger)["gate"]["matched"] is False
    assert keys and all("address:127.0.0.1" in k and "address:203.0.113.9" not in k for k in keys), keys
    keys.clear()
    behind_proxy = Settings.from_env().model_copy(update={"trust_proxy": True})
    with served_app(mem, tmp_path / "proxied", settings=behind_proxy) as served:
        assert ask(Client(served.url, verbose=False, headers=forged), stranger)["gate"]["matched"] is False
    assert keys and all("address:203.0.113.9" in k for k in keys), keys


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




def test_outsiders_posting_the_household_events_learn_nothing_of_a_household(tmp_path, text_encoder, face_encoder):
    """The household events (list one's households, found, join, remember into one) posted straight to the
    queue on a store with keys, so the caller's role is public: without a probe, as a stranger, and as Zoe
    (enrolled, in no household). A household of others reads exactly as one that does not exist: the same
    reply, no name of it or of its members, nothing written."""
    mem = BioMemory(tmp_path / "home.db", text_model=text_encoder, encoder=face_encoder)
    build_demo(mem, household=True)
    mem.enroll("Zoe", [demo_capture(5, 0), demo_capture(5, 1)])
    create_key(mem.store, "operator", "agent")
    home = demo_household(mem)
    before = (mem.store.counts(), [g.as_dict() for g in mem.store.all_groups()])
    secrets_ = ("Home", "Wi-Fi", "tulip", "party", *DEMO_PEOPLE)
    with served_app(mem, tmp_path / "cache") as served:
        fns = served.demo.fns
        door = {fn.fn.door: i for i, fn in fns.items()
                if getattr(fn.fn, "door", None) in ("page:households", "page:found_household", "page:join_household")}
        door["memo"] = next(i for i, fn in fns.items() if getattr(fn.fn, "door", None) == "page:remember"
                            and len(fn.inputs) == 7)  # the Enrol tab's Remember: text, probe, burst, where, hidden,
        # encoder (a probe box's webcam burst is a gr.State: its slot is posted empty, the server holds its frames)
        n = iter(range(100))

        def probe(image: np.ndarray) -> dict:
            path = tmp_path / f"probe{next(n)}.png"
            Image.fromarray(image).save(path)
            with path.open("rb") as file:
                (uploaded,) = httpx.post(served.url + "gradio_api/upload", files=[("files", file)]).json()
            return {"path": uploaded, "meta": {"_type": "gradio.FileData"}}

        def post(name: str, data: list, session: str) -> str:
            reply = json.dumps(call_event(served.url, door[name], data, session))
            assert not [word for word in secrets_ if word in reply], reply
            return reply

        zoe, stranger, face = (lambda: probe(demo_capture(5, 3))), (lambda: probe(demo_capture(6, 2))), "face-arcface-s"
        # no probe at all
        assert "No probe" in post("page:households", [None, None, face, None], "nobody")
        assert "No probe" in post("page:found_household", ["Home", None, None, face], "nobody")
        assert "Two people needed" in post("page:join_household", ["Home", None, None, None, None, face], "nobody")
        # a stranger
        assert "Not recognised" in post("page:households", [stranger(), None, face, None], "stranger")
        assert "fresh, clear probe" in post("page:join_household", ["Home", stranger(), None, zoe(), None, face],
                                            "stranger")
        assert "Not recognised" in post("memo", ["Let me in", stranger(), None, str(home.id), [], face, None],
                                        "stranger")
        # Zoe, in no household: her list is empty, and Home is as absent as a household that never was
        listed = post("page:households", [zoe(), None, face, None], "zoe")
        assert '"success": true' in listed
        offered = call_event(served.url, door["page:households"] + 1, [None, None], "zoe")  # the event that shows it
        assert "Zoe** belongs to no household yet" in json.dumps(offered)
        assert not [word for word in secrets_ if word in json.dumps(offered)]
        errors = {label: json.loads(post("page:join_household", [label, zoe(), None, stranger(), None, face],
                                         f"zoe-{label}"))["output"] for label in ("Home", "Nowhere")}
        assert errors["Home"] == errors["Nowhere"] and "No such household" in json.dumps(errors["Home"])
        forged = {where: json.loads(post("memo", ["Zoe was here", zoe(), None, where, [], face, None],
                                         f"zoe-{where}"))["output"] for where in (str(home.id), "999999")}
        assert forged[str(home.id)] == forged["999999"] and "No such household" in json.dumps(forged["999999"])
        assert cached_images(served.cache) == []
    assert (mem.store.counts(), [g.as_dict() for g in mem.store.all_groups()]) == before
    mem.close()


def test_a_forged_page_payload_is_told_what_to_do_never_an_exception_s_name(tmp_path, text_encoder, face_encoder):
    """Page events posted straight to the queue with values no control of the page sends (an object or a list for a
    text box, "nan" for a note id), and a fault past those checks: each reply says what to do, names no exception,
    writes nothing and leaves no upload behind."""
    mem = BioMemory(tmp_path / "forged.db", text_model=text_encoder, encoder=face_encoder)
    build_demo(mem)
    before = mem.store.counts()
    with served_app(mem, tmp_path / "cache") as served:
        fns = served.demo.fns
        door = {fn.fn.door: i for i, fn in reversed(fns.items()) if getattr(fn.fn, "door", None)}

        def probe() -> dict:
            path = tmp_path / "probe.png"
            Image.fromarray(demo_capture(0, 3)).save(path)
            with path.open("rb") as file:
                (uploaded,) = httpx.post(served.url + "gradio_api/upload", files=[("files", file)]).json()
            return {"path": uploaded, "meta": {"_type": "gradio.FileData"}}

        face = "face-arcface-s"
        for name, data, said in (
                ("page:ask", [{"question": "What is my PIN?"}, probe(), None, face, None], "reload the page"),
                ("page:remember", [["My PIN is 0000"], probe(), None, face, None], "reload the page"),
                ("page:found_household", [{"name": "Home"}, probe(), None, face], "reload the page"),
                ("page:delete_note", ["nan", probe(), None, None, face, None], "id of one of your notes")):
            output = call_event(served.url, door[name], data, f"forged-{name}")["output"]
            assert said in output.get("error", ""), (name, output)
            assert not re.search(r"\w+(Error|Exception)\b", json.dumps(output)), (name, output)
        with mock.patch.object(served.ui, "answer", side_effect=KeyError("gate")):  # a fault past the checks
            output = call_event(served.url, door["page:ask"], ["What is my PIN?", probe(), None, face, None], "fault")
        assert "reload the page" in output["output"]["error"] and "KeyError" not in json.dumps(output)
        assert cached_images(served.cache) == []
    assert mem.store.counts() == before
    mem.close()
