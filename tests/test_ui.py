"""The demo's pure layers: rendering and readable errors, without a server or a browser.

What a page shows is exactly what the engine's dict holds: nothing typed by a person reaches the
HTML unescaped, nothing about other people appears unless the disclosure put it in the dict.
"""

from __future__ import annotations

import gradio as gr
import pytest

from biomem.errors import InvalidImageError, LLMError, NoFaceError, UnknownIdentityError
from biomem.identity.limits import client_keys
from biomem.stores.records import Note
from biomem.ui import Controller, render
from biomem.ui.controller import NO_HOUSEHOLD_CHOSEN
from biomem.ui.messages import fail, friendly, hint, readable


def gate(label: str, score: float, scores: list[dict] | None = None, matched: bool = True) -> dict:
    view = {"matched": matched, "label": label if matched else None, "threshold": 0.43,
            "modality": "face-arcface-s", "policy": "best",
            "admitted": [{"identity": 1, "label": label, "score": score}] if matched else []}
    if scores is not None:
        view["scores"] = scores
    return view


def side(gate_view: dict) -> dict:
    return {"kind": "answer", "question": "q", "answer": "a", "prompt": "", "gate": gate_view, "notes": [],
            "gated_out": {"total": 3} if gate_view["matched"] else None}


def test_the_compare_chart_draws_both_requesters_against_tau_and_escapes_labels():
    scores = [{"identity": 1, "label": "Ana", "score": 0.9, "admitted": True},
              {"identity": 2, "label": "<img src=x onerror=alert(1)>", "score": 0.1, "admitted": False}]
    chart = render.compare_chart({"a": side(gate("Ana", 0.9, scores)),
                                  "b": side(gate("", 0.0, [dict(s, admitted=False) for s in scores], matched=False))})
    assert chart.count("<circle") == 2 and chart.count("<rect") == 2 and "class='bm-c-tau'" in chart
    assert "<img" not in chart and "&lt;img" in chart


def test_no_chart_when_the_disclosure_shows_no_scores():
    private = {"a": side(gate("Ana", 0.9)), "b": side(gate("", 0.0, matched=False))}
    assert render.compare_chart(private) == ""
    assert render.compare_chart({"a": side(gate("Ana", 0.9, [])), "b": {"error": "No face found", "message": ""}}) == ""
    assert render.compare_chart(None) == ""


def test_chat_messages_say_who_asked_and_show_a_remember_as_a_stored_note():
    asked = render.chat_messages(side(gate("Ana", 0.81)))
    assert asked[0]["role"] == "user" and "**Ana** (similarity 0.81 ≥ τ 0.43)" in asked[0]["content"]
    stranger = render.chat_messages(side(gate("", 0.0, matched=False)))
    assert "Unrecognised requester" in stranger[0]["content"] and "no memory read" in stranger[1]["content"]
    stored = render.chat_messages({"kind": "remember", "question": "My locker is 42", "owner": "Ana",
                                   "note": {"id": 12, "content": "My locker is 42", "tags": ["gym"]}})
    assert "Ana** · remember" in stored[0]["content"]
    assert stored[1]["metadata"]["title"] == "✎ Stored as note 12 for Ana" and "tags: gym" in stored[1]["content"]


def test_the_status_lists_people_only_when_the_disclosure_does():
    view = {"people": 4, "notes": 12, "modality": "face-arcface-s", "threshold": 0.43, "llm": "offline",
            "policy": "best", "samples": None}
    assert "4 people · 12 memories" in render.status_html(view) and "Ana" not in render.status_html(view)
    shown = render.status_html({**view, "samples": [{"label": "<b>Ana</b>", "notes": 5}]})
    assert "<bdi>&lt;b&gt;Ana&lt;/b&gt;</bdi> (5)" in shown and "<b>Ana</b>" not in shown


@pytest.mark.parametrize("error,title,words", [
    (NoFaceError("no face in image bytes"), "No face found", "No face was found"),
    (InvalidImageError("cannot identify image file <_io.BytesIO>"), "Not a usable image", "not an image"),
    (UnknownIdentityError("matched nobody"), "Not recognised", "matches nobody enrolled"),
    (LLMError("http://10.0.0.5:8080 refused"), "LLM unreachable", "did not answer"),
    (RuntimeError("/srv/secret/path exploded"), "Something went wrong", "server log"),
])
def test_errors_become_a_titled_line_without_internals(error, title, words):
    got_title, message = readable(error)
    assert got_title == title and words in message
    assert "/srv" not in message and "10.0.0.5" not in message and "BytesIO" not in message
    with pytest.raises(gr.Error) as raised:
        friendly(lambda: (_ for _ in ()).throw(error))()
    assert raised.value.title == title and raised.value.message.startswith(f"{title} — ")


