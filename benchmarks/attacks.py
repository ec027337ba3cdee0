"""Attack benchmarks: instance-targeted poisoning (ERM vs the randomized learner with the optimal agnostic rate),
BridgePure's purification of protected images, and the DEGauss defense of 3D Gaussian scenes against editing.

    .venv/bin/python -m benchmarks.attacks [--sections ...] [--quick] [--workdir runs/benchmarks/attacks]

Each part's sections live in their own module (``attacks_poisoning.py``, ``attacks_purification.py``,
``attacks_degauss.py``), which documents them, their targets and peers; this script composes them into one report,
``docs/benchmarks/attacks.md``. Finished stages (trained purifiers and editors, per-seed results) are cached under
``--workdir``, so a long run can be completed later: run it again.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as benchmarks/attacks.py: import this repository's benchmarks package (opacus installs
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # another top-level "benchmarks")
import trustlit
from benchmarks import attacks_degauss, attacks_poisoning, attacks_purification
from benchmarks.common import family_report, run_families

FAMILIES = (attacks_poisoning, attacks_purification, attacks_degauss)
REPORT = family_report(
    "Attack benchmarks",
    "benchmarks/attacks.py",
    "docs/benchmarks/attacks.md",
    FAMILIES,
    f"trustlit {trustlit.__version__}",
)


def main(argv: list[str] | None = None) -> None:
    run_families(
        REPORT,
        FAMILIES,
        argv,
        quick="a smoke run: few targets, seeds, images, training steps and views",
        workdir="runs/benchmarks/attacks",
        threads=1,
    )


if __name__ == "__main__":
    main()
