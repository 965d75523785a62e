"""What opening a BioMemory checks against its store before serving: the disclosure mode it may use, the text
model its notes were embedded with, and the default modality it records."""

from __future__ import annotations

import modalities

from ..errors import DisclosureError, InvalidInputError, StoreCorruptError
from ..identity.encoders import EncoderCache
from ..notes.textenc import TextEncoder
from ..stores import IdentityStore, StoreCore
from ..vocabulary import DISCLOSURES


def check_disclosure(store: IdentityStore, mode: str, force: bool) -> str:
    """`mode`, a known disclosure; DisclosureError for "demo" (labels and scores shown) over real enrolments
    unless `force`."""
    if mode not in DISCLOSURES:
        raise InvalidInputError(f"disclosure must be one of {DISCLOSURES}, got {mode!r}")
    real = [i for i in store.identities() if not i.sample]
    if mode == "demo" and real and not force:
        raise DisclosureError(f"disclosure 'demo' shows labels and scores, and this store holds "
                              f"{len(real)} real enrolment(s); use 'private', or force it")
    return mode


def check_text_model(store: StoreCore, text: TextEncoder) -> None:
    """Record the text model of a new store; StoreCorruptError when the store's notes have another dimension."""
    dim = store.get_meta("text_dim")
    if dim is None:
        store.set_meta("text_dim", str(text.dim))
        store.set_meta("text_model", text.name)
    elif int(dim) != text.dim:
        raise StoreCorruptError(f"{store.location} holds {dim}-d text embeddings from {store.get_meta('text_model')!r};"
                                f" {text.name!r} makes {text.dim}-d ones")


def default_modality(store: StoreCore, chosen: str | None, fallback: str, encoders: EncoderCache) -> str:
    """The modality a probe that names none is read as: `chosen` (the caller's), else the store's, else `fallback`.
    A new store records it when it is a registered (or given) encoder: a misspelt --encoder must not become the
    store's encoder for good, and an unregistered name (precomputed probes in the evaluation) is used for this
    session only."""
    stored = store.get_meta("default_modality")
    modality = chosen or stored or fallback
    if stored is None and (modality in encoders.encoders or modalities.known(modality)):
        store.set_meta("default_modality", modality)
    return modality
