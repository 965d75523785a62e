"""Engine errors as toasts a person can act on: the app's own title, one line, never a traceback
or a server path (those go to the log). The titles and lines are biomem.engine.messages' (shared with the
REST API and MCP)."""

from __future__ import annotations

import functools
import html
import logging
from collections.abc import Callable
from typing import Any

import gradio as gr

from ..engine.messages import readable
from ..errors import BioMemError

log = logging.getLogger("biomem.ui")


def fail(message: str, title: str) -> gr.Error:
    """A toast in the UI (an AppError for API clients) that starts with the app's title (Gradio's
    toast heading only says "Error"); text only."""
    return gr.Error(html.escape(f"{title} — {message}", quote=False), title=html.escape(title, quote=False),
                    print_exception=False)


class Hint(gr.Error):
    """A field left empty or unticked: nothing went wrong, so the page shows a "Warning" toast, not an
    "Error" one; the event still stops, and an API client still gets an AppError."""


def hint(message: str, title: str) -> Hint:
    """A Hint that starts with its title, like fail()'s errors; its own error is invisible (friendly()
    shows it as a warning)."""
    return Hint(html.escape(f"{title} — {message}", quote=False), title=html.escape(title, quote=False),
                visible=False, print_exception=False)


def friendly(fn: Callable) -> Callable:
    """`fn` with engine errors turned into readable toasts (hints into warnings); anything unexpected is
    logged whole."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Hint as exc:
            gr.Warning(exc.message, title=exc.title)
            raise
        except gr.Error:
            raise
        except BioMemError as exc:
            title, message = readable(exc)
            raise fail(message, title) from None
        except Exception as exc:  # noqa: BLE001 - a visitor sees one line, the log gets the traceback
            log.exception("unexpected error in %s", getattr(fn, "__name__", fn))
            title, message = readable(exc)
            raise fail(message, title) from None
    return wrapper
