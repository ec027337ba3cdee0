"""The CPU kind a record names: model name and bf16 instructions, which decide bf16 rounding and speed."""

from __future__ import annotations

import lightning as L
import pytest

from trustlit import hardware
from trustlit.hardware import cpu_kind, machine, recorded_cpu_kind, slow_cpu_bf16, warn_slow_bf16

ZEN3 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n"
ZEN4 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = (
    "model name\t: Intel(R) Xeon(R) Processor\n"
    "flags\t\t: avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile\n"
)


def test_cpu_kind_tells_cpus_of_one_model_name_apart_by_their_bf16_instructions():
    assert cpu_kind(ZEN3) == "AMD EPYC [no AVX-512]"
    assert cpu_kind(ZEN4) == "AMD EPYC [avx512f avx512_bf16]"
    assert cpu_kind(SAPPHIRE_RAPIDS) == "Intel(R) Xeon(R) Processor [avx512f avx512_bf16 avx512_fp16 amx_bf16]"
    assert cpu_kind("model name\t: Neoverse-V2\n") == "Neoverse-V2"  # no x86 flags line: the model alone


def test_the_cpu_kind_is_read_back_from_a_machine_text_old_or_new():
    assert recorded_cpu_kind(machine()) == cpu_kind()
    old = "AMD EPYC, 2 cores (2 available to the process), CPU only"
    assert recorded_cpu_kind(old) == "AMD EPYC"
    gpu = "Intel(R) Xeon(R) Processor [amx_bf16], 16 cores (16 available to the process), GPU NVIDIA H100 80GB HBM3"
    assert recorded_cpu_kind(gpu) == "Intel(R) Xeon(R) Processor [amx_bf16]"
    commas = "CPU, rev. 2 [avx512f], 4 cores (4 available to the process), CPU only"
    assert recorded_cpu_kind(commas) == "CPU, rev. 2 [avx512f]"


def test_bf16_is_slow_on_an_x86_cpu_where_torch_has_no_onednn_bf16():
    assert slow_cpu_bf16(ZEN3)
    assert not slow_cpu_bf16(ZEN4) and not slow_cpu_bf16(SAPPHIRE_RAPIDS)
    assert not slow_cpu_bf16("flags\t\t: avx2 avx512f avx512bw avx512vl avx512dq\n")  # Cascade Lake: emulated in oneDNN
    assert not slow_cpu_bf16("flags\t\t: avx2 avx_vnni avx_ne_convert\n")  # AVX2 with bf16 conversion
    assert not slow_cpu_bf16("model name\t: Neoverse-V2\n")  # not x86: nothing known, no warning


def cpu_trainer(precision: str) -> L.Trainer:
    return L.Trainer(accelerator="cpu", devices=1, precision=precision, logger=False, enable_checkpointing=False)


def test_bf16_on_a_cpu_without_native_bf16_warns_in_one_line_and_float32_does_not(monkeypatch, recwarn):
    monkeypatch.setattr(hardware, "slow_cpu_bf16", lambda: True)
    with pytest.warns(UserWarning, match=r"precision bf16-mixed on this .*use 32-true precision"):
        warn_slow_bf16(cpu_trainer("bf16-mixed"))
    recwarn.clear()
    warn_slow_bf16(cpu_trainer("32-true"))
    monkeypatch.setattr(hardware, "slow_cpu_bf16", lambda: False)
    warn_slow_bf16(cpu_trainer("bf16-mixed"))
    assert not [w for w in recwarn if "precision" in str(w.message)]
