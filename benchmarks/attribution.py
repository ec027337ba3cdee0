"""Attribution benchmarks: Shapley estimation (the unified KernelSHAP family), ProxySPEX interactions, Contimask.

    .venv/bin/python -m benchmarks.attribution [--sections ...] [--quick] [--workdir runs/benchmarks/attribution]

Each family's sections live in their own module (``attribution_shapley.py``, ``attribution_proxyspex.py``,
``attribution_contimask.py``), which documents them, their targets and peers; this script composes them into one
report, ``docs/benchmarks/attribution.md``. Finished stages (per explained row, per LLM context) are cached under
``--workdir``, so a long run can be completed later: run it again.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as benchmarks/attribution.py: import this repository's benchmarks package (opacus installs
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # another top-level "benchmarks")
import trustlit
from benchmarks import attribution_contimask, attribution_proxyspex, attribution_shapley
from benchmarks.common import family_report, run_families

FAMILIES = (attribution_shapley, attribution_proxyspex, attribution_contimask)
REPORT = family_report(
    "Attribution benchmarks",
    "benchmarks/attribution.py",
    "docs/benchmarks/attribution.md",
    FAMILIES,
    f"trustlit {trustlit.__version__}",
)


# One thread by default: on the shared 2-core machine a 300 x 29 least-squares solve took 8 ms with 2 torch threads
# and 0.3 ms with 1 (OpenMP contention), which would swamp the per-explanation times of every estimator.
def main(argv: list[str] | None = None) -> None:
    run_families(
        REPORT,
        FAMILIES,
        argv,
        quick="a smoke run: few rows, seeds, games, budgets, masks and instances",
        workdir="runs/benchmarks/attribution",
        threads=1,
    )


if __name__ == "__main__":
    main()
