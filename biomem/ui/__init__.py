"""The web demo: a Gradio page over one BioMemory, with no memory, identity or file policy of its own.

    controller.py  UI events -> engine calls (reads and deletes probe uploads, checks fields filled in)
    homes.py       the households panel's handlers (the controller's `homes`)
    tuning.py      the Calibrate tab's handlers: encoders and τ (the controller's `calibration`)
    fields.py      the page's field values as handlers take them: text stripped, a probe as shown
    render.py      engine results -> HTML, chat messages, table rows (pure functions)
    layout.py      the gr.Blocks page, top to bottom: the header, then the tabs in order
    tabs/          one module per tab or panel: compare, chat, enrol (and households), notes, calibrate, operator
    widgets.py     probe boxes, webcam bursts, and `action`: a button wired to the controller through its door
    messages.py    engine errors -> toasts with the app's titles
    uploads.py     probe files in Gradio's cache: read once, deleted at once
    voices.py      recordings beside the probes: the voice encoder's name and the enrolment's speech meter
    style.py       CSS, theme, introduction and glosses
    launch.py      launch(), served() for tests, main() for `python app.py`
"""

from __future__ import annotations

import os

# Before gradio or huggingface_hub is imported: both read these at import time.
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("GRADIO_RUN_HISTORY", "False")  # launch() passes run_history=False too

from .controller import Controller  # noqa: E402
from .launch import launch, main, served  # noqa: E402
from .layout import build_app  # noqa: E402

__all__ = ["Controller", "build_app", "launch", "main", "served"]
