"""Start-up time of the ``trustlit`` command, beside ``python -c "import lightning"``.

    python -m benchmarks.startup [--repeats 5]

Each command runs ``--repeats`` times in a fresh interpreter (the first run of each is a warm-up,
not counted, so the file cache is equally warm for all); the report quotes the median and its ratio
to the median of ``import lightning`` measured in the same run. Targets (issue: foundation for
growth): ``--help`` and ``recipes`` at most 0.3x, ``slurm submit --dry-run`` at most 1.2x.
Writes ``docs/benchmarks/startup.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as benchmarks/startup.py: import this repository's benchmarks package (opacus installs
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # another top-level "benchmarks")
from benchmarks.common import provenance

REPO_ROOT = Path(__file__).resolve().parents[1]
REPORT = REPO_ROOT / "docs" / "benchmarks" / "startup.md"
RECIPE = "quickstart/finetune_fictitious"
TRUSTLIT = [sys.executable, "-m", "trustlit.cli"]
COMMANDS = {
    'python -c "import lightning"': ([sys.executable, "-c", "import lightning"], None),
    'python -c "import trustlit"': ([sys.executable, "-c", "import trustlit"], None),
    "trustlit --help": ([*TRUSTLIT, "--help"], 0.3),
    "trustlit recipes": ([*TRUSTLIT, "recipes"], 0.3),
    f"trustlit slurm submit {RECIPE} --dry-run": ([*TRUSTLIT, "slurm", "submit", RECIPE, "--dry-run"], 1.2),
}
BASELINE = 'python -c "import lightning"'


def seconds(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, cwd=REPO_ROOT)
    return time.perf_counter() - began


def measure(repeats: int) -> dict[str, list[float]]:
    """Every command ``repeats`` times, interleaved (one round runs each once), after one warm-up round."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for round_index in range(repeats + 1):
        for name, (command, _) in COMMANDS.items():
            elapsed = seconds(command)
            if round_index:
                times[name].append(elapsed)
    return times


def render(times: dict[str, list[float]], command: str, load_before: float) -> str:
    baseline = statistics.median(times[BASELINE])
    rows = []
    for name, (_, target) in COMMANDS.items():
        median = statistics.median(times[name])
        ratio = median / baseline
        verdict = "" if target is None else (f"<= {target}x: {'met' if ratio <= target else 'missed'}")
        rows.append(f"| `{name}` | {median * 1000:.0f} | {ratio:.2f}x | {verdict} |")
    return "\n".join(
        [
            "# Start-up time of the trustlit command",
            "",
            provenance(command, quick=False, load_before=load_before),
            "",
            f"Median of {len(times[BASELINE])} runs each (after a warm-up round), each in a fresh interpreter, the "
            "commands interleaved so that load drifts hit them alike; ratio to `import lightning` in the same run.",
            "",
            "| command | median (ms) | vs import lightning | target |",
            "|---|---:|---:|---|",
            *rows,
            "",
            "`--help`, `recipes` and `import trustlit` import no torch (tests/test_registry.py checks it). "
            "`slurm submit --dry-run` validates the recipe and its overrides with LightningCLI's parser, which "
            "imports Lightning and the recipe's own family only, so it costs about one Lightning import.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    command = "python -m benchmarks.startup" + (f" --repeats {args.repeats}" if args.repeats != 5 else "")
    load_before = os.getloadavg()[0]
    text = render(measure(args.repeats), command, load_before)
    REPORT.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
