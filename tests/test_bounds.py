"""Bounded memories and prompts, and text that cannot lie about itself.

Before: a 100 KB memory was stored, shown in full on every panel and sent whole into every later
prompt (21,217 word pieces for that one note); a note holding U+202E (right-to-left override)
showed "evil" as "live" on the page, and a label could hold it too.
"""

from __future__ import annotations

import unicodedata

import pytest
from fastapi.testclient import TestClient

from biomem.engine.checks import MAX_NOTE_CHARS, MAX_QUESTION_CHARS
from biomem.engine.keys import create_key
from biomem.engine.messages import readable
from biomem.errors import InvalidInputError, TextTooLongError
from biomem.identity.disclosure import note_view
from biomem.identity.enrolment import HIDDEN_CATEGORIES, MAX_LABEL_CHARS
from biomem.notes.llm import answer_prompt, fit_notes
from biomem.server import create_app
from biomem.server.replies import AnswerReply
from biomem.settings import DEFAULT_PROMPT_TOKENS, Settings
from biomem.stores.records import Note
from biomem.ui import render
from biomem.ui.controller import Controller

from .conftest import BOTH_STORES
from .shared import ANA, CHLOE

WORDS = "The quick brown fox jumps over the lazy dog near the river bank today. "
LIARS = ["\u202eevil", "pay\u200bpal", "\u2066isolate\u2069", "\ufeffbom", "a\u200db", "bell\x07", "line\u2028sep",
         "\u200f\u202bembedded\u202c", "\u200enot\u200c"]


