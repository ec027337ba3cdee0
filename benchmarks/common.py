"""Shared by the benchmark scripts: machine facts, sectioned reports, quiet short runs, step timing, formatting.

A report (``docs/benchmarks/<area>.md``) holds one delimited block per section: a run rewrites the
sections it ran and keeps the others, so every section can be regenerated alone, and every block
records its own command, date, machine and versions (:func:`provenance`). :class:`Report` holds a
script's sections and runs the ones named by ``--sections``.

The scripts run as ``python benchmarks/NAME.py`` or ``python -m benchmarks.NAME``; either way they
import this module as ``benchmarks.common``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import shlex
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

from trustlit.hardware import machine, warn_slow_bf16
from trustlit.paths import atomic_path, write_json_atomic
from trustlit.stages import utc_date

REPO_ROOT = Path(__file__).resolve().parents[1]
TOFU = REPO_ROOT.parent / "shared" / "data" / "tofu"  # the offline TOFU copy beside the checkout (ARCHITECTURE.md)
BLOCK = re.compile(r"<!-- section: (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- end section: (?P=name) -->\n", re.S)


def quiet() -> None:
    """Silence Lightning's per-fit banners and the warnings every short (DP) run repeats."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for message in (
        ".*does not have many workers.*",
        ".*GPU available but not used.*",
        ".*smaller than the logging interval.*",
        ".*Secure RNG turned off.*",
        ".*Using a non-full backward hook.*",
        ".*Full backward hook is firing.*",
        ".*but have no `validation_step`.*",
        ".*but have no `val_dataloader`.*",
        ".*LeafSpec.*is deprecated.*",
        ".*isinstance.treespec, LeafSpec.*",
        ".*In CPU autocast, but the target dtype is not supported.*",
        ".*Optimal order is the (largest|smallest) alpha.*",
        ".*The .srun. command is available on your system but is not used.*",
    ):
        warnings.filterwarnings("ignore", message=message)


def bare_trainer(
    callbacks: Sequence[L.Callback] = (),
    *,
    root: Path | str | None = None,
    logger: bool = False,
    checkpointing: bool = False,
    accelerator: str = "cpu",
    **budget: Any,
) -> L.Trainer:
    """A quiet Trainer on one device (CPU unless ``accelerator`` says otherwise): no progress bar, model summary or
    validation.

    ``root``: its ``default_root_dir`` (Lightning's default: the working directory); ``logger`` and
    ``checkpointing``: Lightning's default logger and ``ModelCheckpoint`` (both off by default);
    ``budget``: max_steps, max_epochs, limit_test_batches, ...
    """
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        logger=logger,
        enable_checkpointing=checkpointing,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        default_root_dir=None if root is None else str(root),
        **budget,
    )
    warn_slow_bf16(trainer)
    return trainer


class StepTimer(L.Callback):
    """``time.perf_counter()`` at the start (``on_train_batch_start``) and the end (``on_train_batch_end``) of every
    training step, and the step's ``batch_idx``.

    A hand-written loop records its steps with :meth:`start` and :meth:`end`. ``seconds``: the
    duration of every step (start to end); :meth:`intervals`, :meth:`in_step` and :meth:`between`
    split the timed steps of a run into start to next start = in the step + between steps.
    """

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.batch_indices: list[int] = []

    def start(self, batch_idx: int = 0) -> None:
        self.starts.append(time.perf_counter())
        self.batch_indices.append(batch_idx)

    def end(self) -> None:
        self.ends.append(time.perf_counter())

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.start(batch_idx)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.end()

    @property
    def seconds(self) -> list[float]:
        """Start-to-end duration of every step that ended."""
        return [e - s for s, e in zip(self.starts, self.ends, strict=False)]

    def intervals(self, warmup: int, steps: int, label: str = "run") -> list[float]:
        """Start-to-next-start durations of steps ``warmup .. warmup + steps - 1`` (one more step must have started)."""
        times = [b - a for a, b in zip(self.starts[:-1], self.starts[1:], strict=True)][warmup : warmup + steps]
        if len(times) != steps:
            raise RuntimeError(f"{label}: {len(self.starts)} steps started, {warmup + steps + 1} needed")
        return times

    def in_step(self, warmup: int, steps: int) -> list[float]:
        """Start-to-end durations of the same steps (the step's own work, without fetching the next batch)."""
        return self.seconds[warmup : warmup + steps]

    def between(self, warmup: int, steps: int) -> list[float]:
        """End-to-next-start durations of the same steps (fetching the next batch, the hooks between steps)."""
        return [t - i for t, i in zip(self.intervals(warmup, steps), self.in_step(warmup, steps), strict=True)]


