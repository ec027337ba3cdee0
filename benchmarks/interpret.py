"""Interpretability benchmarks: sparse autoencoders, intrinsic dimension per layer, hallucination tracing, concept
surrogates of an embedding model (EXPLAIN-R against SpLiCE).

    .venv/bin/python benchmarks/interpret.py [--sections ...] [--quick] [--workdir runs/benchmarks/interpret]

Each family's sections live in their own module (``interpret_sae.py``, ``interpret_id.py``,
``interpret_tracing.py``, ``interpret_concepts.py``), which documents them, its targets and its peers; this script
composes them into one report, ``docs/benchmarks/interpret.md``. Finished stages (harvests, trained models, runs)
are cached under ``--workdir``, so a long run can be completed later: run it again.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as benchmarks/interpret.py: import this repository's benchmarks package (opacus installs
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # another top-level "benchmarks")
import trustlit
from benchmarks import interpret_concepts, interpret_id, interpret_sae, interpret_tracing
from benchmarks.common import family_report, run_families

FAMILIES = (interpret_sae, interpret_id, interpret_tracing, interpret_concepts)
REPORT = family_report(
    "Interpretability benchmarks",
    "benchmarks/interpret.py",
    "docs/benchmarks/interpret.md",
    FAMILIES,
    f"trustlit {trustlit.__version__}",
)


def main(argv: list[str] | None = None) -> None:
    run_families(
        REPORT,
        FAMILIES,
        argv,
        quick="a smoke run: few steps, few points, few prompts",
        workdir="runs/benchmarks/interpret",
        threads=2,
    )


if __name__ == "__main__":
    main()
