"""What a requester may learn from a reply: one policy for the UI, the API, the CLI and logs.

"private" (the default): a requester who matched nobody learns only "no match" (or, for a probe
too close to two enrolled people, that the gate could not tell who is asking, naming nobody); a matched
requester sees their own label and rounded score, their own notes, and how many notes in
all were kept out — no other person's label, score, count or time.
"demo": the public demo's transparent panels (every score against τ, each other owner's
note count and latest time), but only for sample people; a real enrolment is never shown.
"""

from __future__ import annotations

from typing import Any

from ..stores.records import Identity
from .gate import GateResult

DIGITS = 2  # scores are shown rounded: an exact cosine is a gradient for a forger
# what an ambiguous probe's requester is told to do, naming nobody: a look-alike relative is told apart by a second kind
AMBIGUOUS = ("two enrolled people are within the gate's margin of this probe: take a clearer capture, or send one of "
             "another kind with it (a palm beside a face) if you enrolled one")


def gate_view(gate: GateResult, people: dict[int, Identity], mode: str) -> dict[str, Any]:
    """The gate's decision as the requester may see it."""
    if not gate.matched and mode == "private":
        return {"matched": False, "modality": gate.modality, **({"ambiguous": True, "advice": AMBIGUOUS}
                                                                 if gate.ambiguous else {})}
    view: dict[str, Any] = {
        "matched": gate.matched, "identity": gate.identity,
        "label": people[gate.identity].label if gate.identity in people else None,
        "admitted": [{"identity": i, "label": people[i].label, "score": round(gate.score_of(i), DIGITS)}
                     for i in gate.admitted if i in people],
        "threshold": round(float(gate.threshold), DIGITS), "modality": gate.modality, "policy": gate.policy,
        "ambiguous": gate.ambiguous, **({"advice": AMBIGUOUS} if gate.ambiguous else {})}
    if mode == "demo":
        shown = [(i, s) for i, s in gate.scores.items() if i in people and people[i].sample or i in gate.admitted]
        view["scores"] = [{"identity": i, "label": people[i].label, "score": round(s, DIGITS),
                           "admitted": i in gate.admitted} for i, s in sorted(shown, key=lambda x: -x[1])]
    return view


def kept_out_view(gate: GateResult, outside: int, summary: dict[int, tuple[int, str]],
                  people: dict[int, Identity], mode: str) -> dict[str, Any] | None:
    """Notes the gate kept out: `outside` in all (matched requesters), and under "demo" each sample
    owner's count and latest time from `summary` (owner -> (count, latest))."""
    if not gate.matched and mode == "private":
        return None
    view: dict[str, Any] = {"total": outside}
    if mode == "demo":
        view["owners"] = sorted(({"label": people[o].label, "count": count, "latest": latest}
                                 for o, (count, latest) in summary.items()
                                 if o not in gate.admitted and o in people and people[o].sample),
                                key=lambda row: (-row["count"], row["label"]))
    return view


def people_view(people: list[Identity], summary: dict[int, tuple[int, str]], mode: str) -> list[dict[str, Any]] | None:
    """Who is in the store, as anyone may see it: each sample person's label and note count
    under "demo"; nothing under "private"."""
    if mode != "demo":
        return None
    return [{"label": p.label, "notes": summary.get(p.id, (0, ""))[0]} for p in people if p.sample]


def note_view(note: Any, score: float | None = None) -> dict[str, Any]:
    """One of the requester's own notes, with its rounded retrieval score."""
    data = note.as_dict()
    if score is not None:
        data["score"] = round(float(score), DIGITS)
    return data


def linked_view(linked: list[tuple[Any, int]]) -> dict[str, Any]:
    """{"linked": [note view + "via": the hit's id, ...]}, or nothing when no link was followed."""
    return {"linked": [{**note_view(n), "via": via} for n, via in linked]} if linked else {}