def text(length: int, start: str = "") -> str:
    """English text of exactly `length` characters, no space at either end."""
    body = (start + WORDS * (length // len(WORDS) + 2))[:length - 1]
    return body + "."


def hidden(shown: str) -> list[str]:
    """The control and format characters left in `shown` (line breaks and tabs aside)."""
    return [f"U+{ord(c):04X}" for c in shown if c not in "\n\t" and unicodedata.category(c) in HIDDEN_CATEGORIES]


@pytest.fixture
def owner(make_memory, face_probe):
    mem = make_memory()
    return mem, mem.enroll("Ana", [face_probe(ANA, 0), face_probe(ANA, 1)])


# ---- a note has a maximum length, the same on every surface ------------------------------------


@BOTH_STORES
def test_a_note_past_the_maximum_is_refused_everywhere_and_writes_nothing(owner, face_probe):
    mem, ana = owner
    longest = mem.add(text(MAX_NOTE_CHARS), identity=ana.id, infer=False)
    assert len(longest.content) == MAX_NOTE_CHARS
    before = mem.store.counts()
    too_long = text(MAX_NOTE_CHARS + 1)
    refusals = [lambda: mem.add(too_long, identity=ana.id),
                lambda: mem.add(too_long, probe=face_probe(ANA, 2)),
                lambda: mem.add_many(["fine", too_long], identity=ana.id),  # not even the fine one is stored
                lambda: mem.update(longest.id, too_long, probe=face_probe(ANA, 0)),
                lambda: mem.session(face_probe(ANA, 0)).add(too_long),
                lambda: mem.add(" " * 50 + too_long + " " * 50, identity=ana.id)]
    for refuse in refusals:
        with pytest.raises(TextTooLongError) as refused:
            refuse()
        assert readable(refused.value) == (
            "Too long", f"A memory has at most {MAX_NOTE_CHARS:,} characters and this one has "
                        f"{MAX_NOTE_CHARS + 1:,}: split it into several memories")
    assert mem.store.counts() == before and mem.get(longest.id, probe=face_probe(ANA, 2)).content == longest.content
    question = text(MAX_QUESTION_CHARS + 1)
    for ask in (lambda: mem.ask(question, probe=face_probe(ANA, 2)),
                lambda: mem.search(question, probe=face_probe(ANA, 2))):
        with pytest.raises(TextTooLongError, match="a question or query has at most 1,000 characters"):
            ask()
    assert mem.ask(text(MAX_QUESTION_CHARS), probe=face_probe(ANA, 2)).notes  # the longest question is taken


def test_rest_refuses_a_long_note_with_the_engine_s_typed_error(owner):
    mem, ana = owner
    key = create_key(mem.store, "operator", "admin")[0]
    app = create_app(mem, Settings.from_env().model_copy(update={"host": "127.0.0.1"}), ui=False, mcp=False)
    with TestClient(app, base_url="http://127.0.0.1") as http:
        reply = http.post("/v1/memories", headers={"Authorization": f"Bearer {key}"},
                          json={"text": text(MAX_NOTE_CHARS + 1), "identity": ana.id, "infer": False})
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["type"] == "TextTooLongError" and mem.store.note_total() == 0


# ---- the answer prompt has a token budget --------------------------------------------------------


def note(note_id: int, content: str) -> Note:
    return Note(id=note_id, owner=1, content=content, timestamp=f"2024-01-{note_id:02d}T10:00:00", keywords=[],
                tags=[], context="")


def test_fit_notes_leaves_out_the_lowest_ranked_first_and_never_skips_over_one():
    count = lambda prompt: len(prompt.split())  # noqa: E731 - a word count stands in for the tokenizer
    ranked = [note(1, "one two three"), note(2, " ".join(["long"] * 50)), note(3, "short")]
    base = count(answer_prompt("q?", ranked[:1]))
    assert fit_notes("q?", ranked, False, base, count) == ranked[:1]  # note 3 would fit, but note 2 ranks above it
    assert fit_notes("q?", ranked, False, base + 1000, count) == ranked
    assert fit_notes("q?", ranked, False, base - 1, count) == []


def test_the_answer_prompt_keeps_to_its_budget_and_says_what_it_left_out(make_memory, face_probe, text_encoder):
    budget = 600
    mem = make_memory(prompt_tokens=budget)
    ana = mem.enroll("Ana", [face_probe(ANA, 0), face_probe(ANA, 1)])
    mem.add_many([text(400, f"Fox story {n}: ") for n in range(10)], identity=ana.id,
                 timestamps=[f"2024-01-{n + 1:02d}T10:00:00" for n in range(10)])
    question = "What did the fox do?"
    answer = mem.ask(question, probe=face_probe(ANA, 2))
    assert text_encoder.count_tokens(answer.prompt) <= budget
    assert answer.omitted > 0 and len(answer.notes) + answer.omitted == 10
    ranked = mem.search(question, probe=face_probe(ANA, 2)).notes
    assert [n.id for n, _ in answer.notes] == [n.id for n, _ in ranked[:len(answer.notes)]]  # the best ones stay
    assert answer.prompt == answer_prompt(question, [n for n, _ in answer.notes])
    reply = answer.as_dict()
    assert reply["omitted"] == answer.omitted and len(reply["results"]) == len(answer.notes)
    assert AnswerReply.model_validate(reply).model_dump(exclude_unset=True)["omitted"] == answer.omitted  # REST
    whole = make_memory("whole.db")  # the default budget holds them all
    assert whole.prompt_tokens == DEFAULT_PROMPT_TOKENS
    whole_ana = whole.enroll("Ana", [face_probe(ANA, 0)])
    whole.add_many([text(400, f"Fox story {n}: ") for n in range(10)], identity=whole_ana.id)
    everything = whole.ask(question, probe=face_probe(ANA, 2))
    assert everything.omitted == 0 and len(everything.notes) == 10 and everything.as_dict()["omitted"] == 0
    with pytest.raises(InvalidInputError, match="prompt_tokens"):
        make_memory("tiny.db", prompt_tokens=10)


def test_ten_notes_of_the_longest_kind_fit_the_default_budget(owner, face_probe, text_encoder):
    mem, ana = owner
    mem.add_many([text(MAX_NOTE_CHARS, f"Fox story {n}: ") for n in range(10)], identity=ana.id)
    answer = mem.ask("What did the fox do?", probe=face_probe(ANA, 2))
    assert text_encoder.count_tokens(answer.prompt) <= DEFAULT_PROMPT_TOKENS
    assert answer.notes and answer.omitted == 10 - len(answer.notes) > 0


# ---- the page: long notes shortened with a way to open them, and what was left out ---------------


def panel(notes: list[dict], omitted: int = 0) -> dict:
    return {"kind": "answer", "question": "q", "answer": "a", "prompt": "", "notes": notes, "omitted": omitted,
            "gate": {"matched": True, "label": "Ana", "threshold": 0.43, "modality": "face-arcface-s",
                     "policy": "best", "admitted": [{"identity": 1, "label": "Ana", "score": 0.9}]},
            "gated_out": {"total": 3}}


def test_the_page_shortens_long_notes_behind_details_and_says_what_the_prompt_left_out():
    long_note = text(MAX_NOTE_CHARS)
    shown = render.notes_html(panel([{"score": 0.9, "timestamp": "", "content": long_note},
                                     {"score": 0.5, "timestamp": "", "content": "Locker 42"}], omitted=3))
    assert shown.count("<details") == 1 and long_note in shown  # the whole text, behind the details
    summary = shown.split("<summary>")[1].split("</summary>")[0]
    assert long_note[:render.PREVIEW_CHARS] in summary and long_note not in summary and "2,000 characters" in summary
    assert "<bdi>Locker 42</bdi>" in shown and "3 retrieved notes left out of the prompt" in shown
    assert "1 retrieved note left out" in render.notes_html(panel([], omitted=1))  # not "no memories yet"
    chat = render.chat_messages(panel([], omitted=3))
    assert "3 left out of the prompt" in chat[1]["content"]
    stored = render.chat_messages({"kind": "remember", "question": long_note, "owner": "Ana",
                                   "note": {"id": 7, "content": long_note, "tags": []}})
    assert long_note not in stored[0]["content"] and "2,000 characters" in stored[0]["content"]


# ---- text that lies about itself ------------------------------------------------------------------


def test_hidden_characters_are_written_out_wherever_the_page_shows_text():
    assert render.visible("\u202eevil") == "⟨U+202E⟩evil"
    assert render.visible("שלום, Ana\nline two\ttab") == "שלום, Ana\nline two\ttab"  # real text is left alone
    for liar in LIARS:
        notes = [{"score": 0.9, "timestamp": "", "content": liar},
                 {"score": 0.5, "timestamp": "", "content": liar * 300}]
        gate = {"matched": True, "label": liar, "threshold": 0.43, "modality": "face-arcface-s", "policy": "best",
                "admitted": [{"identity": 1, "label": liar, "score": 0.9}],
                "scores": [{"identity": 1, "label": liar, "score": 0.9, "admitted": True}]}
        result = {**panel(notes), "answer": liar, "question": liar, "gate": gate,
                  "gated_out": {"total": 1, "owners": [{"label": liar, "count": 1, "latest": ""}]}}
        pages = [render.panel_html(result, with_answer=True), render.compare_chart({"a": result, "b": result}),
                 render.status_html({"people": 1, "notes": 1, "modality": "m", "threshold": 0.4, "llm": "offline",
                                     "policy": "best", "samples": [{"label": liar, "notes": 1}]}),
                 *(m["content"] for m in render.chat_messages(result)),
                 *(m["content"] for m in render.chat_messages({"kind": "remember", "question": liar, "owner": liar,
                                                               "note": {"id": 1, "content": liar, "tags": [liar]}})),
                 " ".join(str(cell) for row in render.note_rows([note(1, liar)]) for cell in row), render.esc(liar)]
        for page in pages:
            assert hidden(page) == [], (liar, page)
        assert "⟨U+" in pages[0]


def test_the_page_shows_the_prompt_with_hidden_characters_written_out(owner, face_probe):
    mem, ana = owner
    mem.add("\u202eevil plans for Tuesday", identity=ana.id)
    shown = Controller(mem).answer("What are my plans?", face_probe(ANA, 2), None)
    assert "⟨U+202E⟩evil" in shown["prompt"] and hidden(shown["prompt"]) == []
    assert shown["omitted"] == 0


def test_stored_text_stays_as_written_and_the_json_views_carry_it_intact(owner):
    """REST and MCP replies are data for a program, not a display: they keep what the person wrote."""
    mem, ana = owner
    stored = mem.add("\u202eevil", identity=ana.id, infer=False)
    assert stored.content == "\u202eevil" and note_view(stored)["content"] == "\u202eevil"


@pytest.mark.parametrize("label", [*LIARS, "tab\there", "new\nline", "nul\x00"])
def test_a_label_refuses_control_and_invisible_format_characters(owner, face_probe, label):
    mem, _ = owner
    before = mem.store.counts()
    with pytest.raises(InvalidInputError) as refused:
        mem.enroll(label, [face_probe(CHLOE, 0)])
    assert "U+" in str(refused.value) and "invisible" in str(refused.value)
    assert mem.store.counts() == before


def test_a_label_has_a_maximum_length_and_real_names_of_any_script_pass(owner, face_probe):
    mem, _ = owner
    with pytest.raises(InvalidInputError, match=f"at most {MAX_LABEL_CHARS} characters"):
        mem.enroll("x" * (MAX_LABEL_CHARS + 1), [face_probe(CHLOE, 0)])
    assert mem.enroll("  שרה בת-אל  ", [face_probe(CHLOE, 0)]).label == "שרה בת-אל"
