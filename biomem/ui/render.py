"""Pure rendering: engine results (plain dicts, as the public API returns them) to HTML, chat
messages and table rows. No engine calls, no policy: what a dict holds is what may be shown.

Text a person typed (notes, labels, questions, and answers made from them) is shown as it is, except
that control and invisible format characters are written out (`visible`): a right-to-left override
would make "evil" read "live", a zero-width space hide inside a word. In HTML it is also isolated
(<bdi>), so right-to-left text cannot reorder what surrounds it, and a long note shows its head with
a <details> to open the rest.
"""

from __future__ import annotations

import html
import unicodedata
from datetime import datetime
from typing import Any

from ..engine.messages import AMBIGUOUS
from ..identity.enrolment import HIDDEN_CATEGORIES
from .voices import spoken

MAX_SCORE_ROWS = 8  # identities listed in a gate panel (the rest are summarised)
PREVIEW_CHARS = 280  # a longer note is shown shortened, with a way to open it
SHOWN_AS_IS = "\n\t"  # the controls text may hold: line breaks and tabs


def visible(value: Any) -> str:
    """`value` as text with each control or invisible format character (bidirectional overrides and
    isolates, zero-width spaces and joiners, the BOM, line separators) written out as ⟨U+202E⟩."""
    return "".join(f"⟨U+{ord(c):04X}⟩" if c not in SHOWN_AS_IS and unicodedata.category(c) in HIDDEN_CATEGORIES
                   else c for c in str(value))


def esc(value: Any) -> str:
    """`value` for HTML or Markdown: escaped, hidden characters written out."""
    return html.escape(visible(value), quote=True)


def isolated(value: Any) -> str:
    """A person's text inside HTML: escaped, hidden characters written out, in its own direction."""
    return f"<bdi>{esc(value)}</bdi>"


def long_text(text: str) -> str:
    """A note's text in HTML: whole when short, else its head with a <details> that opens the whole."""
    if len(text) <= PREVIEW_CHARS:
        return isolated(text)
    return (f"<details class='bm-long'><summary>{isolated(text[:PREVIEW_CHARS])}… <span class='bm-more'>"
            f"(show all {len(text):,} characters)</span></summary>{isolated(text)}</details>")


def shortened(text: str) -> str:
    """A note's text in a chat message (Markdown, no <details>): hidden characters written out, and past
    PREVIEW_CHARS its head with how long it is (the whole note is in "My notes")."""
    if len(text) <= PREVIEW_CHARS:
        return visible(text)
    return f"{visible(text[:PREVIEW_CHARS])}… *({len(text):,} characters)*"


def when(timestamp: str | None) -> str:
    """'2024-03-02T09:15:00' -> '2 Mar 2024, 09:15'."""
    if not timestamp:
        return ""
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    return f"{moment.day} {moment:%b %Y, %H:%M}"


def plural(count: int, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else many or word + 's'}"


def status_html(view: dict[str, Any]) -> str:
    """The store at a glance (BioMemory.overview()): totals, and the sample people when disclosed."""
    samples = view["samples"]
    listing = ""
    if samples:
        listing = ", ".join(f"{isolated(p['label'])} ({p['notes']})" for p in samples[:12])
        listing += f", … {len(samples) - 12} more" if len(samples) > 12 else ""
    return (f"<div class='bm-status'><b>Store:</b> {plural(view['people'], 'person', 'people')} · "
            f"{plural(view['notes'], 'memory', 'memories')}{': ' + listing if listing else ''}<br>"
            f"<b>Encoder</b> <code>{esc(view['modality'])}</code> (τ {view['threshold']:.2f}) · "
            f"<b>LLM</b> <code>{esc(view['llm'])}</code> · <b>gate policy</b> <code>{esc(view['policy'])}</code></div>")


def fused(gate: dict[str, Any]) -> bool:
    """Whether a gate decision fused several captures (a face and a recording, say): its scores are then margins
    over each kind's τ, and its τ is 0."""
    return "+" in (gate.get("modality") or "")


def match_words(gate: dict[str, Any]) -> str:
    """How the admitted person cleared the gate: "similarity 0.81 ≥ τ 0.43", or a fused decision's margin."""
    own = gate["admitted"][0]["score"]
    if fused(gate):
        return f"fused margin {own:+.2f} ≥ 0 over every kind's τ"
    return f"similarity {own:.2f} ≥ τ {gate['threshold']:.2f}"


