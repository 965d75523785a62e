"""Answer and retrieval metrics of the LoCoMo protocol.

A-Mem's token F1 and BLEU-1 (the paper's columns) are reproduced from A-Mem's
`utils.calculate_metrics`: an empty prediction or reference scores 0, other values go
through str(); F1 is over *sets* of tokens made by lower-casing and turning `.,!?` into
spaces; BLEU-1 is nltk's sentence_bleu over nltk word tokens with weights (1, 0, 0, 0) and
SmoothingFunction().method1. The official LoCoMo F1 (snap-research/locomo,
task_eval/evaluation.py) is given beside them: normalised, Porter-stemmed, Counter
overlap; multi-hop answers are split at commas and scored per gold part.
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import nltk
import numpy as np
from nltk.stem import PorterStemmer
from nltk.tokenize import NLTKWordTokenizer
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

MULTI_HOP, TEMPORAL, OPEN_DOMAIN, SINGLE_HOP, ADVERSARIAL = 1, 2, 3, 4, 5
CATEGORY_NAMES = {MULTI_HOP: "Multi-Hop", TEMPORAL: "Temporal", SINGLE_HOP: "Single-Hop"}  # the paper's three
ALL_CATEGORY_NAMES = {MULTI_HOP: "Multi-Hop", TEMPORAL: "Temporal", OPEN_DOMAIN: "Open-Domain",
                      SINGLE_HOP: "Single-Hop", ADVERSARIAL: "Adversarial"}

_SMOOTHING = SmoothingFunction().method1
_STEMMER = PorterStemmer()
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


@functools.cache
def word_tokenizer() -> tuple[str, Callable[[str], list[str]]]:
    """nltk.word_tokenize when punkt's data is installed, else the Treebank tokenizer it applies.

    word_tokenize splits sentences with punkt, then runs NLTKWordTokenizer on each one; the
    two differ only on a period inside a multi-sentence answer ("home. then" keeps "home.").
    """
    try:
        nltk.word_tokenize("probe. text")
    except LookupError:
        return "nltk NLTKWordTokenizer (punkt data missing)", NLTKWordTokenizer().tokenize
    return "nltk.word_tokenize", nltk.word_tokenize


def amem_tokens(text: Any) -> list[str]:
    """A-Mem's simple_tokenize: lower-case, `.,!?` become spaces, split on whitespace."""
    lowered = str(text).lower()
    for mark in ".,!?":
        lowered = lowered.replace(mark, " ")
    return lowered.split()


def amem_f1(prediction: Any, reference: Any) -> float:
    """A-Mem's token F1 over unique tokens; 0 for an empty prediction or reference."""
    if not prediction or not reference:
        return 0.0
    predicted = set(amem_tokens(str(prediction).strip()))
    gold = set(amem_tokens(str(reference).strip()))
    common = len(predicted & gold)
    if not predicted or not gold or common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def amem_bleu1(prediction: Any, reference: Any) -> float:
    """A-Mem's BLEU-1: sentence_bleu of nltk word tokens, weights (1,0,0,0), smoothing method1."""
    if not prediction or not reference:
        return 0.0
    tokenize = word_tokenizer()[1]
    predicted = tokenize(str(prediction).strip().lower())
    gold = tokenize(str(reference).strip().lower())
    if not predicted or not gold:
        return 0.0
    return float(sentence_bleu([gold], predicted, weights=(1, 0, 0, 0), smoothing_function=_SMOOTHING))


def normalize_answer(text: str) -> str:
    """LoCoMo's normalize_answer: drop commas, lower, strip punctuation, drop a/an/the/and."""
    text = text.replace(",", "").lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def locomo_f1_single(prediction: str, reference: str) -> float:
    """LoCoMo's f1_score: Porter-stemmed tokens, Counter overlap."""
    predicted = [_STEMMER.stem(w) for w in normalize_answer(prediction).split()]
    gold = [_STEMMER.stem(w) for w in normalize_answer(reference).split()]
    same = sum((Counter(predicted) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def locomo_f1(prediction: Any, reference: Any, category: int) -> float:
    """Official LoCoMo F1; multi-hop: mean over comma-separated gold parts of the best part of the prediction;
    adversarial: 1 when the prediction says the thing is not mentioned (or no information is available)."""
    prediction, reference = str(prediction), str(reference)
    if category == ADVERSARIAL:
        said = prediction.lower()
        return float("not mentioned" in said or "no information available" in said)
    if category != MULTI_HOP:
        return locomo_f1_single(prediction, reference)
    predictions = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in reference.split(",")]
    return float(np.mean([max(locomo_f1_single(p, g) for p in predictions) for g in golds]))


def evidence_recall(evidence: Sequence[Hashable], retrieved: Iterable[Hashable]) -> float | None:
    """Share of a question's evidence turns among the retrieved ones; None without evidence.

    Turns must be named with their conversation, e.g. ("conv-26", "D1:3"): every conversation has a D1:3.
    """
    if not evidence:
        return None
    found = set(retrieved)
    return sum(e in found for e in evidence) / len(evidence)


def percent(values: Iterable[float | None]) -> float | None:
    """Mean of the values that are not None, as a percentage (None when there are none)."""
    kept = [v for v in values if v is not None]
    return float(np.mean(kept) * 100) if kept else None