def test_a_hint_shows_as_a_warning_and_still_stops_the_event(monkeypatch):
    shown = []
    monkeypatch.setattr(gr, "Warning", lambda message, title: shown.append((title, message)))
    with pytest.raises(gr.Error) as raised:
        friendly(lambda: (_ for _ in ()).throw(hint("Type a question first.", "No question")))()
    assert shown == [("No question", "No question — Type a question first.")]  # headed "Warning" in the page
    assert raised.value.visible is False  # no second toast headed "Error"; an API client still gets it
    assert raised.value.message == "No question — Type a question first." and raised.value.title == "No question"
    assert fail("The probe matches nobody enrolled.", "Not recognised").visible is True  # a refusal stays an error


def test_toasts_escape_what_they_repeat():
    assert "<script>" not in fail("Name <script> taken", "Name taken").message


def test_attempt_limit_keys_trust_only_the_proxy_s_own_hop():
    assert client_keys("s1", "10.0.0.1") == ["session:s1", "address:10.0.0.1"]
    forged = "6.6.6.6, 203.0.113.7"  # the client wrote the left part, the proxy appended the right
    assert client_keys("s1", "10.0.0.1", forged, trust_proxy=True)[1] == "address:203.0.113.7"
    assert client_keys("s1", "10.0.0.1", forged)[1] == "address:10.0.0.1"  # not behind a proxy: ignored
    assert client_keys(None, "10.0.0.1") == ["address:10.0.0.1"]


def test_retrieved_notes_say_whether_they_are_one_s_own_or_a_household_s_and_who_wrote_it():
    result = side(gate("Ana", 0.9))
    shared = {"timestamp": None, "scope": 9, "scope_label": "<b>Home</b>"}
    result["notes"] = [
        {"id": 1, "content": "My PIN", "timestamp": None, "score": 0.5, "scope": None, "author": 1,
         "scope_label": None, "author_label": "Ana"},
        {"id": 2, "content": "Wi-Fi", "score": 0.4, "author": 2, "author_label": "<i>Ben</i>", **shared},
        {"id": 3, "content": "Bins on Monday", "score": 0.3, "author": None, "author_label": None, **shared}]
    html = render.notes_html(result)
    assert html.count("<td class='bm-from'>") == 3 and "<span class='bm-own'>own</span>" in html
    assert "household <span class='bm-shared'><bdi>&lt;b&gt;Home&lt;/b&gt;</bdi></span>" in html
    assert "by <bdi>&lt;i&gt;Ben&lt;/i&gt;</bdi>" in html and "imported" in html
    assert "<b>Home</b>" not in html and "<i>Ben" not in html
    old = {"id": 4, "content": "A note from before households", "timestamp": None, "score": 0.2}
    assert "<span class='bm-own'>own</span>" in render.notes_html({**result, "notes": [old]})


def test_my_notes_rows_mark_the_household_s_notes():
    notes = [Note(id=1, owner=1, content="My PIN", timestamp="2024-03-02T09:15:00", author=1),
             Note(id=2, owner=9, content="Wi-Fi", timestamp="2024-03-01T20:00:00", author=2, tags=["home"]),
             Note(id=3, owner=9, content="Bins", timestamp="2024-03-01T20:00:00", author=None)]
    rows = render.note_rows(notes, {9: "Home\u202e"}, {2: "Ben"})
    assert render.NOTE_HEADERS == ["id", "time", "memory", "tags", "from"]
    assert [row[4] for row in rows] == ["own", "household Home⟨U+202E⟩, by Ben", "household Home⟨U+202E⟩, imported"]
    assert rows[1][:4] == [2, "1 Mar 2024, 20:00", "Wi-Fi", "home"]


def test_the_remember_s_choices_are_read_as_a_household_id_and_member_ids():
    assert Controller.placement("own", []) == (None, []) and Controller.placement(None, None) == (None, [])
    assert Controller.placement("12", ["3", "4"]) == (12, [3, 4]) and Controller.placement(12, "3") == (12, [3])
    with pytest.raises(gr.Error) as caught:
        Controller.placement("own", ["3"])  # hiding needs a household
    assert caught.value.title == "No household" and caught.value.visible is False
    for where, hidden in (("Home", []), ("12", ["Chloe"]), ({"id": 12}, [])):
        with pytest.raises(gr.Error) as caught:
            Controller.placement(where, hidden)
        assert caught.value.title == NO_HOUSEHOLD_CHOSEN[0]  # what a household one is not in reads as
