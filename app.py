"""Bio-Memory's web demo: one agent, several people, each with their own memories.

    python app.py        # http://localhost:7860; configured from the environment (README, "Configuration")

The same question asked by two people gets two different memory contexts, and a stranger gets
none. The page lives in `biomem.ui`; every decision (who matched, which notes may be read, what
is stored or erased) is the engine's. This file is the entry point a Hugging Face Space runs.
"""

from biomem.ui import build_app, launch, main, served

__all__ = ["build_app", "launch", "main", "served"]

if __name__ == "__main__":
    main()
