"""Deleting or rewriting a note reaches every note whose analysis read text derived from it, not only the neighbours
its own evolution wrote into.

A-Mem's evolve prompt shows the LLM the neighbours' content, context and tags when the next note is added, so a
later note can take the words of a deleted one from a neighbour's evolved context (into its own tags, or into the
other neighbours it evolves), and a note after it from that one. The model here is a real OpenAI-compatible server
answering A-Mem's prompts as they ask: analysis from the content alone, evolution that strengthens the new note
with the salient words of its neighbours and writes them into the neighbours' contexts. After a delete no byte of
the words is left in any file of a SQLite store, nor in the database's files of a PostgreSQL store once VACUUM FULL
has run (its WAL is not looked at).
"""

from __future__ import annotations

import json
import re

import pytest

from biomem.notes.llm import OfflineLLM, OpenAIChat

from .conftest import BOTH_STORES
from .llm_fakes import ScriptedChatServer
from .shared import ANA, files_holding, vacuumed_database_files_holding
from .test_purge import assert_vectors_embed_notes

SECRET = "The garden shed padlock code is ZEBRAPASS991"
WORD = "ZEBRAPASS991"
NEIGHBOUR = re.compile(r"memory_id:(\d+)\t.*?memory content: (.*?)\tmemory context: (.*?)\tmemory keywords: .*?"
                       r"\tmemory tags: (.*)")


def salient(text: str) -> list[str]:
    """The words a model would single out: capitalised or holding digits (names, codes)."""
    return [w for w in re.findall(r"[A-Za-z0-9]+", text) if w[0].isupper() and len(w) > 3 or re.search(r"\d", w)]


def model(body: dict) -> str:
    """A-Mem's prompts answered as they ask (see biomem.notes.llm.prompts)."""
    prompt = body["messages"][-1]["content"]
    if "memory evolution agent" in prompt:
        neighbours = [NEIGHBOUR.match(line).groups() for line in prompt.split("\n") if line.startswith("memory_id:")]
        heard = [w for _, content, context, tags in neighbours for w in salient(f"{content} {context} {tags}")]
        content = prompt.split("content: ", 1)[1].split("\n", 1)[0]
        return json.dumps({
            "should_evolve": True, "actions": ["strengthen", "update_neighbor"],
            "suggested_connections": [int(i) for i, *_ in neighbours],
            "tags_to_update": sorted(set(heard))[:8] or ["misc"],
            "new_context_neighborhood": [f"{context}; seen with {content} ({' '.join(sorted(set(heard))[:6])})"
                                         for _, _, context, _ in neighbours],
            "new_tags_neighborhood": [json.loads(tags.replace("'", '"')) for *_, tags in neighbours]})
    content = prompt.rsplit("Content for analysis:\n", 1)[1]
    words = [w.lower() for w in re.findall(r"[A-Za-z]{4,}", content)]
    return json.dumps({"keywords": words[:4] or ["note"], "context": f"A note about {' '.join(words[:3])}",
                       "tags": words[:2] or ["note"]})


@pytest.fixture
def chat(text_encoder):
    server = ScriptedChatServer()
    server.default = model
    yield OpenAIChat("a-mem-like", fallback=OfflineLLM(text_encoder), base_url=server.base_url, api_key="x", timeout=30)
    assert server.unexpected == []
    server.close()


def everything(mem, owner: int, note_ids: list[int]) -> str:
    """Every note of the owner and every history of `note_ids` that is still kept, as one text."""
    histories = []
    for note_id in note_ids:
        try:
            histories.append(mem.store.history(owner, note_id))
        except Exception:  # noqa: BLE001 - a note erased with its history has none to show
            pass
    return json.dumps([n.as_dict() for n in mem.store.all_notes(owner)] + histories)


@BOTH_STORES
@pytest.mark.parametrize("how", ["delete", "update"])
def test_no_note_keeps_words_that_came_from_a_removed_one_through_later_analyses(make_memory, face_probe, chat,
                                                                                backend, tmp_path, how):
    mem = make_memory("chain.db", llm=chat, hnsw_threshold=3)
    ana = mem.enroll("ana", [face_probe(ANA, 0), face_probe(ANA, 1)]).id
    texts = ["I keep my bicycle in the garden shed near the Oakwood fence",
             "The garden shed door squeaks in the rain",
             SECRET,
             "The shed roof needs new tiles",
             "Buy tiles and nails at the hardware store"]
    notes = [mem.add(t, identity=ana, timestamp=f"2024-04-0{i + 1}T09:00:00") for i, t in enumerate(texts)]
    ids = [n.id for n in notes]
    bike, squeak, secret, roof, store = ids
    assert "Oakwood" in " ".join(mem.store.get_note(ana, squeak).tags)  # squeak's analysis read the bike note
    assert WORD in " ".join(mem.store.get_note(ana, roof).tags)  # a later note took the secret's words
    assert WORD in " ".join(mem.store.get_note(ana, store).tags)  # and the note after it from that one
    if backend == "sqlite":
        assert mem.search("garden shed", probe=face_probe(ANA, 2)).notes  # builds the hnsw index
        mem.partitions.flush()
        assert files_holding(tmp_path, {"secret": WORD.encode()})
    else:
        assert vacuumed_database_files_holding(mem, {"secret": WORD.encode()})

    if how == "delete":
        mem.delete(secret, probe=face_probe(ANA, 3))
    else:
        mem.update(secret, "The garden shed padlock was replaced", probe=face_probe(ANA, 3))

    kept = [i for i in ids if i != secret]
    assert WORD not in everything(mem, ana, kept)
    assert WORD not in json.dumps([n.as_dict() for n in mem.get_all(probe=face_probe(ANA, 3))])
    assert_vectors_embed_notes(mem, ana)
    assert "Oakwood" in " ".join(mem.store.get_note(ana, squeak).tags)  # what no removed text fed stays
    for note in (roof, store):  # the notes that read it are themselves again, as their own analysis made them
        tags = mem.store.get_note(ana, note).tags
        assert tags == json.loads(model({"messages": [{"content": "Content for analysis:\n" +
                                                       texts[ids.index(note)]}]}))["tags"]
    if how == "update":
        assert WORD in json.dumps(mem.store.history(ana, secret))  # its own history keeps its old text until deleted
    if backend == "sqlite" and how == "delete":
        mem.search("garden shed", probe=face_probe(ANA, 2))
        mem.partitions.flush()
        mem.close()
        assert files_holding(tmp_path, {"secret": WORD.encode()}) == {}
    elif how == "delete":
        assert vacuumed_database_files_holding(mem, {"secret": WORD.encode()}) == {}