def speaker_html(gate: dict[str, Any]) -> str:
    """Who is speaking, when a recording came with the probe: the gate's own decision on the fused probe, so it
    says no more than the disclosure does (nothing of whose voice a refused recording resembled)."""
    if not spoken(gate.get("modality")):
        return ""
    if gate["matched"]:
        who = ", ".join(isolated(a["label"]) for a in gate["admitted"])
        return f"<div class='bm-speaker bm-ok'>🎙 Who is speaking: <b>{who}</b></div>"
    if gate.get("ambiguous"):
        return "<div class='bm-speaker bm-no'>🎙 Who is speaking: could not tell</div>"
    return "<div class='bm-speaker bm-no'>🎙 Who is speaking: nobody enrolled, as far as the gate can tell</div>"


def gate_html(gate: dict[str, Any] | None) -> str:
    """The gate's decision as disclosed: who matched (or "no match"), who is speaking when a recording came with
    the probe, and under the demo disclosure each sample person's similarity against τ."""
    if not gate:
        return "<div class='bm-empty'>The gate's decision appears here after a question.</div>"
    if gate["matched"]:
        who = ", ".join(isolated(a["label"]) for a in gate["admitted"])
        head = f"<div class='bm-verdict bm-ok'>✓ Matched <b>{who}</b> — only their memories may be read</div>"
    elif gate.get("ambiguous"):  # two enrolled people too alike: nobody is named, a better capture is asked for
        head = f"<div class='bm-verdict bm-no'>✗ Could not tell who is asking — {esc(AMBIGUOUS)}</div>"
    else:
        head = "<div class='bm-verdict bm-no'>✗ No match — nobody's memories are read</div>"
    head += speaker_html(gate)
    scores = gate.get("scores")
    if scores is None:  # the private disclosure: nothing about anyone else
        if not gate["matched"]:
            return head
        return head + (f"<div class='bm-meta'>{match_words(gate)} with encoder <code>{esc(gate['modality'])}</code>; "
                       "other people are never shown</div>")
    if not scores:
        return head + "<div class='bm-empty'>No sample person is enrolled with this encoder.</div>"
    tau = gate["threshold"]
    low = min(min(s["score"] for s in scores), tau) - 0.02
    span = max(1.0 - low, 1e-6)

    def pos(value: float) -> float:
        return max(0.0, min(100.0, 100.0 * (value - low) / span))

    rows = []
    for s in scores[:MAX_SCORE_ROWS]:
        cls = "bm-in" if s["admitted"] else ("bm-above" if s["score"] >= tau else "bm-out")
        mark = "admitted" if s["admitted"] else ("≥ τ" if s["score"] >= tau else "&lt; τ")
        rows.append(
            f"<tr class='{cls}'><td class='bm-who'>{isolated(s['label'])}</td><td class='bm-num'>{s['score']:.2f}</td>"
            f"<td class='bm-barcell'><div class='bm-bar'><div class='bm-fill' style='width:{pos(s['score']):.1f}%'>"
            f"</div><div class='bm-tau' style='left:{pos(tau):.1f}%'></div></div></td>"
            f"<td class='bm-mark'>{mark}</td></tr>")
    if len(scores) > MAX_SCORE_ROWS:
        rows.append(f"<tr><td colspan='4' class='bm-more'>… and {len(scores) - MAX_SCORE_ROWS} more below</td></tr>")
    return (head + f"<div class='bm-meta'>encoder <code>{esc(gate['modality'])}</code> · τ = {tau:.2f}"
            f" (red line) · policy <code>{esc(gate['policy'])}</code> · sample people only</div>"
            f"<table class='bm-scores'><tr><th>enrolled</th><th>{'fused margin' if fused(gate) else 'similarity'}"
            "</th><th>vs τ</th><th></th></tr>"
            + "".join(rows) + "</table>")


def notes_html(result: dict[str, Any] | None) -> str:
    """The gated-in notes the LLM was allowed to read, with their scores and times."""
    if not result:
        return "<div class='bm-empty'>The memories the LLM may read appear here.</div>"
    notes = result["notes"]
    if not notes and result.get("omitted"):
        return "<div class='bm-empty'>No memory entered the context.</div>" + left_out_html(result["omitted"])
    if not notes:
        return ("<div class='bm-empty'>No memory entered the context: "
                + ("the gate admitted nobody." if not result["gate"]["matched"]
                   else "the matched person has no memories yet.") + "</div>")
    rows = "".join(f"<tr><td class='bm-num'>{n['score']:.2f}</td><td class='bm-time'>{esc(when(n['timestamp']))}</td>"
                   f"<td>{long_text(n['content'])}</td><td class='bm-from'>{source_html(n)}</td></tr>" for n in notes)
    return ("<table class='bm-notes'><tr><th>score</th><th>time</th><th>memory</th><th>from</th></tr>" + rows
            + "</table>" + left_out_html(result.get("omitted")))


def source(scope_label: str | None, author_label: str | None, shared: bool) -> str:
    """Where a note came from, in words: "own", or "household Home, by Ben" ("imported" without an author)."""
    if not shared:
        return "own"
    return f"household {scope_label or '?'}, {f'by {author_label}' if author_label else 'imported'}"


