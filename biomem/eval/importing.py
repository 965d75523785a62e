"""Trusted bulk imports: LoCoMo conversations, one identity each with a sample biometric.

An operator's action (it enrols by itself and stores by identity id), so the app offers it
only with BIOMEM_ADMIN; each conversation gets the sample person `LoCoMo n` (a synthetic palm,
or a sample face without a palm encoder) so a visitor can ask as its owner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..engine.memory import BioMemory
from ..errors import InvalidInputError
from ..identity.samples import LOCOMO_FACES, SAMPLE_PEOPLE, demo_capture, demo_palm, locomo_sample
from .locomo_data import load_locomo

BATCH = 128  # turns stored per add_many call (one progress step each)
Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class Imported:
    """One conversation of an import: its identity's label, turns, sample person and biometric kind."""

    label: str
    turns: int
    sample: str
    kind: str
    skipped: bool = False


def import_locomo(mem: BioMemory, path: str | Path, conversations: int = 10, *, palm: str | None = None,
                  progress: Progress | None = None) -> list[Imported]:
    """Import the first `conversations` of LoCoMo's JSON at `path` into `mem`; a conversation
    already imported (same label) is skipped. `palm`: the palm encoder, else sample faces."""
    progress = progress or (lambda fraction, desc: None)
    file = Path(path).expanduser()
    if file.suffix.lower() != ".json" or not file.is_file():
        raise InvalidInputError("give the path of LoCoMo's locomo10.json on the server")
    progress(0.0, "Reading the LoCoMo file…")
    try:
        loaded = load_locomo(file)[:max(1, int(conversations))]
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise InvalidInputError(f"not a LoCoMo file ({exc.__class__.__name__})") from None
    if palm is None and len(loaded) > len(LOCOMO_FACES):
        raise InvalidInputError(f"without a palm encoder only {len(LOCOMO_FACES)} conversations get a "
                                "sample face; import fewer")
    existing = {i.label for i in mem.identities()}
    total = sum(len(c.turns) for c in loaded) or 1
    done, results = 0, []
    for index, conversation in enumerate(loaded):
        label = f"{conversation.sample_id} ({' & '.join(dict.fromkeys(t.speaker for t in conversation.turns))})"
        texts, stamps = [t.note for t in conversation.turns], [t.date for t in conversation.turns]
        sample, kind = locomo_sample(index), "palm" if palm else "face"
        if label in existing:
            results.append(Imported(label, len(texts), sample, kind, skipped=True))
            done += len(texts)
            continue
        face, seed = SAMPLE_PEOPLE[sample]
        captures = [demo_palm(seed, 0), demo_palm(seed, 1)] if palm else [demo_capture(face, 0), demo_capture(face, 1)]
        identity = mem.enroll(label, captures, palm, sample=True)
        for start in range(0, len(texts), BATCH):
            progress(done / total, f"{label}: turn {start + 1} of {len(texts)}")
            mem.add_many(texts[start:start + BATCH], identity=identity.id, timestamps=stamps[start:start + BATCH])
            done += len(texts[start:start + BATCH])
        results.append(Imported(label, len(texts), sample, kind))
    progress(1.0, "Done")
    return results
