"""The page's fields as the handlers take them: text stripped (anything no text box sends refused), and a probe
as the visitor showed it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from ..identity.gate import Probe
from . import uploads
from .messages import fail

log = logging.getLogger("biomem.ui")
Progress = Callable[..., Any]  # Gradio's progress callback, or `silent`
# a value no control of the page sends (a hand-made call to the page's API): what to do, never an exception's name
FORGED = ("Request not understood", "This request did not come from the page as it is: reload the page and try again.")


def typed_text(value: Any, what: str, *held: Any) -> str:
    """A text box's value, stripped; anything a text box never sends (a number, a list, an object) is refused with
    FORGED, its uploads `held` deleted, and logged by its type only (the value may be a note)."""
    if value is None or isinstance(value, str):
        return (value or "").strip()
    uploads.discard(*held)
    log.warning("a page event's %s was a %s, which no text box sends: refused", what, type(value).__name__)
    raise fail(FORGED[1], FORGED[0])


class Shown(NamedTuple):
    """A probe the visitor showed, the attempt-limit keys it counts against (None: a sample capture this page
    handed out) and the sample person it was a capture of."""

    probe: Probe | dict[str, Probe]  # {modality: Probe} for an image and a recording together
    client: list[str] | None
    sample: str | None = None


def silent(*args: Any, **kwargs: Any) -> None:
    """A progress callback that shows nothing (callers outside Gradio)."""
