"""What every benchmark records about the machine it ran on: numbers move with the CPU, its load
and the library versions, so each results JSON carries them."""

from __future__ import annotations

import contextlib
import os
import platform
import sqlite3
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np


def pkg_version(name: str) -> str | None:
    """The installed version of distribution `name`, or None."""
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _proc_field(path: str, key: str) -> str | None:
    with contextlib.suppress(OSError), open(path) as lines:
        for line in lines:
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    return None


def machine_info(*packages: str) -> dict[str, Any]:
    """CPU, cores, memory, 1-minute load, Python, numpy, BLAS threads, and the versions of `packages`."""
    mem_kb = _proc_field("/proc/meminfo", "MemTotal")
    blas = None
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_info
        blas = [{k: i.get(k) for k in ("internal_api", "version", "num_threads")} for i in threadpool_info()]
    return {
        "cpu": _proc_field("/proc/cpuinfo", "model name") or "", "cores": os.cpu_count(),
        "affinity_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gb": round(int(mem_kb.split()[0]) / 1024 ** 2, 1) if mem_kb else None,
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
        "blas": blas, **{name: pkg_version(name) for name in packages},
    }


def search_machine_info() -> dict[str, Any]:
    """The machine, plus what moves the search benchmarks' numbers (retrieval, peers): SQLite, torch and its
    threads."""
    import torch

    return {**machine_info("hnswlib", "sentence-transformers", "sqlite-utils"), "sqlite": sqlite3.sqlite_version,
            "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
