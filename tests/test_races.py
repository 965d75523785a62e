"""Adds racing deletes and forgets, on both stores: an add whose neighbour is deleted while the LLM thinks, and
several REST clients at once. A reply of success means the note is stored and readable (with the links that
could still be made), a delete's means it is gone from every note's links, and no request is a server error."""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from biomem import BioMemory, NoteNotFoundError, Probe
from biomem.engine.keys import create_key
from biomem.errors import UnknownIdentityError
from biomem.notes.llm import Evolution, OfflineLLM
from biomem.server import create_app, served
from biomem.settings import Settings

from .conftest import BOTH_STORES

MODALITY = "face-test"  # precomputed probes: these tests race the store, not a camera
DIM = 64
RUN_SECONDS = 4.0  # how long the REST clients keep at it


def person(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


class Linker(OfflineLLM):
    """The offline analysis, and an evolution that links every neighbour, re-tags the new note and rewrites every
    neighbour's context, after `meanwhile(neighbours)` ran: what other requests do while a real LLM thinks."""

    def __init__(self, text_encoder) -> None:
        super().__init__(text_encoder)
        self.meanwhile: Callable[[list], None] = lambda neighbours: None

    def evolve(self, draft, neighbours):
        self.meanwhile([n for n, _ in neighbours])
        return Evolution(should_evolve=True, actions=["strengthen", "update_neighbor"],
                         suggested_connections=[n.id for n, _ in neighbours],
                         tags_to_update=["linked", *draft.tags[:1]],
                         new_context_neighborhood=[f"seen beside: {draft.content}" for _ in neighbours],
                         new_tags_neighborhood=[["neighbour"] for _ in neighbours])


def memory(location, text_encoder) -> BioMemory:
    mem = BioMemory(location, encoder=MODALITY, text_model=text_encoder, llm=Linker(text_encoder), limits="off")
    mem.set_threshold(0.8, MODALITY)
    return mem


@BOTH_STORES
def test_an_add_whose_neighbour_is_deleted_while_the_llm_thinks_is_stored_without_that_link(database, text_encoder):
    mem = memory(database("race.db"), text_encoder)
    try:
        ana = mem.enroll("Ana", [Probe(person(1), MODALITY)])
        kept = mem.add("I walk the dog along the river every morning", identity=ana.id)
        gone = mem.add("The dog loves the river path in the morning", identity=ana.id)

        def delete_a_neighbour(neighbours: list) -> None:
            assert {n.id for n in neighbours} == {kept.id, gone.id}
            mem.notebook.delete(ana.id, gone.id)
        mem.llm.meanwhile = delete_a_neighbour
        note = mem.add("The dog swam in the river this morning", identity=ana.id)
        mem.llm.meanwhile = lambda neighbours: None

        assert mem.store.get_note(ana.id, note.id).links == [kept.id]  # the link to the deleted note is skipped
        assert mem.store.get_note(ana.id, kept.id).context == f"seen beside: {note.content}"  # evolved as ever
        with pytest.raises(NoteNotFoundError):  # and the deleted one stays deleted, unevolved
            mem.store.get_note(ana.id, gone.id)
        events = [e["event"] for e in mem.store.history(ana.id, gone.id)]  # its own strengthened tags, then gone:
        assert events == ["add", "evolve", "delete"]  # the racing add evolved nothing into it
        found = mem.search("the dog by the river", probe=Probe(person(1), MODALITY), k=5)
        assert {n.id for n, _ in found.notes} == {kept.id, note.id}
    finally:
        mem.close()


@BOTH_STORES
def test_rest_adds_deletes_and_forgets_at_once_answer_no_server_error_and_keep_their_word(database, text_encoder):
    """Two clients add notes that link and evolve their neighbours (Ana's own, and Ana's in a household), one deletes
    every other note they acknowledged, one forgets the household's other members: for a few seconds, at once."""
    mem = memory(database("races.db"), text_encoder)
    try:
        ana = mem.enroll("Ana", [Probe(person(1), MODALITY)])
        home = mem.create_group("Home", identity=ana.id)
        others = [mem.enroll(f"Other {i}", [Probe(person(100 + i), MODALITY)]) for i in range(12)]
        for other in others:
            mem.add_member(home.id, identity=other.id)
            mem.add(f"{other.label} keeps the spare key under the doormat", identity=other.id, scope=home.id)
            mem.add(f"{other.label} walks the dog along the river", identity=other.id)
        secret = create_key(mem.store, "ops", "admin")[0]
        settings = Settings.from_env().model_copy(update={"host": "127.0.0.1"})
        step_up = {"probe": {"modality": MODALITY, "embedding": person(1).tolist()}}
        acknowledged: queue.Queue[tuple[int, int, str]] = queue.Queue()  # (owner, note, text) of every 201
        added: list[tuple[int, int, str]] = []
        deleted: list[tuple[int, int]] = []
        forgotten: list[int] = []
        replies: list[tuple[str, int, str]] = []
        lock = threading.Lock()
        deadline = time.monotonic() + RUN_SECONDS

        def reply(what: str, response: httpx.Response) -> int:
            with lock:
                replies.append((what, response.status_code, response.text[:300]))
            return response.status_code

        def adder(http: httpx.Client, first: int) -> None:
            for n in itertools.count(first, 2):
                if time.monotonic() > deadline:
                    return
                text = f"Ana walked the dog along the river, walk number {n}"
                body = {"text": text, "identity": ana.id, **({"scope": home.id} if n % 4 < 2 else {})}
                response = http.post("/v1/memories", json=body)
                if reply("add", response) == 201:
                    note = response.json()["results"][0]
                    with lock:
                        added.append((note["owner"], note["id"], text))
                    acknowledged.put((note["owner"], note["id"], text))

        def deleter(http: httpx.Client) -> None:
            for n in itertools.count():
                try:
                    owner, note, _ = acknowledged.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    return
                if n % 2 and reply("delete", http.request("DELETE", f"/v1/memories/{note}", json=step_up)) == 200:
                    with lock:
                        deleted.append((owner, note))

        def forgetter(http: httpx.Client) -> None:
            for other in others:
                if time.monotonic() > deadline:
                    return
                if reply("forget", http.delete(f"/v1/identities/{other.id}")) == 200:
                    forgotten.append(other.id)

        app = create_app(mem, settings, ui=False, mcp=False)
        with served(app) as url:
            def client(work: Callable[[httpx.Client], None]) -> Callable[[], None]:
                def run() -> None:
                    with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {secret}"}) as http:
                        work(http)
                return run
            workers = [lambda http: adder(http, 0), lambda http: adder(http, 1), deleter, forgetter]
            with ThreadPoolExecutor(len(workers)) as pool:
                for done in [pool.submit(client(work)) for work in workers]:
                    done.result()

        expected = {"add": 201, "delete": 200, "forget": 200}
        assert [r for r in replies if r[1] != expected[r[0]]] == []  # no 5xx, and no refusal either
        assert added and deleted and forgotten, "each kind of request ran"
        gone = set(deleted)
        for owner, note, text in added:
            if (owner, note) not in gone:
                assert mem.store.get_note(owner, note).content == text
        for owner, note in gone:
            with pytest.raises(NoteNotFoundError):
                mem.store.get_note(owner, note)
        query = mem.text.encode(["walking the dog"])[0]
        for owner in (ana.id, home.id):
            notes = mem.store.all_notes(owner)
            ids = {n.id for n in notes}
            assert all(set(n.links) <= ids for n in notes)  # no link to a deleted note, nor another owner's
            assert not any(n.author in forgotten for n in notes)
            hits = mem.partitions.search(owner, query, len(ids) + 10)
            assert {i for i, _ in hits} == ids  # the search index holds exactly the notes that are there
        for other in forgotten:
            with pytest.raises(UnknownIdentityError):
                mem.store.identity(other)
    finally:
        mem.close()
