"""What the benchmarks share: where the checkout, its results and LoCoMo are, the progress line, latency
percentiles, this process's memory, the command that ran, and writing a result JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent  # the checkout
RESULTS = ROOT / "benchmarks" / "results"  # the result JSON the docs quote
LOCOMO = Path(os.environ.get("LOCOMO_JSON", ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"))


def log(message: str) -> None:
    """A progress line on stderr, stamped with the time (stdout keeps the tables)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """Latencies in ms as every result JSON summarises them: p50_ms, p95_ms, mean_ms, min_ms, max_ms and n."""
    a = np.asarray(samples_ms, dtype=np.float64)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "mean_ms": float(a.mean()), "min_ms": float(a.min()), "max_ms": float(a.max()), "n": int(a.size)}


def status_mb(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM), MB; NaN where there is none."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    """Resident set size of this process now, MB."""
    return status_mb("VmRSS")


def peak_rss_mb() -> float:
    """The largest resident set size this process has had, MB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dir_mb(path: Path) -> float:
    """Size of a file, or of every file under a folder, MB (0 when there is nothing)."""
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6 if path.exists() else 0.0


def command(module: str, argv: Sequence[str] | None = None) -> str:
    """The command line of benchmark `module` (e.g. "gate") run with `argv` (None: this process's arguments), as a
    result JSON records it."""
    return " ".join(["python", "-m", f"benchmarks.{module}", *(sys.argv[1:] if argv is None else argv)])


def shown(path: Path | str) -> str:
    """A path as a result JSON records it: relative to the checkout when inside it, else as it is."""
    path = Path(path)
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def arguments(args: argparse.Namespace) -> dict[str, Any]:
    """A run's arguments as a result JSON records them, paths as `shown` gives them."""
    return {name: shown(value) if isinstance(value, Path) else value for name, value in vars(args).items()}


def write_result(path: Path | str, results: Any, *, indent: int = 2, default: Any = None) -> Path:
    """Write a result JSON to `path` (its folder made if need be), whole or not at all: into a temporary file
    beside it, renamed over it once written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=indent, default=default) + "\n")
    tmp.replace(path)
    return path
