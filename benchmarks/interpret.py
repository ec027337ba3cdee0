"""Interpretability benchmarks: sparse autoencoders, intrinsic dimension per layer, hallucination tracing.

    .venv/bin/python benchmarks/interpret.py [--sections ...] [--quick] [--workdir runs/benchmarks/interpret]

Each family's sections live in their own module (``interpret_sae.py``, ``interpret_id.py``,
``interpret_tracing.py``), which documents them, its targets and its peers; this script composes them
into one report, ``docs/benchmarks/interpret.md``. Finished stages (harvests, trained models, runs)
are cached under ``--workdir``, so a long run can be completed later: run it again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if not __package__:  # run as benchmarks/interpret.py: import this repository's benchmarks package (opacus installs
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # another top-level "benchmarks")
import trustlit
from benchmarks import interpret_id, interpret_sae, interpret_tracing
from benchmarks.common import Report, quiet

FAMILIES = (interpret_sae, interpret_id, interpret_tracing)
REPORT = Report(
    "Interpretability benchmarks",
    "benchmarks/interpret.py",
    "docs/benchmarks/interpret.md",
    {name: section for family in FAMILIES for name, section in family.SECTIONS.items()},
    f"trustlit {trustlit.__version__}",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = REPORT.parser(__doc__.splitlines()[0], "a smoke run: few steps, few points, few prompts")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--workdir", type=Path, default=Path("runs/benchmarks/interpret"), help="cached stages")
    for family in FAMILIES:
        family.add_arguments(parser)
    return REPORT.parse(parser, argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    quiet()
    import torch

    torch.set_num_threads(args.threads)
    REPORT.run(args)


if __name__ == "__main__":
    main()