def source_html(note: dict[str, Any]) -> str:
    """A retrieved note's origin (its view's scope and the names Controller.sourced added) in HTML."""
    if note.get("scope") is None:
        return "<span class='bm-own'>own</span>"
    author = note.get("author_label")
    return (f"household <span class='bm-shared'>{isolated(note.get('scope_label') or '?')}</span>"
            f"<div class='bm-meta'>{f'by {isolated(author)}' if author else 'imported'}</div>")


def left_out_html(omitted: int | None) -> str:
    """A line saying how many retrieved notes the prompt's token budget left out (nothing for none)."""
    if not omitted:
        return ""
    return (f"<div class='bm-meta'>{plural(omitted, 'retrieved note')} left out of the prompt, lowest-ranked "
            "first, to keep it within the LLM's token budget.</div>")


def gated_out_html(result: dict[str, Any] | None) -> str:
    """The notes that stayed out, as disclosed: a total, per sample owner under "demo"."""
    if not result:
        return "<div class='bm-empty'>Notes the gate kept out are summarised here (never shown).</div>"
    out = result["gated_out"]
    if out is None:
        return "<div class='bm-empty'>Nothing about other people is shown to an unmatched requester.</div>"
    text = (f"<div class='bm-meta'>{plural(out['total'], 'note')} of other people stayed out of retrieval; "
            "their content is never shown.</div>")
    owners = out.get("owners")
    if not owners:
        return text
    rows = "".join(f"<tr><td class='bm-who'>{isolated(o['label'])}</td><td class='bm-num'>{o['count']}</td>"
                   f"<td class='bm-time'>{esc(when(o['latest']))}</td></tr>" for o in owners)
    return text + ("<table class='bm-notes'><tr><th>sample owner</th><th>notes</th><th>latest</th></tr>"
                   + rows + "</table>")


def panel_html(result: dict[str, Any] | None, with_answer: bool = False) -> str:
    """One requester's view: (answer,) gate decision, memories read, notes kept out."""
    parts = []
    if with_answer:
        if result and "error" in result:
            body = f"⚠ <b>{esc(result['error'])}</b> — {esc(result['message'])}"
        elif result:
            body = isolated(result["answer"])
        else:
            body = "<span class='bm-empty'>The answer appears here.</span>"
        parts.append(f"<div class='bm-label'>Answer</div><div class='bm-answer'>{body}</div>")
    ok = result if result and "error" not in result else None
    parts += ["<div class='bm-label'>Gate decision</div>", gate_html(ok["gate"] if ok else None),
              "<div class='bm-label'>Memories the LLM may read (gated in)</div>", notes_html(ok),
              "<div class='bm-label'>Kept out by the gate (owner, count, latest — never content)</div>",
              gated_out_html(ok)]
    return "<div class='bm-panel'>" + "".join(parts) + "</div>"


def asker(gate: dict[str, Any]) -> str:
    """Who asked, as the gate decided: "Ana (similarity 0.81 ≥ τ 0.43)" or "unrecognised"."""
    if gate.get("ambiguous"):
        return f"✗ **Could not tell who is asking**: {AMBIGUOUS} (no memory is read or stored)"
    voice = " · 🎙 speaking" if spoken(gate.get("modality")) else ""
    if not gate["matched"]:
        return f"✗ **Unrecognised requester**{voice} (no match: no memory is read or stored)"
    return f"✓ **{visible(gate['label'])}**{voice} ({match_words(gate)})"


