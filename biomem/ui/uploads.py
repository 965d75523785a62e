"""Probe files in Gradio's upload cache: read once, deleted at once, never kept.

A probe event takes the raw upload (preprocess=False), so a file Gradio would refuse to decode
is still deleted; only files inside the upload folder are ever read or deleted, whatever path
a crafted payload names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradio.utils import get_upload_folder

from .messages import fail, hint


def upload_path(value: Any) -> str | None:
    """The cache path of an upload: a raw FileData payload, a path string, or None (also for anything else,
    such as a webcam burst's frames, which are never a file)."""
    if isinstance(value, dict):
        value = value.get("path")
    return str(value) if value and isinstance(value, (str, Path)) else None


def in_cache(path: str | Path) -> Path | None:
    """The resolved file if it lies inside Gradio's upload folder, else None."""
    cache = Path(get_upload_folder()).resolve()
    file = Path(path).resolve()
    return file if cache in file.parents else None


def discard(*values: Any) -> None:
    """Delete every upload among `values` (payloads, paths, or lists of them) that lies in the cache."""
    cache = Path(get_upload_folder()).resolve()
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            path = upload_path(item)
            file = in_cache(path) if path else None
            if file is None:
                continue
            file.unlink(missing_ok=True)
            if file.parent != cache:
                try:
                    file.parent.rmdir()  # Gradio keeps each upload in its own folder
                except OSError:
                    pass


def track(value: Any, pending: list[str] | None) -> list[str]:
    """An input changed: delete the files it held before that were never used; return what it holds."""
    current = [p for p in (upload_path(v) for v in (value if isinstance(value, list) else [value])) if p]
    discard([path for path in pending or [] if path not in current])
    return current


def discard_pending(pending: list[str] | None) -> None:
    """The session ended (tab closed, or idle): delete the files its inputs still held."""
    discard(pending or [])


def read_once(value: Any, what: str = "probe") -> bytes:
    """The bytes of an upload (an image, or a recording when `what` says so); the file is gone when this returns,
    whatever happens."""
    path = upload_path(value)
    if not path:
        raise hint(f"Give a {what} first: upload a photo, use the webcam, or pick a sample person.", "No probe")
    kind = "recording" if what == "recording" else "image"
    try:
        file = in_cache(path)
        if file is None:
            raise fail(f"The probe must be an uploaded {kind}.", "Not an upload")
        return file.read_bytes()
    except OSError:
        raise fail(f"The probe {kind} is no longer available: capture or upload it again.", "Probe expired") from None
    finally:
        discard(path)
