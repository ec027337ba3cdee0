"""Attribution benchmarks: Shapley estimation (the unified KernelSHAP family), ProxySPEX interactions, Contimask.

    .venv/bin/python -m benchmarks.attribution [--sections ...] [--quick] [--workdir runs/benchmarks/attribution]

Each family's sections live in their own module (``attribution_shapley.py``, ``attribution_proxyspex.py``,
``attribution_contimask.py``), which documents them, their targets and peers; this script composes them into one
report, ``docs/benchmarks/attribution.md``. Finished stages (per explained row, per LLM context) are cached under
``--workdir``, so a long run can be completed later: run it again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if not __package__:  # run as benchmarks/attribution.py: import this repository's benchmarks package (opacus installs
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # another top-level "benchmarks")
import trustlit
from benchmarks import attribution_contimask, attribution_proxyspex, attribution_shapley
from benchmarks.common import Report, quiet

FAMILIES = (attribution_shapley, attribution_proxyspex, attribution_contimask)
REPORT = Report(
    "Attribution benchmarks",
    "benchmarks/attribution.py",
    "docs/benchmarks/attribution.md",
    {name: section for family in FAMILIES for name, section in family.SECTIONS.items()},
    f"trustlit {trustlit.__version__}",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = REPORT.parser(__doc__.splitlines()[0], "a smoke run: few rows, seeds, games, budgets, masks and instances")
    parser.add_argument("--threads", type=int, default=1, help="torch and BLAS threads (default 1)")
    parser.add_argument("--workdir", type=Path, default=Path("runs/benchmarks/attribution"), help="cached stages")
    for family in FAMILIES:
        family.add_arguments(parser)
    return REPORT.parse(parser, argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    quiet()
    import torch
    from threadpoolctl import threadpool_limits

    # One thread by default: on the shared 2-core machine a 300 x 29 least-squares solve took 8 ms with 2 torch threads
    # and 0.3 ms with 1 (OpenMP contention), which would swamp the per-explanation times of every estimator.
    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):
        REPORT.run(args)


if __name__ == "__main__":
    main()