def chat_messages(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One ask or remember as chat messages: who asked (the gate's decision) with their words, then
    the answer, or for a remember the stored note (shown as a note, not as an answer)."""
    if result["kind"] == "remember":
        note, owner = result["note"], visible(result["owner"])
        tags = f"tags: {visible(', '.join(note['tags']))}. " if note["tags"] else ""
        return [{"role": "user", "content": f"✓ **{owner}** · remember\n\n{shortened(result['question'])}"},
                {"role": "assistant", "content": f"{tags}Only a probe of {owner} can bring it back.",
                 "metadata": {"title": f"✎ Stored as note {note['id']} for {owner}"}}]
    used, out, omitted = len(result["notes"]), result["gated_out"], result.get("omitted")
    caption = (f"{plural(used, 'memory', 'memories')} read · {out['total']} kept out" if out is not None
               else "no memory read") + (f" · {omitted} left out of the prompt (its token budget)" if omitted else "")
    return [{"role": "user", "content": f"{asker(result['gate'])}\n\n{visible(result['question'])}"},
            {"role": "assistant", "content": f"{visible(result['answer'])}\n\n*{caption}*"}]


def compare_chart(result: dict[str, Any] | None) -> str:
    """Both requesters' similarity to each sample person against τ, as a small SVG dot plot; empty
    unless the disclosure shows scores on both sides."""
    gates = [((result or {}).get(key) or {}).get("gate") or {} for key in ("a", "b")]
    if any(gate.get("scores") is None for gate in gates) or gates[0]["modality"] != gates[1]["modality"]:
        return ""  # no scores, or scores of different kinds (a recording on one side only): not on one axis
    labels = list(dict.fromkeys(s["label"] for gate in gates for s in gate["scores"]))[:MAX_SCORE_ROWS]
    if not labels:
        return ""
    tau = gates[0]["threshold"]
    a, b = ({s["label"]: s["score"] for s in gate["scores"]} for gate in gates)
    left, width, row = 90, 300, 22
    bottom = 26 + row * len(labels)

    def x(value: float) -> float:
        return left + width * (max(-0.2, min(1.0, value)) + 0.2) / 1.2

    parts = [f"<line x1='{x(tau):.1f}' y1='14' x2='{x(tau):.1f}' y2='{bottom - 8}' class='bm-c-tau'/>",
             f"<text x='{x(tau) + 3:.1f}' y='12' class='bm-c-text'>τ {tau:.2f}</text>"]
    parts += [f"<text x='{x(t):.1f}' y='{bottom + 6}' text-anchor='middle' class='bm-c-text'>{t:g}</text>"
              for t in (0, 0.5, 1)]
    for n, label in enumerate(labels):
        y = 26 + row * n
        parts.append(f"<text x='{left - 6}' y='{y + 4}' text-anchor='end' class='bm-c-text'>{esc(label)}</text>"
                     f"<line x1='{left}' y1='{y}' x2='{left + width}' y2='{y}' class='bm-c-grid'/>")
        if label in a:
            parts.append(f"<circle cx='{x(a[label]):.1f}' cy='{y}' r='5' class='bm-c-a'>"
                         f"<title>A: {a[label]:.2f}</title></circle>")
        if label in b:
            parts.append(f"<rect x='{x(b[label]) - 4.5:.1f}' y='{y - 4.5}' width='9' height='9' class='bm-c-b'>"
                         f"<title>B: {b[label]:.2f}</title></rect>")
    return (f"<div class='bm-chart'><div class='bm-meta'>Similarity of each probe to each sample person "
            f"(● requester A, ■ requester B); the gate admits only what lies right of the red τ line.</div>"
            f"<svg viewBox='0 0 {left + width + 10} {bottom + 10}' role='img' "
            f"aria-label='similarity of both requesters to each sample person against tau'>"
            f"{''.join(parts)}</svg></div>")


NOTE_HEADERS = ["id", "time", "memory", "tags", "from"]


def note_rows(notes: list[Any], groups: dict[int, str] | None = None,
              people: dict[int, str] | None = None) -> list[list[Any]]:
    """The notes a person may read as table rows: id, time, memory, tags, and where each came from ("own",
    or its household's name and author from `groups` / `people`), hidden characters written out; a note
    is at most the engine's 2,000 characters and the table scrolls."""
    groups, people = groups or {}, people or {}
    return [[n.id, when(n.timestamp), visible(n.content), visible(", ".join(n.tags)),
             visible(source(groups.get(n.scope), people.get(n.author) if n.author is not None else None,
                            n.scope is not None))] for n in notes]


def calibration_text(report: Any, current: float, enrolled: int, target_fpir: float) -> str:
    """A calibration report's table at this store's N (`enrolled` people of its encoder) and target FPIR,
    with this store's τ for that encoder."""
    return (report.table(enrolled=enrolled, target_fpir=target_fpir)
            + f"\n\nThis store: {plural(enrolled, 'person', 'people')} enrolled with `{report.modality}`, τ "
            f"**{current:.4f}** (the gate admits similarity ≥ τ).")


def identification_text(risks: dict[str, dict[str, Any]]) -> str:
    """What each modality's τ guards in 1:N identification (Biometrics.identification), one line each."""
    lines = ["**What τ guards**: a stranger is compared with everyone enrolled, so the chance one is taken for "
             "someone (FPIR) grows with the number of people."]
    for name, risk in risks.items():
        head = f"- `{name}`: {risk['enrolled']} enrolled, τ {risk['tau']:.4f}"
        if risk["fmr"] is None:
            lines.append(f"{head}, uncalibrated: its false-match rate is unknown, so enrolment is not limited "
                         "(calibrate and store τ to know).")
        else:
            lines.append(f"{head}, calibrated FMR {risk['fmr']:.1e}: expected FPIR {risk['fpir']:.2%}; at most "
                         f"{risk['max_enrolled']:,} people stay under the target {risk['target_fpir']:.2%}.")
    return "\n".join(lines)
