"""OfflineLLM: note analysis, evolution and answers from heuristics over the text encoder, no model."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from ...stores.records import Note
from ..textenc import TextEncoder
from .base import LLM, Draft, Evolution, NoteMeta
from .prompts import NOT_MENTIONED

NO_MEMORY_ANSWER = "I have no memories of you, so I cannot answer that from memory."
# Cosine below which the offline answerer abstains: its best retrieved sentence is then about
# something else. Set with benchmarks/abstention.py on LoCoMo (answerable vs adversarial questions).
ABSTAIN_BELOW = 0.40

# scikit-learn's English stop words plus the fillers of chat ("yeah", "awesome", "lol").
_STOP = ENGLISH_STOP_WORDS | frozenset("""also am did does doing done gets getting goes going gone got
having know like lot made make oh ok okay really say said sure thing things think way yeah yes hey hi
thanks thank wow great good glad awesome cool feel feeling felt lol let lets time times day days
today tomorrow yesterday week weeks month months year years ago recently tell told just want""".split())
_MONTHS_DAYS = frozenset("""january february march april may june july august september october
november december monday tuesday wednesday thursday friday saturday sunday morning evening night
afternoon""".split())
TAG_VOCABULARY = (
    "family", "friends", "relationships", "work", "career", "education", "health", "fitness",
    "food", "travel", "hobbies", "art", "music", "books", "sports", "pets", "home", "finance",
    "shopping", "technology", "nature", "events", "emotions", "plans", "community", "identity",
    "children", "parenting", "volunteering", "security",
)


class OfflineLLM(LLM):
    """Heuristics that need no model beyond the text encoder.

    Keywords: content words (no names, numbers, dates or stop words) ranked by the cosine of
    their static word-piece vector with the note's centroid. Tags: the closest entries of a
    small topic vocabulary. Evolution: link to neighbours above `link_threshold`, never edit
    them. Answers: the retrieved sentence closest to the question (a date for temporal ones), or
    NOT_MENTIONED when even that sentence's cosine to the question is below `abstain_below`.

    Sentence embeddings are kept (up to `cache_size`, least recently used out) under their
    owner and a hash of the sentence, never the text: an owner's next question re-embeds only
    new sentences, and a hit can never come from, or time, another owner's notes.
    """

    name = "offline"

    def __init__(self, text_encoder: TextEncoder, *, link_threshold: float = 0.5, cache_size: int = 4096,
                 abstain_below: float = ABSTAIN_BELOW) -> None:
        self.text = text_encoder
        self.link_threshold = link_threshold
        self.abstain_below = abstain_below
        self._tag_vectors: np.ndarray | None = None
        self.cache_size = cache_size
        self._sentences: OrderedDict[tuple[int, bytes], np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()

    @staticmethod
    def _candidates(content: str, names: bool = False) -> list[str]:
        """Distinct lower-cased content words; capitalised words inside a sentence (names) only if `names`."""
        words, seen = [], set()
        for sentence in re.split(r"(?<=[.!?])\s+", content):
            for position, token in enumerate(re.findall(r"[A-Za-z][A-Za-z'-]*", sentence)):
                word = token.strip("'-").lower()
                is_name = token[0].isupper() and position > 0 and not names
                if (len(word) < 3 or word in _STOP or word in _MONTHS_DAYS or is_name
                        or "'" in word or word in seen):
                    continue
                seen.add(word)
                words.append(word)
        return words

    def analyze(self, content: str) -> NoteMeta:
        words = self._candidates(content) or ["note", "memory", "personal"]
        vectors = self.text.word_vectors(words)
        centroid = vectors.mean(axis=0)
        ranked = [words[i] for i in np.argsort(-(vectors @ centroid), kind="stable")]
        keywords = ranked[:6]
        while len(keywords) < 3:
            keywords.append(("memory", "personal", "note")[len(keywords)])
        if self._tag_vectors is None:
            self._tag_vectors = self.text.word_vectors(list(TAG_VOCABULARY))
        tag_scores = self._tag_vectors @ centroid
        tags = [TAG_VOCABULARY[i] for i in np.argsort(-tag_scores, kind="stable")[:3]]
        context = f"A personal note about {', '.join(tags[:2])}, mentioning {', '.join(keywords[:3])}."
        return NoteMeta(keywords=keywords, context=context, tags=tags)

    def query_keywords(self, question: str) -> str:
        """The question's content words, names kept, comma-separated (the question itself if none)."""
        words = self._candidates(question, names=True)
        return ", ".join(words) if words else question.strip()

    def evolve(self, draft: Draft, neighbours: Sequence[tuple[Note, float]]) -> Evolution:
        links = [note.id for note, score in neighbours if score >= self.link_threshold]
        return Evolution(should_evolve=bool(links), actions=["strengthen"] if links else [],
                         suggested_connections=links, tags_to_update=draft.tags)

    def answer(self, question: str, notes: Sequence[Note], temporal: bool = False,
               question_vector: np.ndarray | None = None) -> str:
        if not notes:
            return NO_MEMORY_ANSWER
        best_note, best_sentence, score = self.best_sentence(question, notes, question_vector)
        if score < self.abstain_below:
            return NOT_MENTIONED
        if temporal:
            return spoken_date(best_note.timestamp)
        return best_sentence

    def best_sentence(self, question: str, notes: Sequence[Note],
                      question_vector: np.ndarray | None = None) -> tuple[Note, str, float]:
        """The sentence of `notes` closest to the question, its note and its cosine (notes not empty)."""
        sentences = [(n, s.strip()) for n in notes for s in re.split(r"(?<=[.!?])\s+", n.content) if s.strip()]
        asked = self.text.encode_one(question) if question_vector is None else question_vector
        scores = self._sentence_vectors(sentences) @ asked
        best = int(np.argmax(scores))
        return sentences[best][0], sentences[best][1], float(scores[best])

    def _sentence_vectors(self, sentences: Sequence[tuple[Note, str]]) -> np.ndarray:
        """Embeddings of (note, sentence) pairs: cached ones under (owner, hash), the rest encoded at once."""
        keys = [(note.owner, hashlib.blake2b(text.encode(), digest_size=16).digest()) for note, text in sentences]
        with self._cache_lock:
            found = {key: self._sentences[key] for key in keys if key in self._sentences}
        missing = {key: text for key, (_, text) in zip(keys, sentences) if key not in found}
        if missing:
            found.update(zip(missing, self.text.encode(list(missing.values()))))
        with self._cache_lock:
            for key in keys:
                self._sentences[key] = found[key]
                self._sentences.move_to_end(key)
            while len(self._sentences) > self.cache_size:
                self._sentences.popitem(last=False)
        return np.stack([found[key] for key in keys])

    def drop_owner(self, owner: int) -> None:
        with self._cache_lock:
            for key in [key for key in self._sentences if key[0] == owner]:
                del self._sentences[key]

    def cached_owners(self) -> set[int]:
        """Owners with sentence embeddings in the cache."""
        with self._cache_lock:
            return {owner for owner, _ in self._sentences}


def spoken_date(iso: str) -> str:
    """An ISO 8601 time as the date a person says ("8 May 2023"); any other text as it is."""
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return f"{moment.day} {moment.strftime('%B')} {moment.year}"
