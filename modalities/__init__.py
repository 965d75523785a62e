"""Registry of biometric encoders, in timm's manner.

    modalities.available()          # EncoderInfo of built-ins, entry-point plugins, register()ed
    modalities.info("face-dlib")    # metadata without loading weights
    modalities.create("face-dlib")  # an Encoder, weights loaded

Third-party encoders join through the entry-point group `biomem.modalities` (the entry
point names an `Encoder` subclass) or by calling `register(EncoderClass)`. An unknown name
raises UnknownEncoderError, anything else registered as an encoder PluginError (typed
errors that are also a KeyError and a TypeError).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from .base import Encoder, EncoderInfo, l2_normalise
from .errors import PluginError, UnknownEncoderError

ENTRY_POINT_GROUP = "biomem.modalities"

# Built-ins as "module:Class" so listing them imports no heavy dependency.
_BUILTINS: dict[str, str] = {
    "face-dlib": "modalities.face_dlib:DlibFaceEncoder",
    "face-arcface": "modalities.arcface:ArcFaceEncoder",
    "face-arcface-s": "modalities.arcface:ArcFaceSmallEncoder",
    "palm-ccnet": "modalities.ccnet:CCNetEncoder",
    "palm-compcode": "modalities.compcode:CompCodeEncoder",
}
_registered: dict[str, type[Encoder]] = {}


def register(encoder_cls: type[Encoder]) -> type[Encoder]:
    """Add an Encoder subclass under `encoder_cls.info.name`; usable as a class decorator."""
    if not (isinstance(encoder_cls, type) and issubclass(encoder_cls, Encoder)):
        raise PluginError("register() takes an Encoder subclass with an `info` attribute")
    _registered[encoder_cls.info.name] = encoder_cls
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
    plugins = _plugins()
    if name in plugins:
        cls = plugins[name].load()
        if not (isinstance(cls, type) and issubclass(cls, Encoder)):
            raise PluginError(f"entry point {name!r} in {ENTRY_POINT_GROUP} is not an Encoder subclass")
        return cls
    raise UnknownEncoderError(f"unknown encoder {name!r}; available: {', '.join(names())}")


def names() -> list[str]:
    """Every encoder name the registry can create, sorted."""
    return sorted({*_BUILTINS, *_plugins(), *_registered})


def info(name: str) -> EncoderInfo:
    """Metadata of encoder `name` without loading its weights."""
    return _resolve(name).info


def available() -> list[EncoderInfo]:
    """Metadata of every known encoder."""
    return [info(n) for n in names()]


def create(name: str, **kwargs: Any) -> Encoder:
    """Instantiate encoder `name` (this loads its weights)."""
    return _resolve(name)(**kwargs)


__all__ = [
    "ENTRY_POINT_GROUP",
    "Encoder",
    "EncoderInfo",
    "available",
    "create",
    "info",
    "l2_normalise",
    "names",
    "register",
]
