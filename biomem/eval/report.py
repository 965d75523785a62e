"""Per-question records -> the paper's table (markdown), retrieval and gate figures, a bar chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .metrics import CATEGORY_NAMES, percent

METRICS = ("f1", "bleu1", "locomo_f1")
MODES = ("gated", "ungated")
ROLES = ("owner", "non-owner")


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def _group(rows: Sequence[dict[str, Any]], names: dict[int, str], average: str) -> dict[str, Any]:
    """Scores per category, their average (macro: over categories; micro: over questions),
    evidence recall@K (and with linked notes, when links were followed) and leakage of one (mode, role)."""
    categories = {}
    for category in names:
        picked = [r["scores"] for r in rows if r["category"] == category]
        categories[category] = {"n": len(picked), **{m: percent(s[m] for s in picked) for m in METRICS}}
    if average == "micro":
        mean = {m: percent(r["scores"][m] for r in rows) for m in METRICS}
    else:
        mean = {m: _mean([c[m] for c in categories.values()]) for m in METRICS}
    leaked = sum(r["scores"]["leaked"] for r in rows)
    retrieved = sum(r["scores"]["retrieved"] for r in rows)
    return {"questions": len(rows), "categories": categories, "average": mean,
            "recall": percent(r["scores"]["recall"] for r in rows),
            "recall_linked": percent(r["scores"].get("recall_linked") for r in rows),
            "leaked": leaked, "retrieved": retrieved,
            "context_notes": _mean([r["scores"]["retrieved"] for r in rows]),
            "prompt_tokens": _mean([r["scores"].get("prompt_tokens") for r in rows]),
            "leakage": 100 * leaked / retrieved if retrieved else 0.0,
            "empty_pools": sum(r["scores"]["retrieved"] == 0 for r in rows)}


def summarize(records: Sequence[dict[str, Any]], gate: dict[str, Any], names: dict[int, str] = CATEGORY_NAMES,
              average: str = "macro") -> dict[str, Any]:
    """Every (mode, role) group over the categories `names`, Avg. Gap = Owner Average - Non-owner
    Average, and the gate check."""
    summary: dict[str, Any] = {"gate": gate, "categories": dict(names), "average_rule": average}
    for mode in MODES:
        groups = {role: _group([r for r in records if r["mode"] == mode and r["role"] == role], names, average)
                  for role in ROLES}
        owner, other = groups["owner"]["average"], groups["non-owner"]["average"]
        groups["gap"] = {m: owner[m] - other[m] if owner[m] is not None and other[m] is not None else None
                         for m in METRICS}
        summary[mode] = groups
    return summary


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _pair(scores: dict[str, Any]) -> str:
    return f"{_num(scores['f1'])} / {_num(scores['bleu1'])}"


def _score_table(summary: dict[str, Any], dataset: str, cell: Any) -> list[str]:
    names = summary["categories"]
    columns = [*names.values(), f"Average ({summary['average_rule']})", "Avg. Gap"]
    lines = ["| Dataset | Probe | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for mode, label in (("gated", f"{dataset}, gated"), ("ungated", "no gate (A-Mem over all users)")):
        for role in ROLES:
            group = summary[mode][role]
            cells = [cell(group["categories"][c]) for c in names] + [cell(group["average"])]
            cells.append(cell(summary[mode]["gap"]) if role == "owner" else "")
            lines.append(f"| {label if role == 'owner' else ''} | {role.capitalize()} | " + " | ".join(cells) + " |")
    return lines


def markdown(summary: dict[str, Any], config: dict[str, Any], timings: dict[str, Any]) -> str:
    """The tables and timings of one run, as printed and written to results.md."""
    gate = summary["gate"]
    counts = ", ".join(f"{name} {summary['gated']['owner']['categories'][c]['n']}"
                       for c, name in summary["categories"].items())
    probes = len(gate["probes"])
    lines = [
        f"### LoCoMo, {config['dataset']}, answers by `{config['llm']}`", "",
        f"`{config['command']}`", "",
        (f"{config['questions']} questions ({counts}) over {len(config['conversations'])} conversations; "
         f"K = {config['k']}; τ = {gate['threshold']:.4f} ({config['tau_source']}); gate policy "
         f"`{config['policy']}`; notes built by `{config['ingest_llm']}`; text model `{config['text_model']}`."), "",
        "A-Mem's token F1 / BLEU-1 (%):", "",
        *_score_table(summary, config["dataset"], _pair), "",
        "Official LoCoMo F1 (%, stemmed; multi-hop split at commas):", "",
        *_score_table(summary, config["dataset"], lambda s: _num(s["locomo_f1"])), "",
        (f"Retrieval and gate (no LLM involved; leakage = retrieved notes not owned by the probe's identity; "
         f"gate acceptance over the {probes} probes):"), "",
        "| Mode | Probe | Evidence recall@K | Leaked / retrieved notes | Leakage | Gate acceptance | Empty pools "
        "| Context: notes / prompt tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    accepted = sum(p["accepted"] for p in gate["probes"])
    false = sum(p["false_accept"] for p in gate["probes"])
    acceptance = {("gated", "owner"): f"TAR {100 * gate['tar']:.0f}% ({accepted}/{probes})",
                  ("gated", "non-owner"): f"FAR {100 * gate['far']:.0f}% ({false}/{probes})"}
    for mode in MODES:
        for role in ROLES:
            g = summary[mode][role]
            recall = f"{_num(g['recall'])}%" + (f" ({_num(g['recall_linked'])}% with linked notes)"
                                                if g["recall_linked"] is not None else "")
            lines.append(f"| {mode} | {role.capitalize()} | {recall} | {g['leaked']} / {g['retrieved']} "
                         f"| {g['leakage']:.2f}% | {acceptance.get((mode, role), 'everyone (τ = -1)')} "
                         f"| {g['empty_pools']} | {_num(g['context_notes'])} / {_num(g['prompt_tokens'])} |")
    cached = "cached, built in" if timings["ingest_cached"] else "built in"
    timing = (f"Timings: ingestion of {timings['notes']} notes {cached} {timings['ingest_s']:.1f} s; "
              f"biometric encoding and enrolment {timings['enrol_s']:.1f} s; answering gated "
              f"{timings['answer_gated_s']:.1f} s, ungated {timings['answer_ungated_s']:.1f} s; "
              f"total {timings['total_s']:.1f} s.")
    lines += ["", timing, ""]
    return "\n".join(lines)


def bar_chart(summary: dict[str, Any], config: dict[str, Any], path: Path) -> None:
    """F1 and BLEU-1 per category and on average: Owner and Non-owner under the gate, and ungated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = summary["categories"]
    labels = [*names.values(), "Average"]
    series = [("Owner (gated)", summary["gated"]["owner"], "#2b6cb0"),
              ("Non-owner (gated)", summary["gated"]["non-owner"], "#c53030"),
              ("No gate, any probe", summary["ungated"]["owner"], "#a0aec0")]
    x = np.arange(len(labels))
    width = 0.27
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, metric, title in zip(axes, ("f1", "bleu1"), ("token F1 (%)", "BLEU-1 (%)")):
        for offset, (name, group, color) in enumerate(series):
            values = [group["categories"][c][metric] for c in names] + [group["average"][metric]]
            ax.bar(x + (offset - 1) * width, [v or 0.0 for v in values], width, label=name, color=color)
        ax.set_xticks(x, labels)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8)
    fig.suptitle(f"LoCoMo, {config['dataset']}, answers by {config['llm']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