def package_versions(extra: str = "") -> str:
    """Python, torch and lightning versions, then ``extra`` (more packages)."""
    return f"Python {platform.python_version()}, torch {torch.__version__}, lightning {L.__version__}" + (
        f", {extra}" if extra else ""
    )


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that ran ``script`` with ``argv`` (default: this process's arguments), as a user types it."""
    return shlex.join([".venv/bin/python", script, *(sys.argv[1:] if argv is None else argv)])


def repo_path(path: Path | str) -> Path:
    """``path``, relative paths taken from the repository's root."""
    path = Path(path)
    return path if path.is_absolute() else REPO_ROOT / path


def cached_json(path: Path, compute: Callable[[], Any]) -> Any:
    """A finished stage: the JSON at ``path``, else ``compute()`` written there atomically (never half-written)."""
    if not path.is_file():
        write_json_atomic(path, compute())
    return json.loads(path.read_text(encoding="utf-8"))


def provenance(command: str, quick: bool, load_before: float | None, versions: str = "") -> str:
    """Command, date, machine, load and versions of one section (``versions``: extra packages)."""
    load = (f"{load_before:.2f} before the section, " if load_before is not None else "") + (
        f"{os.getloadavg()[0]:.2f} after"
    )
    return (
        f"- Command: `{command}`{' (**quick smoke run**, not the reference numbers)' if quick else ''}\n"
        f"- Date: {utc_date()}\n"
        f"- Machine: {machine()}; torch threads: {torch.get_num_threads()}\n"
        f"- 1-minute load average: {load} (this process accounts for about 1; more means that other processes "
        "competed for the cores)\n"
        f"- Versions: {package_versions(versions)}"
    )


def with_provenance(text: str, provenance_lines: str) -> str:
    """The section's markdown with its provenance under its first line (its title)."""
    title, _, body = text.partition("\n")
    return f"{title}\n\n{provenance_lines}\n\n{body.lstrip()}"


def read_sections(path: Path) -> dict[str, str]:
    """The section blocks of an earlier report, by name (empty if there is none)."""
    if not path.is_file():
        return {}
    return {m["name"]: m["body"] for m in BLOCK.finditer(path.read_text(encoding="utf-8"))}


def render_report(title: str, script: str, order: Sequence[str], sections: dict[str, str]) -> str:
    """The whole report: sections in ``order``, then any kept from a report written by a newer script."""
    known = [name for name in order if name in sections]
    others = [name for name in sections if name not in order]
    blocks = "\n".join(
        f"<!-- section: {name} -->\n{sections[name].rstrip()}\n\n<!-- end section: {name} -->\n"
        for name in known + others
    )
    return f"""# {title}

Produced by `{script}`; one section per `--sections` name ({", ".join(f"`{n}`" for n in order)}).
Each section is regenerated alone (`.venv/bin/python {script} --sections NAME`) and records its own
command, date, machine and versions.

{blocks}"""


# -- formatting ------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    """Seconds as milliseconds with two decimals."""
    return f"{1000 * seconds:.2f}"


def mean_std(values: Sequence[float], digits: int = 1, number: Callable[[float], str] | None = None) -> str:
    """``mean ± sample std`` (one value: its mean alone; none: ``-``), each written by ``number`` (default: fixed
    ``digits`` decimals)."""
    if not values:
        return "-"
    number = number or (lambda value: f"{value:.{digits}f}")
    spread = f" ± {number(statistics.stdev(values))}" if len(values) > 1 else ""
    return f"{number(statistics.fmean(values))}{spread}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> str:
    """A markdown table; ``align`` holds ``l`` or ``r`` per column (columns beyond it: ``l``)."""
    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(header), "l"))
    return "\n".join([table_row(header), rule, *map(table_row, rows)])


