"""LoCoMo's data: locomo10.json found or fetched and verified, parsed into conversations of dated
turns and questions with clean evidence ids, trimmed for smoke runs and sampled per category."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from biomem.errors import BioMemError
from biomem.settings import Settings

# The revision A-Mem was evaluated on (see shared/data/locomo/README.md), pinned by commit and hash.
LOCOMO_URL = ("https://raw.githubusercontent.com/snap-research/locomo/"
              "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376/data/locomo10.json")
LOCOMO_SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")  # also reads the data's "D:11:26", "D30:05", "D8:6; D9:17"


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/biomem/locomo (default ~/.cache/biomem/locomo): data and cached ingestions."""
    return Settings.from_env().cache / "locomo"


class DataUnavailableError(BioMemError, RuntimeError):
    """locomo10.json is neither at the given path nor downloadable."""


@dataclass(frozen=True)
class Turn:
    """One utterance of a conversation and the session date it was said on."""

    dia_id: str
    speaker: str
    text: str
    caption: str | None  # BLIP caption of a photo the turn shared
    date: str

    @property
    def note(self) -> str:
        """The paper protocol's note: "Speaker: text", the caption of a shared photo in front of the text."""
        if self.caption:
            return f"{self.speaker}: [Image: {self.caption}] {self.text}"
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    """A QA item; `evidence` holds the dia_ids of turns that exist in its conversation."""

    conversation: str
    index: int  # position in the conversation's qa list
    question: str
    answer: Any
    category: int
    evidence: tuple[str, ...]
    adversarial: str | None = None  # category 5: LoCoMo's adversarial_answer, the distractor


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample: its turns in order and its questions."""

    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file: identifies the data in the cache key and the records."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_data(path: Path, url: str = LOCOMO_URL, sha256: str = LOCOMO_SHA256) -> Path:
    """`path` if it exists, else locomo10.json downloaded there from its public source and verified."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise DataUnavailableError(f"{path} does not exist and downloading {url} failed ({exc}); "
                                   "fetch locomo10.json by hand and pass --data") from exc
    if file_sha256(partial) != sha256:
        partial.unlink()
        raise DataUnavailableError(f"{url} did not have the expected sha256 {sha256}")
    partial.replace(path)
    return path


def load_locomo(path: Path) -> list[Conversation]:
    """Parse locomo10.json: sessions in order, session dates on their turns, evidence ids cleaned."""
    conversations = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        talk = sample["conversation"]
        sessions = sorted((int(m[1]), key) for key in talk
                          if (m := re.fullmatch(r"session_(\d+)", key)) and isinstance(talk[key], list))
        turns = tuple(Turn(t["dia_id"], t["speaker"], t["text"], t.get("blip_caption"), talk[f"{key}_date_time"])
                      for _, key in sessions for t in talk[key])
        known = {t.dia_id for t in turns}
        questions = tuple(
            Question(sample["sample_id"], index, qa["question"], qa.get("answer"), int(qa["category"]),
                     tuple(e for e in (f"D{s}:{n}" for raw in qa.get("evidence", [])
                                       for s, n in _EVIDENCE.findall(raw)) if e in known),
                     qa.get("adversarial_answer"))
            for index, qa in enumerate(sample["qa"]))
        conversations.append(Conversation(sample["sample_id"], turns, questions))
    return conversations


def trim(conversation: Conversation, max_turns: int | None) -> Conversation:
    """The first `max_turns` turns (smoke runs) and only questions whose evidence they all hold."""
    if max_turns is None:
        return conversation
    turns = conversation.turns[:max_turns]
    kept = {t.dia_id for t in turns}
    questions = tuple(q for q in conversation.questions if q.evidence and set(q.evidence) <= kept)
    return Conversation(conversation.sample_id, turns, questions)


def sample_questions(questions: Sequence[Question], fraction: float, seed: int,
                     categories: Sequence[int]) -> list[Question]:
    """Questions of `categories`; with fraction < 1 a seeded subset of round(fraction * n) (at least 1) per category."""
    chosen: list[Question] = []
    rng = np.random.default_rng(seed)
    for category in categories:
        pool = [q for q in questions if q.category == category]
        if fraction >= 1.0 or not pool:
            chosen += pool
            continue
        picks = rng.choice(len(pool), size=max(1, round(fraction * len(pool))), replace=False)
        chosen += [pool[i] for i in sorted(picks)]
    order = {(q.conversation, q.index): i for i, q in enumerate(questions)}
    return sorted(chosen, key=lambda q: order[(q.conversation, q.index)])
