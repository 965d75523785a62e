"""Registry of biometric encoders, in timm's manner.

    modalities.names()                      # every registered name: built-ins, entry-point plugins, register()ed
    modalities.available()                  # EncoderInfo of each
    modalities.info("face-dlib")            # metadata without loading weights
    modalities.availability("face-arcface") # Availability(name, ready, reason, source), nothing loaded
    modalities.availability_all()           # Availability of each, never raising: what a UI may offer
    modalities.create("face-dlib")          # an Encoder, weights loaded
    modalities.create("timm:hf-hub:org/repo")  # any timm model (modalities.timm_encoder), by its timm name

Third-party encoders join through the entry-point group `biomem.modalities` (the entry
point names an `Encoder` subclass, such as one `declare_timm(name, model, kind=...)` returns)
or by calling `register(EncoderClass)`. `timm:<model>` names are created on demand and not
listed by names(). An unknown name raises UnknownEncoderError, anything else registered as an
encoder PluginError (typed errors that are also a KeyError and a TypeError).

Availability is each class's `Encoder.availability()`: file look-ups and find_spec only, no
weights loaded and no torch, onnxruntime, dlib or huggingface_hub imported (10-30 ms here once
the encoder modules are imported; pinned files are hashed once per process). An encoder whose
weights come from the Hub and are not cached is ready only when HF_HUB_OFFLINE is unset and the
Hub answers a TCP connection (checked in at most 1 s, remembered 5 min), so an offline machine
hides it and a Space with internet offers it. A plugin that fails to import is reported not
ready with the error, not raised.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points
from typing import Any

from .base import TIMM_PREFIX, Availability, Encoder, EncoderInfo, l2_normalise
from .errors import PluginError, UnknownEncoderError, describe

ENTRY_POINT_GROUP = "biomem.modalities"

# Built-ins as "module:Class" so listing them imports no heavy dependency.
_BUILTINS: dict[str, str] = {
    "face-dlib": "modalities.face_dlib:DlibFaceEncoder",
    "face-arcface": "modalities.arcface:ArcFaceEncoder",
    "face-arcface-s": "modalities.arcface:ArcFaceSmallEncoder",
    "palm-ccnet": "modalities.ccnet:CCNetEncoder",
    "palm-compcode": "modalities.compcode:CompCodeEncoder",
    "voice-ge2e": "modalities.voice_ge2e:GE2EVoiceEncoder",
}
_registered: dict[str, type[Encoder]] = {}


def register(encoder_cls: type[Encoder]) -> type[Encoder]:
    """Add an Encoder subclass under `encoder_cls.info.name`; usable as a class decorator. The name is read
    without evaluating `info`, so a timm configuration's config is not read here."""
    if not (isinstance(encoder_cls, type) and issubclass(encoder_cls, Encoder)):
        raise PluginError("register() takes an Encoder subclass with an `info` attribute")
    _registered[inspect.getattr_static(encoder_cls, "info").name] = encoder_cls
    return encoder_cls


def _load(target: str) -> type[Encoder]:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _resolve(name: str) -> type[Encoder]:
    if name in _registered:
        return _registered[name]
    if name in _BUILTINS:
        return _load(_BUILTINS[name])
    if name.startswith(TIMM_PREFIX):
        return _load("modalities.timm_encoder:timm_class")(name)
    plugins = _plugins()
    if name in plugins:
        cls = plugins[name].load()
        if not (isinstance(cls, type) and issubclass(cls, Encoder)):
            raise PluginError(f"entry point {name!r} in {ENTRY_POINT_GROUP} is not an Encoder subclass")
        return cls
    raise UnknownEncoderError(f"unknown encoder {name!r}; available: {', '.join(names())}")


def __getattr__(attr: str) -> Any:
    """`declare_timm`, imported on first use: the timm module (and the face encoder it crops with) stays out of
    `import modalities`, as the built-ins do."""
    if attr == "declare_timm":
        return _load("modalities.timm_encoder:declare_timm")
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def names() -> list[str]:
    """Every encoder name the registry can create, sorted."""
    return sorted({*_BUILTINS, *_plugins(), *_registered})


def known(name: str) -> bool:
    """Whether `name` is an encoder to remember: a registered name, or a `timm:<model>` name whose weights are
    here or can be downloaded now (file look-ups, as availability()), so a misspelt one is not kept."""
    if name.startswith(TIMM_PREFIX):
        return _availability(name).ready
    return name in names()


def info(name: str) -> EncoderInfo:
    """Metadata of encoder `name` without loading its weights."""
    return _resolve(name).info


def available() -> list[EncoderInfo]:
    """Metadata of every known encoder."""
    return [info(n) for n in names()]


def availability(name: str) -> Availability:
    """Whether encoder `name` can be created here, without loading weights; a plugin that fails to
    import or to check is not ready, with the error as the reason. Unknown names raise UnknownEncoderError."""
    if not (name.startswith(TIMM_PREFIX) or name in names()):
        raise UnknownEncoderError(f"unknown encoder {name!r}; available: {', '.join(names())}")
    return _availability(name)


def availability_all() -> list[Availability]:
    """Availability of every known encoder, sorted by name; never raises."""
    return [_availability(n) for n in names()]


def _availability(name: str) -> Availability:
    try:
        return _resolve(name).availability()
    except Exception as exc:  # a plugin's import or check may raise anything
        return Availability(name, False, f"cannot load the encoder: {describe(exc)}")


def create(name: str, **kwargs: Any) -> Encoder:
    """Instantiate encoder `name` (this loads its weights)."""
    return _resolve(name)(**kwargs)


__all__ = [
    "ENTRY_POINT_GROUP",
    "Availability",
    "Encoder",
    "EncoderInfo",
    "availability",
    "availability_all",
    "available",
    "create",
    "declare_timm",
    "info",
    "known",
    "l2_normalise",
    "names",
    "register",
]
