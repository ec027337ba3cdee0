"""What a run's numbers depend on beyond its code: the CPU kind (model name and bf16 instructions) and the machine.

Two CPUs with one model name can differ in the x86 extensions by which oneDNN and torch choose their bf16 kernels
(an "AMD EPYC" Zen 3 has none of :data:`BF16_ISA`, a Zen 4 the first two): they round bf16 training differently.
Where torch finds neither AVX-512 nor AVX-NE-CONVERT (:data:`ONEDNN_BF16`), it has no oneDNN bf16 kernels and a bf16
matmul is far slower than a float32 one (measured on the Zen 3: 2.92 s against 0.024 s for 2048 x 576 by 576 x 1536
on 2 threads, about 120x; docs/benchmarks/unlearning.md).
"""

from __future__ import annotations

import os
import platform
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import lightning as L

BF16_ISA = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16")
# torch's oneDNN bf16 check (ideep's has_bf16_type_support): AVX-512 core (emulated bf16 dot products) or AVX2 with
# AVX-NE-CONVERT; AMX implies the first. Without either, bf16 falls back to torch's own slow kernels.
ONEDNN_BF16 = ("avx512bw", "avx_ne_convert")


def read_cpuinfo() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.read_text(encoding="utf-8") if cpuinfo.is_file() else ""


def cpuinfo_field(cpuinfo: str, field: str) -> str | None:
    """The first processor's ``field`` in /proc/cpuinfo's text, or None."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == field:
            return value.strip()
    return None


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name from /proc/cpuinfo, else what the platform reports."""
    name = cpuinfo_field(read_cpuinfo() if cpuinfo is None else cpuinfo, "model name")
    return name or platform.processor() or "unknown"


def cpu_flags(cpuinfo: str) -> set[str] | None:
    """The first processor's x86 feature flags in /proc/cpuinfo's text (None off x86 Linux)."""
    flags = cpuinfo_field(cpuinfo, "flags")
    return None if flags is None else set(flags.split())


def cpu_kind(cpuinfo: str | None = None) -> str:
    """The CPU's model name and which of :data:`BF16_ISA` it has, e.g. ``AMD EPYC [avx512f avx512_bf16]`` or
    ``AMD EPYC [no AVX-512]``: CPUs of one kind choose the same bf16 kernels as far as these flags tell (no
    brackets off x86 Linux)."""
    cpuinfo = read_cpuinfo() if cpuinfo is None else cpuinfo
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return cpu_model(cpuinfo)
    present = [flag for flag in BF16_ISA if flag in flags]
    return f"{cpu_model(cpuinfo)} [{' '.join(present) or 'no AVX-512'}]"


def slow_cpu_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this is an x86 CPU on which torch has no oneDNN bf16 kernels (none of :data:`ONEDNN_BF16`)."""
    flags = cpu_flags(read_cpuinfo() if cpuinfo is None else cpuinfo)
    return flags is not None and not flags & set(ONEDNN_BF16)


def warn_slow_bf16(trainer: L.Trainer) -> None:
    """Warn, in one line, when ``trainer`` runs bf16 on a CPU where torch has no oneDNN bf16 (:func:`slow_cpu_bf16`)."""
    from lightning.pytorch.accelerators import CPUAccelerator  # here: importing trustlit.stages needs no Lightning

    precision = str(trainer.precision)
    if precision.startswith("bf16") and isinstance(trainer.accelerator, CPUAccelerator) and slow_cpu_bf16():
        warnings.warn(
            f"precision {precision} on this {cpu_kind()}, which has neither AVX-512 nor AVX-NE-CONVERT: torch runs "
            "bf16 there without oneDNN, about 120x slower than float32 in a measured matmul; use 32-true precision",
            stacklevel=2,
        )


def machine() -> str:
    """The CPU kind, its cores, how many of them this process may use, and the GPU if there is one."""
    accelerator = f"GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "CPU only"
    return (
        f"{cpu_kind()}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} available to the process), {accelerator}"
    )


def recorded_cpu_kind(machine_text: str) -> str:
    """The CPU kind at the head of a :func:`machine` text (a record made before kinds were recorded: its model)."""
    head, _, _ = machine_text.rpartition(" cores (")
    return head.rsplit(", ", 1)[0] if head else machine_text
