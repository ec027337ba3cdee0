"""What a run's numbers depend on beyond its code: the CPU kind (model name and bf16 instructions) and the machine.

Two CPUs with one model name can differ in the x86 extensions by which oneDNN and torch choose their bf16 kernels
(an "AMD EPYC" Zen 3 has none of :data:`BF16_ISA`, a Zen 4 the first two): they round bf16 training differently,
and without AVX-512 BF16 or AMX a bf16 matmul is far slower than a float32 one (measured on the Zen 3: 2.92 s
against 0.024 s for 2048 x 576 by 576 x 1536 on 2 threads, about 120x; docs/benchmarks/unlearning.md).
"""

from __future__ import annotations

import os
import platform
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.accelerators import CPUAccelerator

BF16_ISA = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16")
NATIVE_BF16 = ("avx512_bf16", "amx_bf16")  # either gives oneDNN native bf16 dot products


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


def cpu_kind(cpuinfo: str | None = None) -> str:
    """The CPU's model name and which of :data:`BF16_ISA` it has, e.g. ``AMD EPYC [avx512f avx512_bf16]`` or
    ``AMD EPYC [no AVX-512]``: the machines whose bf16 arithmetic is the same (no brackets off x86 Linux)."""
    cpuinfo = read_cpuinfo() if cpuinfo is None else cpuinfo
    flags = cpuinfo_field(cpuinfo, "flags")
    if flags is None:
        return cpu_model(cpuinfo)
    present = [flag for flag in BF16_ISA if flag in flags.split()]
    return f"{cpu_model(cpuinfo)} [{' '.join(present) or 'no AVX-512'}]"


def slow_cpu_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this is an x86 CPU without native bf16 dot products (:data:`NATIVE_BF16`), where bf16 runs emulated."""
    flags = cpuinfo_field(read_cpuinfo() if cpuinfo is None else cpuinfo, "flags")
    return flags is not None and not set(NATIVE_BF16) & set(flags.split())


def warn_slow_bf16(trainer: L.Trainer) -> None:
    """Warn, in one line, when ``trainer`` runs bf16 on a CPU without native bf16 (:func:`slow_cpu_bf16`)."""
    precision = str(trainer.precision)
    if precision.startswith("bf16") and isinstance(trainer.accelerator, CPUAccelerator) and slow_cpu_bf16():
        warnings.warn(
            f"trainer.precision={precision} on this {cpu_kind()}, which has neither avx512_bf16 nor amx_bf16: bf16 "
            "runs emulated there, about 120x slower than float32 in a measured matmul; set --trainer.precision=32-true",
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