def table_row(cells: Sequence[str]) -> str:
    """One row of a markdown table."""
    return "| " + " | ".join(cells) + " |"


# -- sectioned reports -----------------------------------------------------------------------

Section = Callable[[argparse.Namespace], str]


@dataclass(frozen=True)
class Report:
    """A script's sectioned report: its sections in order, each a function ``(args) -> markdown`` (a ``## `` title
    first), and the options every such script has (``--sections``, ``--quick``, ``--output``)."""

    title: str
    script: str  # as the user runs it, relative to the repository: benchmarks/NAME.py
    output: str  # the default report, relative to the repository
    sections: dict[str, Section]
    versions: str = ""  # packages besides Python, torch and lightning, in every section's provenance

    def parser(self, description: str, quick: str) -> argparse.ArgumentParser:
        """``--sections``, ``--quick`` (``quick``: its help) and ``--output``; the script adds its own options."""
        parser = argparse.ArgumentParser(description=description)
        names = ", ".join(self.sections)
        parser.add_argument("--sections", default=",".join(self.sections), help=f"comma-separated, from {names}")
        parser.add_argument("--quick", action="store_true", help=quick)
        parser.add_argument("--output", default=self.output, help="markdown report (relative: to the repo)")
        return parser

    def parse(self, parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
        """The arguments, with ``sections`` a checked list, ``output`` a path and ``command`` the command line."""
        args = parser.parse_args(argv)
        args.sections = comma_list(args.sections)
        unknown = [s for s in args.sections if s not in self.sections]
        if unknown or not args.sections:
            parser.error(f"unknown sections {unknown}; choose from {', '.join(self.sections)}")
        args.output = repo_path(args.output)
        args.command = command_line(self.script, argv)
        return args

    def run(self, args: argparse.Namespace) -> None:
        """Run ``args.sections`` in turn; after each, rewrite it (with its provenance) in the report, keep the rest."""
        began = time.perf_counter()
        for name in args.sections:
            block = self.run_section(name, args)
            # Read the report again only now: another run may have rewritten its own sections meanwhile.
            sections = {**read_sections(args.output), name: block}
            with atomic_path(args.output) as temporary:
                temporary.write_text(render_report(self.title, self.script, list(self.sections), sections), "utf-8")
            print(block, flush=True)
        print(f"written to {args.output} ({time.perf_counter() - began:.0f} s)")

    def run_section(self, name: str, args: argparse.Namespace) -> str:
        """One section's markdown with its provenance."""
        args.load_before = os.getloadavg()[0]
        began = time.perf_counter()
        text = self.sections[name](args)
        print(f"{name}: {time.perf_counter() - began:.0f} s", flush=True)
        return with_provenance(text, provenance(args.command, args.quick, args.load_before, self.versions))


def comma_list(text: str) -> list[str]:
    """The non-empty items of a comma-separated option."""
    return [item.strip() for item in text.split(",") if item.strip()]


def family_report(title: str, script: str, output: str, families: Sequence[Any], versions: str = "") -> Report:
    """The report composed of the section modules ``families`` (each exports ``SECTIONS`` and ``add_arguments``)."""
    sections = {name: section for family in families for name, section in family.SECTIONS.items()}
    return Report(title, script, output, sections, versions)


def run_families(
    report: Report, families: Sequence[Any], argv: Sequence[str] | None, *, quick: str, workdir: str, threads: int
) -> None:
    """Parse the composed script's options (its families' too, ``--threads``, ``--workdir``) and run its sections with
    torch and BLAS limited to ``--threads``."""
    from threadpoolctl import threadpool_limits

    parser = report.parser(report.title, quick)
    parser.add_argument("--threads", type=int, default=threads, help=f"torch and BLAS threads (default {threads})")
    parser.add_argument("--workdir", type=Path, default=Path(workdir), help="cached stages")
    for family in families:
        family.add_arguments(parser)
    args = report.parse(parser, argv)
    quiet()
    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):
        report.run(args)
