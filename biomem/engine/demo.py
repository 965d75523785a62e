"""A small demo store: three people from the sample faces, everyday memories, a household, three askers.

`biomem demo` (and the app's "load demo") enrol Ana, Ben and Chloe from two captures each
(faces, and synthetic palms when a palm encoder is given), give them look-alike memories and
one household that shares a Wi-Fi password among all three and a surprise party with everyone
but Chloe, then ask the same question as each of them and as a stranger: each gets only their
own memories and their household's, the stranger none. The page hands anyone a capture of them (the
sample buttons), so they are sample identities: any probe reads as them, none changes them
(biomem.engine.access.check_writer), and no requester enrols a sample face (biomem.identity.enrolment).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from pathlib import Path

import numpy as np

import modalities

from ..errors import BioMemError, InvalidInputError, MultipleFacesError, NoFaceError
from ..identity.samples import DEMO_PALM_SEEDS, SAMPLE_PEOPLE, STRANGER, demo_capture, demo_palm
from ..stores.records import Group
from .memory import BioMemory

log = logging.getLogger(__name__)

DEMO_PEOPLE: dict[str, list[tuple[str, str]]] = {
    "Ana": [
        ("My PIN for the bank card is 4821", "2024-03-02T09:15:00"),
        ("I am allergic to peanuts", "2024-03-05T12:30:00"),
        ("My daughter Lea starts piano lessons on Tuesdays", "2024-03-09T18:00:00"),
        ("I parked the car on level 3 of the station garage", "2024-03-12T08:05:00"),
    ],
    "Ben": [
        ("My PIN for the bank card is 7390", "2024-03-03T10:00:00"),
        ("I am training for the Berlin marathon in September", "2024-03-06T07:00:00"),
        ("My doctor's appointment is on Friday at 4 pm", "2024-03-10T14:20:00"),
        ("I promised to bring the salad to Sunday's barbecue", "2024-03-13T19:45:00"),
    ],
    "Chloe": [
        ("My PIN for the bank card is 1156", "2024-03-04T11:11:00"),
        ("My cat Miso needs her vaccine next month", "2024-03-07T16:40:00"),
        ("I am learning Japanese with an app every morning", "2024-03-11T06:50:00"),
    ],
}
# The demo household: its name, then its shared notes as (text, timestamp, author, hidden from).
DEMO_HOUSEHOLD = "Home"
DEMO_SHARED: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("The Wi-Fi password is tulip-river-42", "2024-03-01T20:00:00", "Ana", ()),
    ("Chloe's surprise party is on Saturday", "2024-03-08T21:30:00", "Ben", ("Chloe",)),
]


def usable_capture(encoder: modalities.Encoder, person: int, seeds: Iterable[int]) -> np.ndarray:
    """The first capture among `seeds` in which `encoder` finds exactly one face: the augmentations
    tilt, scale and blur, and a detector misses a few of them, as it would a badly framed shot."""
    for seed in seeds:
        image = demo_capture(person, seed)
        try:
            encoder.encode(image)
        except (NoFaceError, MultipleFacesError):
            continue
        return image
    raise NoFaceError(f"{encoder.name} found no single face in the captures tried of sample person {person}")


def sample_capture(mem: BioMemory, person: str, modality: str | None = None) -> np.ndarray:
    """A fresh capture of sample person `person`: a face photo or a palm ROI, by the kind of
    `modality` (default the store's); never one of the demo's two enrolment captures."""
    if person not in SAMPLE_PEOPLE:
        raise InvalidInputError(f"no sample person {person!r}")
    face, palm = SAMPLE_PEOPLE[person]
    encoder = mem.encoder(modality)
    # Seeds from a wide range: Gradio's cache names a file by its content, so two visitors handed the same
    # capture would share one file, and the first to use it would delete it from under the other.
    seeds = [secrets.randbelow(2**31) + 2 for _ in range(8)]
    if encoder.info.kind == "palm":
        return demo_palm(palm, seeds[0])
    if face is None:
        raise InvalidInputError(f"{person} has a sample palm but no sample face: choose a palm encoder")
    return usable_capture(encoder, face, seeds)


def loadable(mem: BioMemory, modality: str) -> bool:
    """Whether `modality`'s encoder loads here (the demo's palms are optional)."""
    try:
        mem.encoder(modality)
    except (KeyError, ImportError, OSError, BioMemError) as exc:
        log.info("%s unavailable: %s", modality, exc)
        return False
    return True


def demo_people(mem: BioMemory) -> dict[str, int]:
    """The demo people enrolled in `mem` (sample identities with a demo person's name): label -> id."""
    return {i.label: i.id for i in mem.identities() if i.sample and i.label in DEMO_PEOPLE}


def demo_household(mem: BioMemory, ids: dict[str, int] | None = None) -> Group | None:
    """The demo household: a group named DEMO_HOUSEHOLD that a demo person belongs to, or None."""
    for person in (demo_people(mem) if ids is None else ids).values():
        for group in mem.groups(identity=person):
            if group.label == DEMO_HOUSEHOLD:
                return group
    return None


def demo_loaded(mem: BioMemory) -> bool:
    """Whether the demo people and their household are in `mem`."""
    ids = demo_people(mem)
    return set(DEMO_PEOPLE) <= set(ids) and demo_household(mem, ids) is not None


def build_household(mem: BioMemory, ids: dict[str, int]) -> Group:
    """The demo household of the demo people `ids` (label -> id) with its shared notes, made once: when
    one exists it is returned untouched (a demo person forgotten and enrolled again stays outside it, and
    a note hidden from them can never reach their new identity)."""
    found = demo_household(mem, ids)
    if found is not None:
        return found
    people = list(DEMO_PEOPLE)
    home = mem.create_group(DEMO_HOUSEHOLD, identity=ids[people[0]])
    for label in people[1:]:
        mem.add_member(home.id, identity=ids[label])
    for text, when, author, hidden in DEMO_SHARED:
        mem.add(text, identity=ids[author], scope=home.id, hidden_from=[ids[h] for h in hidden], timestamp=when)
    return mem.store.group(home.id)


def build_demo(mem: BioMemory, palm_encoder: str | None = None, *, household: bool = False,
               sample: bool = True) -> dict[str, int]:
    """Enrol the demo people not yet enrolled (faces, plus synthetic palms through `palm_encoder` when
    given) with their memories, and with `household` their household when there is none (the page's
    and `biomem demo`'s store; tests of one person's isolation leave it out); returns label -> identity id.
    They are sample people, read-only to probes since the page hands out their captures; `sample=False`
    enrols ordinary people under their names instead, whose own probes may change their memories (a store
    whose requesters' writes are under test)."""
    ids = demo_people(mem)
    for person, (label, memories) in enumerate(DEMO_PEOPLE.items()):
        if label in ids:
            continue
        identity = mem.enroll(label, [demo_capture(person, 0), demo_capture(person, 1)], sample=sample)
        if palm_encoder:
            seed = DEMO_PALM_SEEDS[label]
            mem.add_templates(identity.id, [demo_palm(seed, 0), demo_palm(seed, 1)], palm_encoder)
        mem.add_many([text for text, _ in memories], identity=identity.id,
                     timestamps=[when for _, when in memories])
        ids[label] = identity.id
    if household:
        build_household(mem, ids)
    return {label: ids[label] for label in DEMO_PEOPLE}


def run_demo(path: str | Path, question: str = "What is my bank card PIN?") -> None:
    """Build the demo store at `path` (if empty) and print what each asker gets."""
    with BioMemory(path) as mem:
        if not mem.identities() or set(demo_people(mem)) == set(DEMO_PEOPLE):
            build_demo(mem, household=True)  # a new store, or the demo's without its household yet: built once
        people = [*enumerate(DEMO_PEOPLE), (STRANGER, "a stranger")]
        askers = [(label, usable_capture(mem.encoder(), person, range(5, 40))) for person, label in people]
        print(f"store: {path} | question: {question!r}\n")
        for who, probe in askers:
            answer = mem.ask(question, probe=probe, k=3)
            matched = answer.gate.labels.get(answer.gate.identity, "nobody")
            best = max(answer.gate.scores.values(), default=float("nan"))
            print(f"{who:>10} -> gate: {matched} (best cos {best:.3f}, tau {answer.gate.threshold:.3f}); "
                  f"{len(answer.notes)} note(s) in, {answer.gated_out} gated out")
            print(f"{'':>13}answer: {answer.text}")
