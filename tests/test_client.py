"""BioMemoryClient against a real server (uvicorn in a thread on 127.0.0.1): the engine's calls over HTTP,
raising the engine's own error classes."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from PIL import Image

from biomem import BioMemory, Probe
from biomem.client import BioMemoryClient, RemoteAnswer, ServiceError, raise_for_error
from biomem.engine.demo import build_demo, demo_capture, usable_capture
from biomem.engine.keys import create_key
from biomem.errors import (
    AuthenticationError,
    InvalidImageError,
    InvalidInputError,
    MultipleFacesError,
    NoFaceError,
    NoteNotFoundError,
    SessionExpiredError,
    StepUpRequiredError,
    TooManyAttemptsError,
    UnknownIdentityError,
)
from biomem.identity.samples import group_photo_path
from biomem.server import create_app, served

from .shared import ANA, BEN, STRANGER


@pytest.fixture(scope="module")
def remote(tmp_path_factory, text_encoder, face_encoder):
    """The demo store (its people enrolled as ordinary people, whose probes write) behind the REST API only; an
    agent and an admin client."""
    root = tmp_path_factory.mktemp("client")
    mem = BioMemory(root / "c.db", text_model=text_encoder, encoder=face_encoder, limits="off")
    ids = build_demo(mem, sample=False)
    agent, _ = create_key(mem.store, "agent")
    admin, _ = create_key(mem.store, "admin", "admin")
    with served(create_app(mem, ui=False, mcp=False)) as url, \
            BioMemoryClient(url, agent) as bm, BioMemoryClient(url, admin) as root_bm:
        yield SimpleNamespace(url=url, mem=mem, ids=ids, bm=bm, admin=root_bm, face_encoder=face_encoder,
                              fresh={p: usable_capture(face_encoder, p, range(10, 40)) for p in (ANA, BEN, STRANGER)},
                              clear={p: demo_capture(p, 0) for p in (ANA, BEN)})
    mem.close()


def test_health_and_a_bad_key(remote):
    assert remote.bm.health() == {"status": "ok", "version": "0.1.0"}
    assert remote.admin.health()["store"]["people"] >= 3
    with BioMemoryClient(remote.url, "bm_wrong") as stranger, pytest.raises(AuthenticationError) as raised:
        stranger.search("PIN", probe=remote.fresh[ANA])
    assert raised.value.status == 401 and raised.value.title == "Not authorised"


def test_probes_of_every_kind_and_the_engine_s_errors(remote, tmp_path):
    path = tmp_path / "ana.png"
    Image.fromarray(remote.fresh[ANA]).save(path)
    for probe in (str(path), path, path.read_bytes(), remote.fresh[ANA], Image.open(path)):
        result = remote.bm.search("bank card PIN", probe=probe, k=2)
        assert "4821" in result.notes[0][0].content and result.gate["matched"]
    answer = remote.bm.ask("What is my bank card PIN?", probe=remote.fresh[BEN])
    assert isinstance(answer, RemoteAnswer) and "7390" in answer.text and answer.as_dict()["answer"] == answer.text
    nobody = remote.bm.search("bank card PIN", probe=remote.fresh[STRANGER])
    assert nobody.notes == [] and nobody.gated_out is None and not nobody.gate["matched"]
    blank = np.full((256, 256, 3), 128, np.uint8)
    for probe, error in ((blank, NoFaceError), (group_photo_path(), MultipleFacesError), (b"hello", InvalidImageError)):
        with pytest.raises(error) as raised:
            remote.bm.add("planted", probe=probe)
        assert raised.value.status == 422
    with pytest.raises(UnknownIdentityError):
        remote.bm.add("planted", probe=remote.fresh[STRANGER])
    with pytest.raises(InvalidInputError):
        remote.bm.search("PIN", probe=remote.fresh[ANA], k=0)


def test_a_session_acts_as_its_person_until_it_ends(remote):
    with remote.bm.session(remote.clear[ANA]) as me:
        assert me.label == "Ana" and me.broad
        note = me.add("My library card number is 5512", infer=False)
        assert note.owner == remote.ids["Ana"] and me.get(note.id).content == note.content
        assert note.id in [n.id for n in me.get_all()]
        assert "5512" in me.search("library card", k=1).notes[0][0].content
        assert "5512" in me.ask("What is my library card number?").text
        with pytest.raises(StepUpRequiredError):
            me.update(note.id, "changed", probe=remote.clear[BEN])
        assert me.update(note.id, "My library card number is 5513", probe=remote.clear[ANA]).content.endswith("5513")
        assert [e["event"] for e in me.history(note.id)] == ["ADD", "UPDATE"]
        assert me.delete(note.id, probe=remote.clear[ANA]).id == note.id
        with pytest.raises(NoteNotFoundError):
            me.get(note.id)
    with pytest.raises(SessionExpiredError):
        me.search("library card")


def test_by_id_calls_mirror_the_python_api(remote):
    note = remote.bm.add("My parcel locker code is 2468", probe=remote.fresh[BEN])
    assert remote.bm.get(note.id, probe=remote.fresh[BEN]).content == note.content
    with pytest.raises(NoteNotFoundError):
        remote.bm.get(note.id, probe=remote.fresh[ANA])  # another owner's id: as if it did not exist
    assert note.id in [n.id for n in remote.bm.get_all(probe=remote.clear[BEN])]
    assert remote.bm.history(note.id, probe=remote.fresh[BEN])[0]["event"] == "ADD"
    assert remote.bm.update(note.id, "My parcel locker code is 2469", probe=remote.clear[BEN]).content.endswith("2469")
    assert remote.bm.delete(note.id, probe=remote.clear[BEN], keep_history=True).id == note.id
    notes = remote.bm.add_messages([{"role": "user", "content": "I prefer window seats"},
                                    {"role": "system", "content": "ignored"}], probe=remote.fresh[BEN], infer=False)
    assert [n.content for n in notes] == ["I prefer window seats"] and notes[0].keywords == []


def test_enrol_forget_and_the_admin_s_calls(remote, newcomer):
    dana = remote.bm.enroll("Dana", [newcomer(0, 0), newcomer(0, 1)])
    assert dana.label == "Dana"
    with pytest.raises(AuthenticationError) as raised:
        remote.bm.forget(identity=dana.id)
    assert raised.value.status == 403
    assert remote.bm.forget(probe=newcomer(0, 0)) == dana.id
    eve = remote.bm.enroll("Eve", newcomer(1, 0))
    imported = remote.admin.add("Imported for Eve", identity=eve.id)
    assert imported.owner == eve.id
    embedding = Probe(remote.face_encoder.encode(newcomer(1, 0)), remote.face_encoder.name)
    assert remote.admin.search("Imported", probe=embedding).notes[0][0].id == imported.id
    with pytest.raises(AuthenticationError):
        remote.bm.search("Imported", probe=embedding)  # precomputed embeddings: admin only
    assert remote.admin.forget(identity=eve.id) == eve.id
    with pytest.raises(UnknownIdentityError):
        remote.admin.forget(identity=eve.id)


def test_errors_without_an_engine_class_of_their_own():
    def reply(status: int, kind: str, **headers: str) -> httpx.Response:
        return httpx.Response(status, json={"error": {"type": kind, "title": "T", "message": "M"}}, headers=headers)

    with pytest.raises(TooManyAttemptsError) as raised:
        raise_for_error(reply(429, "TooManyAttemptsError", **{"Retry-After": "30"}))
    assert raised.value.retry_after == 30 and raised.value.status == 429
    with pytest.raises(InvalidInputError):
        raise_for_error(reply(413, "PayloadTooLarge"))
    with pytest.raises(ServiceError):
        raise_for_error(reply(404, "NotFound"))
    with pytest.raises(ServiceError):
        raise_for_error(httpx.Response(502, text="<html>bad gateway</html>"))
    raise_for_error(httpx.Response(200, json={}))
