"""Shared by the benchmark scripts: machine facts, sectioned reports, quiet short runs.

A report (``docs/benchmarks/<area>.md``) holds one delimited block per section: a run rewrites the
sections it ran and keeps the others, so every section can be regenerated alone, and every block
records its own command, date, machine and versions (:func:`provenance`).
"""

from __future__ import annotations

import logging
import os
import platform
import re
import time
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning as L
import torch

BLOCK = re.compile(r"<!-- section: (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- end section: (?P=name) -->\n", re.S)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what the platform reports."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text(encoding="utf-8").splitlines() if cpuinfo.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or "unknown"


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


def bare_trainer(callbacks: list[L.Callback], **budget: int) -> L.Trainer:
    """A plain CPU Trainer: no logger, checkpoints, progress bar or validation; ``budget``: max_steps/max_epochs."""
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **budget,
    )


class StepTimer(L.Callback):
    """Wall time of every training step (batch start to batch end), in ``seconds``."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self.began = time.perf_counter()

    def on_train_batch_end(self, *args: Any) -> None:
        self.seconds.append(time.perf_counter() - self.began)


def provenance(command: str, quick: bool, load_before: float | None, versions: str = "") -> str:
    """Command, date, machine, load and versions of one section (``versions``: extra packages)."""
    load = (f"{load_before:.2f} before the section, " if load_before is not None else "") + (
        f"{os.getloadavg()[0]:.2f} after"
    )
    extra = f", {versions}" if versions else ""
    return (
        f"- Command: `{command}`{' (**quick smoke run**, not the reference numbers)' if quick else ''}\n"
        f"- Date: {datetime.now(timezone.utc).strftime('%a %b %d %H:%M:%S UTC %Y')}\n"
        f"- Machine: {cpu_model()}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} available to the "
        f"process), CPU only; torch threads: {torch.get_num_threads()}\n"
        f"- 1-minute load average: {load} (this process accounts for about 1; more means that other processes "
        "competed for the cores)\n"
        f"- Versions: Python {platform.python_version()}, torch {torch.__version__}, lightning {L.__version__}{extra}"
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
