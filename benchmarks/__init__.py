"""The benchmarks of Bio-Memory, one module a benchmark, each run from the checkout's root as a module:

    python -m benchmarks.retrieval --quick
    python -m benchmarks.gate --help

`common` holds what they share (the checkout, the results folder, the log line, latency percentiles, writing a
result JSON), `machine` what every result records about the machine, `corpus` the synthetic people and notes of
the search benchmarks and `pg_server` the embedded PostgreSQL server and bulk load they use; no benchmark imports
another.

Every benchmark runs offline: the Hugging Face hub and gradio are told so here, before any of them is imported
(huggingface_hub reads its settings at import), unless the caller's environment says otherwise.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
