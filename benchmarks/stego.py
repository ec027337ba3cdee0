"""Steganography benchmarks: StegoZip payload compression before arithmetic-coding LLM steganography.

    .venv/bin/python -m benchmarks.stego [--sections ...] [--quick] [--workdir runs/benchmarks/stego]

Each family's sections live in their own module (``stego_stegozip.py``), which documents them, their targets and
peers; this script composes them into one report, ``docs/benchmarks/stego.md``. Finished stages (the restorer, each
message) are cached under ``--workdir``, so a long run can be completed later: run it again.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as benchmarks/stego.py: import this repository's benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import trustlit
from benchmarks import stego_stegozip
from benchmarks.common import family_report, run_families

FAMILIES = (stego_stegozip,)
REPORT = family_report(
    "Steganography benchmarks",
    "benchmarks/stego.py",
    "docs/benchmarks/stego.md",
    FAMILIES,
    f"trustlit {trustlit.__version__}",
)


# One thread: the machine's 2 cores are shared, and SmolLM2 runs one token at a time on both sides of the stego
# channel (the coders need bit-identical distributions, so nothing is batched).
def main(argv: list[str] | None = None) -> None:
    run_families(
        REPORT,
        FAMILIES,
        argv,
        quick="a smoke run: tiny LMs from config, 2 messages, a 4-step restorer",
        workdir="runs/benchmarks/stego",
        threads=1,
    )


if __name__ == "__main__":
    main()
