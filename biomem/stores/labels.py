"""When two names are one: the key a person's label is unique by, so that nobody enrols a name that looks like
someone else's ("Аna" or "Вen" with Cyrillic capitals beside "Ana" and "Ben", full-width "Ａｎａ", "ANA", "rnary"
beside "Mary").

The key is the label in NFKC and case folded, so that every case of a name is one name; then the Unicode TS #39
skeleton (ICU's SpoofChecker, with the confusables.txt of ICU's Unicode version: 16.0 in the pinned pyicu-wheels)
of its capitals, folded again, catches the capitals of other scripts that fold to letters of their own (В to в,
not b); the skeleton of that, folded, catches the small letters' look-alikes (а, and m as rn); runs of spaces are
one space, as a page shows them. This repeats until the key no longer changes. The price of case folding with the
skeleton's I → l: i, I, l and L are one letter in a key ("Ilse" and "Lise" are one name), as are 0 and o.
Both stores keep the key in the unique column identities.label_key; a person's households are told apart by it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

import icu

_SPOOF = icu.SpoofChecker()  # its skeletons are thread-safe (a const ICU call)
_PASSES = 8  # every single character is at its fixed point by the third
_MOVING = "\x1frekey:"  # a key no label has (labels hold no control character), held while keys are rewritten


def label_key(label: str) -> str:
    """The look-alike key of `label`: two labels with one key read as one name."""
    key = _folded(label)
    for _ in range(_PASSES):
        capitals = _folded(_skeleton(key.upper()))  # "Вen" is "BEN" in capitals: B, K, H of other scripts
        small = " ".join(_folded(_skeleton(capitals)).split())  # "rnary" is "mary": small letters' look-alikes
        if small == key:
            break
        key = small
    return key


def _folded(text: str) -> str:
    """`text` case folded, in NFKC before and after (folding can undo a composition)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def _skeleton(text: str) -> str:
    """The TS #39 skeleton of `text`, composed again (a skeleton is in NFD)."""
    return unicodedata.normalize("NFKC", _SPOOF.getSkeleton(0, unicodedata.normalize("NFKC", text)))


def taken(label: str) -> str:
    """Why `label` is refused: one sentence for the name itself and for a look-alike, naming no enrolled one."""
    return f"the name {label!r} is taken, or looks like one that is (in another script, width or case): choose another"


def unique_label_keys(labels: list[tuple[int, str]]) -> list[tuple[int, str, str]]:
    """(id, label, key) with keys unique, in the order given: a later look-alike becomes "label (2)", "label (3)"…"""
    seen: set[str] = set()
    rows = []
    for identity_id, label in labels:
        candidate, key, n = label, label_key(label), 1
        while key in seen:
            n += 1
            candidate = f"{label} ({n})"
            key = label_key(candidate)
        seen.add(key)
        rows.append((identity_id, candidate, key))
    return rows


def rekey_people(execute: Callable[..., Any], mark: str) -> None:
    """Give every person the label_key of label_key(), renaming each later enrolment of a look-alike name as
    unique_label_keys does (schema version 7 of both stores; `mark` is the driver's placeholder). Every key is
    moved aside first, so no key is held twice even between two updates."""
    people = [(int(i), label) for i, label in execute("SELECT id, label FROM identities WHERE kind = 'person' "
                                                        "ORDER BY id").fetchall()]
    execute(f"UPDATE identities SET label_key = {mark} || id WHERE kind = 'person'", [_MOVING])
    for identity_id, label, key in unique_label_keys(people):
        execute(f"UPDATE identities SET label = {mark}, label_key = {mark} WHERE id = {mark}",
                [label, key, identity_id])
