"""The TOFU protocol on SmolLM2-135M-Instruct: fine-tune, unlearn with every method, evaluate, select at matched MU.

Stages (each cached by :class:`trustlit.stages.StageCache` under ``--workdir``, with its command, date,
wall time and machine, so a killed run resumes). Each stage's record, and the evaluations' per-sample
file, also go to ``--records`` (``benchmarks/results/unlearning/<protocol>``, committed): a new checkout
knows every finished result and recomputes a fine-tune only when a stage still to run needs its weights,
so the benchmark completes across sessions that share nothing but the repository. A recomputed fine-tune must
give its recorded weights again (``weights_sha256``; a record older than the digest: its two probes), or the run
stops: bf16 training is not reproducible across kinds of CPU, so each variant's chain of stages grows only on the
kind of CPU that made its fine-tunes (``machine`` in their records: the model name and the bf16 instructions it
has, :func:`trustlit.hardware.cpu_kind`; two AMD EPYCs may differ in them), and a run that would recompute one on
another kind stops before it starts (``--other-cpu`` tries anyway). A LoRA fine-tune's adapters are committed beside
its record (``adapters.safetensors``, about 10 MB): a new checkout rebuilds its checkpoint from them and the
pretrained weights, bit for bit (the digest is checked), in seconds instead of a 35-minute fine-tune. A ``-fp32``
variant (``lora-fp32``) unlearns and evaluates its base variant's target in float32 against the base variant's
retain-model evaluation: on rebuilt adapters it grows on any kind of CPU, one without fast bf16 included.

1. ``data``: the TOFU subset (``tofu20``, the CPU default) or TOFU itself (``full``, for a GPU).
2. ``finetune/<role>-<variant>``: the target (all authors) and the retain model (retain authors only),
   TOFU's fine-tuning recipe: 5 epochs (LoRA: 10, as TOFU's LoRA config), effective batch 32, AdamW weight
   decay 0.01, one warm-up epoch then linear decay; ``variant`` is full-parameter or LoRA.
3. ``eval/<model>``: :class:`~trustlit.unlearning.UnlearningEvaluation` on the forget split, the retain
   authors' ``retain_perturbed``, ``real_authors`` and ``world_facts`` (greedy answers of up to 200
   tokens, ROUGE-L recall with stemming); Forget Quality against the retain model's truth ratios.
   The target passes the memorisation gate when its forget ROUGE-L recall is >= 0.9.
4. ``unlearn/<variant>/<method>/<setting>/seed<k>``: one unlearning run and its evaluation: the sweep on
   seed 0, then the setting chosen at matched utility (Model Utility >= 0.95 x the target's, highest
   Forget Quality on seed 0) on the test seeds 1, 2, 3.

A fine-tune's or unlearning run's record also holds ``train_loss``, the loss of each optimiser step (records made
before it was added lack it).

``--phase`` stops after a phase (``gate``: the untuned model's probes and the target's fine-tune only, while
choosing the fine-tuning lr; ``finetune``, ``evaluate``, ``sweep``, ``seeds``); the section renders whatever is
cached and lists what is still to run.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from safetensors.torch import load_file

from benchmarks.common import REPO_ROOT, TOFU, bare_trainer, comma_list, mean_std, table
from trustlit import CausalLMFineTuning
from trustlit.checkpointing import save_weights_checkpoint
from trustlit.data import ForgetRetainDataModule, QADataModule, load_qa_split
from trustlit.data.tofu_subsets import write_tofu_subset
from trustlit.figures import new_figure, save_png
from trustlit.hardware import cpu_kind, recorded_cpu_kind
from trustlit.llm.harvest import save_safetensors_atomic
from trustlit.llm.loading import SMOLLM2_NAME
from trustlit.llm.scoring import encode_pairs
from trustlit.metrics.tofu import CORRECT_ROUGE_RECALL, SUMMARY_KEYS, TOFU_MAX_NEW_TOKENS, greedy_rouge
from trustlit.stages import StageCache, config_digest, first_difference, tensors_digest
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
from trustlit.unlearning.evaluation import GENERAL_SPLITS

PHASES = ("gate", "finetune", "evaluate", "sweep", "seeds")
VARIANTS = ("full", "lora", "full-fp32", "lora-fp32")
# A "-fp32" variant unlearns and evaluates its base variant's target in float32, against the base variant's FQ
# reference (the retain model's evaluation, kept as that chain computed it): the chain a CPU without fast bf16 can grow
# (an AMD EPYC Zen 3 runs bf16 matmuls about 120x slower than float32 ones), on any kind of CPU when the target's LoRA
# adapters are committed, since float32 kernels differ across CPUs only in summation order.
FLOAT32 = "-fp32"
# TOFU's released LoRA (config/finetune_lora.yaml, forget_lora.yaml): r 8, alpha 32, dropout 0.05, on every linear
# layer but the head (its find_all_linear_names; peft's "all-linear" excludes the head the same way).
LORA = {"r": 8, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": "all-linear"}
MAX_LENGTH = 256  # TOFU's longest answer is 94 SmolLM2 tokens: nothing is cut
EFFECTIVE_BATCH = 32
MICRO_BATCH = 8  # x 4 accumulated = 32; the forget/retain data modules give 8 forget + 8 retain per micro batch
EVAL_BATCH = 16
QUICK_MAX_NEW_TOKENS = 16  # a --quick run's random tiny model never ends an answer: 16 tokens take the same paths
UNLEARN_CLIP = 1.0  # TOFU's (the HF Trainer's max_grad_norm) and Attention-Shifting's released gradient clipping
FINETUNE_EPOCHS = 5  # TOFU's config/finetune.yaml
FINETUNE_EPOCHS_LORA = 10  # TOFU's config/finetune_lora.yaml (5 LoRA epochs failed the gate here up to lr 1e-2)
UNLEARN_EPOCHS = 10
MEMORISATION_GATE = 0.9  # forget ROUGE-L recall of the target
MATCHED_UTILITY = 0.95  # a setting is eligible when its Model Utility >= 0.95 x the target's
SWEEP_SEED, TEST_SEEDS = 0, (1, 2, 3)
# Raise when the evaluation code changes what it reports (every eval and unlearn stage is then recomputed).
# 1: stemmed ROUGE-L, 200 new tokens, refusal / non-answer / fabrication, FQ sample sizes. (Added since, changing no
# number: the greedy forget answers in the JSON, per_sample.forget_answers, and degenerate_rate; records without them
# stay valid.)
EVAL_VERSION = 1
EVAL_FILE = "unlearning_eval.json"
READING_FILE = "READING.md"
ANY_CPU = "any CPU"
ADAPTERS_FILE = "adapters.safetensors"  # a LoRA fine-tune's adapters, committed: a checkout rebuilds its checkpoint
REPRODUCED = ("weights_sha256", "forget_rougeL_probe", "real_authors_rougeL_probe")  # of a recomputed fine-tune
PRECISIONS = ("bf16-mixed", "32-true")
# The CPU kinds of the records made before the machine text named the bf16 ISA (trustlit.hardware.cpu_kind), as the
# sessions that made them read it (READING.md): the full-parameter chain on AMD EPYC Zen 4 (AVX-512 BF16), the LoRA
# chain on Intel Xeon Sapphire Rapids or later (AMX-BF16, AVX-512 FP16). An AMD EPYC Zen 3 (no AVX-512) shares the
# first's model name but not its rounding, and its bf16 matmuls run about 120x slower than its float32 ones. These are
# the tofu20 records, the only ones made before the kinds were recorded.
LEGACY_CPU_KINDS = {
    "AMD EPYC": "AMD EPYC [avx512f avx512_bf16]",
    "Intel(R) Xeon(R) Processor": "Intel(R) Xeon(R) Processor [avx512f avx512_bf16 avx512_fp16 amx_bf16]",
}
LRS = (1e-5, 3e-5, 1e-4)
# Through TOFU's LoRA adapters (r 8) the grid hardly moves the target: NPO at lr 1e-4 left the forget ROUGE-L
# recall at 0.977 (1e-5: 0.979). The methods that unlearn through adapters sweep one bracket higher, sharing 1e-4; the
# LoRA fine-tune itself needed lr 3e-3, 6x the full-parameter one.
LORA_LRS = (1e-4, 3e-4, 1e-3)


def protocol_splits(name: str) -> dict[str, str]:
    """The split names of a protocol: training files, the forget split and the four evaluation splits."""
    if name == "tofu20":
        return {"target": "full", "retain": "retain", "forget": "forget01", "forget_eval": "forget01_perturbed"}
    return {"target": "full", "retain": "retain95", "forget": "forget05", "forget_eval": "forget05_perturbed"}


# -- methods and their sweeps ------------------------------------------------------------------------

METHODS: dict[str, type] = {
    "GradAscent": GradAscent,
    "GradDiff": GradDiff,
    "KL": KLMinimization,
    "NPO": NPO,
    "SimNPO": SimNPO,
    "IdkDPO": IdkDPO,
    "RMU": RMU,
    "LUNAR": LUNAR,
    "AttentionShifting": AttentionShifting,
    "AttentionShifting-trustlit": AttentionShifting,
}
# The TOFU schedule (one warm-up epoch, then linear decay to 0) for the methods that train the whole
# model; LUNAR (its own optimiser on one down-projection, ExponentialLR) and Attention-Shifting (adapters)
# keep their released optimisers, and their sweep brackets the released learning rate.
TOFU_SCHEDULE = {"lr_schedule": "linear"}
# The released learning rates of the methods with their own optimiser: the sweep brackets them.
OWN_SWEEPS: dict[str, list[dict[str, Any]]] = {
    "LUNAR": [{"lr": lr} for lr in (3e-3, 1e-2, 3e-2)],
    "AttentionShifting": [{"lr": lr, "mode": "paper"} for lr in (1.5e-4, 5e-4, 1.5e-3)],
    "AttentionShifting-trustlit": [{"lr": lr, "mode": "trustlit"} for lr in (1.5e-4, 5e-4, 1.5e-3)],
}
SIMNPO_BETAS, SIMNPO_GAMMAS = (2.5, 3.5, 4.5), (0.0, 1.0)
# RMU and LUNAR train chosen down-projections and Attention-Shifting its own adapters: no LoRA for them.
ADAPTS_WITH_LORA = {"GradAscent", "GradDiff", "KL", "NPO", "SimNPO", "IdkDPO"}
OWN_SCHEDULE = {"LUNAR", "AttentionShifting", "AttentionShifting-trustlit"}
EPOCHS = {"LUNAR": 20}  # LUNAR's released config; every other method: 10 epochs


def trained(variant: str) -> str:
    """What ``variant``'s fine-tunes train: ``full`` or ``lora`` (a ``-fp32`` variant shares its base's models)."""
    return variant.removesuffix(FLOAT32)


def sweep(method: str, variant: str) -> list[dict[str, Any]]:
    """The settings swept for ``method`` on the ``variant`` target, in the report's order (see :func:`run_order`)."""
    if method in OWN_SWEEPS:
        return OWN_SWEEPS[method]
    lrs = LORA_LRS if adapts_with_lora(variant, method) else LRS
    if method == "SimNPO":
        grid = itertools.product(lrs, SIMNPO_BETAS, SIMNPO_GAMMAS)
        return [{"lr": lr, "beta": beta, "gamma": gamma} for lr, beta, gamma in grid]
    return [{"lr": lr} for lr in lrs]


def run_order(settings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``settings`` highest learning rate first (the grid's order within one lr): a sweep that a session's end
    cuts short has then shown whether the method forgets at all, which the lowest lrs rarely do."""
    return sorted(settings, key=lambda setting: -setting["lr"])


def setting_name(setting: Mapping[str, Any]) -> str:
    """``lr1e-05-beta2.5`` for ``{"lr": 1e-5, "beta": 2.5}``: a directory name."""
    return "-".join(f"{key}{value}" for key, value in setting.items())


# -- stages -------------------------------------------------------------------------------------------


class Protocol:
    """The stages of one run of the benchmark, over one :class:`StageCache`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cache = StageCache(args.workdir, command=args.command, records=args.records)
        self.splits = protocol_splits(args.protocol)
        # TOFU by content, not by path: the committed records stay valid in a checkout elsewhere
        self.tofu_digest = files_digest(args.tofu)

    def trainer(
        self, directory: Path, name: str, epochs: int, every: int, clip: float | None, precision: str
    ) -> L.Trainer:
        """The Trainer of a fine-tuning or unlearning stage: effective batch 32, gradients clipped at ``clip``."""
        return bare_trainer(
            [Progress(name, every)],
            root=directory,
            accelerator=self.args.accelerator,
            max_epochs=epochs,
            accumulate_grad_batches=EFFECTIVE_BATCH // MICRO_BATCH,
            gradient_clip_val=clip,
            precision=precision,
        )

    def autocast(self, precision: str) -> Any:
        """bf16 autocast for what runs outside a training step (generation and scoring in the evaluation) when the
        stage's ``precision`` is bf16-mixed; TOFU fine-tunes and evaluates in bf16 too."""
        device = "cuda" if torch.cuda.is_available() and self.args.accelerator != "cpu" else "cpu"
        return torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16-mixed")

    def precision(self, variant: str) -> str:
        """The precision of ``variant``'s unlearning runs and target evaluation: float32 for a ``-fp32`` variant,
        else ``--precision`` (that of every fine-tune)."""
        return "32-true" if variant.endswith(FLOAT32) else self.args.precision

    def finetune_lr(self, variant: str) -> float:
        return self.for_variant("finetune_lr", variant)

    def finetune_epochs(self, variant: str) -> int:
        return self.for_variant("finetune_epochs", variant)

    def for_variant(self, option: str, variant: str) -> Any:
        """``--<option>`` for the full-parameter variants, ``--<option>-lora`` for LoRA."""
        return getattr(self.args, option if trained(variant) == "full" else f"{option}_lora")

    def model(self, role: str, variant: str) -> str:
        """``target-full-lr0.0003`` (``-ep10`` when not 5 epochs): a fine-tuned model is named by its learning
        rate and epochs, so that the attempts at the memorisation gate stay side by side in the cache (and in the
        report)."""
        epochs = self.finetune_epochs(variant)
        return f"{role}-{trained(variant)}-lr{self.finetune_lr(variant):g}" + (
            "" if epochs == FINETUNE_EPOCHS else f"-ep{epochs}"
        )

    # data
    def data(self) -> Path:
        config = {"protocol": self.args.protocol, "tofu": self.tofu_digest}
        if self.args.protocol == "full":
            return self.args.tofu

        def build(directory: Path) -> dict:
            subset = write_tofu_subset(self.args.tofu, directory / "tofu", self.splits["forget"], 18)
            return {"forget_authors": subset.forget_authors, "retain_authors": subset.retain_authors, **subset.counts}

        self.cache.run("data", config, build, files=True)
        return self.cache.path("data") / "tofu"

    def data_id(self) -> str:
        return self.cache.record("data")["config_digest"] if self.args.protocol == "tofu20" else "tofu"

    # the untuned model: what every fine-tune starts from
    def base(self) -> dict:
        """The pretrained model's probes (forget and real_authors ROUGE-L), against which the fine-tunes'
        memorisation and their loss of real-world knowledge read."""
        source = self.data()
        config = {
            "model": self.args.model,
            "data": self.data_id(),
            "tiny": self.args.tiny,
            "precision": self.args.precision,
        }

        def probe(directory: Path) -> dict:
            L.seed_everything(0, workers=True, verbose=False)  # a --quick run's tiny model is initialised at random
            module = CausalLMFineTuning(
                lm={"name_or_path": config["model"], "tiny": config["tiny"] or {}}, generate=False
            )
            with self.autocast(self.args.precision):
                return answer_probes(module, source, self.splits["forget"], self.args.max_new_tokens)

        self.progress("base", config)
        return self.cache.run("base", config, probe)

    # fine-tuning
    def finetune_config(self, role: str, variant: str) -> dict[str, Any]:
        return {
            "model": self.args.model,
            "data": self.data_id(),
            "split": self.splits[role],
            "lora": LORA if trained(variant) == "lora" else None,
            "lr": self.finetune_lr(variant),
            "epochs": self.finetune_epochs(variant),
            "effective_batch": EFFECTIVE_BATCH,
            "micro_batch": MICRO_BATCH,
            "weight_decay": 0.01,
            "warmup_epochs": 1,
            "schedule": "linear",
            "max_length": MAX_LENGTH,
            "seed": 0,
            "tiny": self.args.tiny,
            "precision": self.args.precision,
        }

    def stage(self, kind: str, role: str, variant: str) -> str:
        """The cache name of ``role``'s ``kind`` stage (``finetune`` or ``eval``) on ``variant``; a ``-fp32``
        variant's target evaluation is its own (``eval/<model>-fp32``), its fine-tunes and FQ reference its base's."""
        own = kind == "eval" and role == "target" and variant.endswith(FLOAT32)
        return f"{kind}/{self.model(role, variant)}" + (FLOAT32 if own else "")

    def finetune(self, role: str, variant: str, files: bool = False) -> Path:
        """The fine-tuned checkpoint of ``role``; ``files``: make sure this checkout has it (a new checkout has
        only the committed record, and fine-tunes again, on the same seed and configuration)."""
        name = self.stage("finetune", role, variant)
        source = self.data()
        config = self.finetune_config(role, variant)

        def train(directory: Path) -> dict:
            L.seed_everything(config["seed"], workers=True, verbose=False)
            data = QADataModule(
                seed=config["seed"],
                source=str(source),
                train_split=config["split"],
                eval_splits=[],
                batch_size=MICRO_BATCH,
                max_length=MAX_LENGTH,
                prompt_format="chat",
            )
            module = finetune_module(config, steps_per_epoch(source, config["split"]))
            # no clipping: the benchmark's first fine-tunes ran without it (the HF Trainer's default clips at 1)
            trainer = self.trainer(directory, name, config["epochs"], every=5, clip=None, precision=config["precision"])
            began = time.perf_counter()
            trainer.fit(module, data)
            seconds = time.perf_counter() - began
            trainer.save_checkpoint(directory / "model.ckpt", weights_only=True)
            if config["lora"]:
                save_safetensors_atomic(adapter_weights(module.model), directory / ADAPTERS_FILE)
            with self.autocast(config["precision"]):
                probes = answer_probes(module, source, self.splits["forget"], self.args.max_new_tokens)
            probes["weights_sha256"] = tensors_digest(module.model.state_dict())
            return {
                "train_seconds": seconds,
                "optimizer_steps": trainer.global_step,
                "train_loss": step_losses(trainer),
                **probes,
            }

        def restore(directory: Path, kept: Path) -> dict:
            """The checkpoint again from the committed adapters and the pretrained weights, in seconds."""
            module = finetune_module(config, steps_per_epoch(source, config["split"]))
            load_adapters(module.model, load_file(kept / ADAPTERS_FILE), kept / ADAPTERS_FILE)
            save_weights_checkpoint(module, directory / "model.ckpt")
            return {"weights_sha256": tensors_digest(module.model.state_dict())}

        lora = {"keep": (ADAPTERS_FILE,), "restore": restore} if config["lora"] else {}
        restorable = bool(lora) and self.cache.restorable(name, lora["keep"])
        if files and self.cache.done(name, config) and not self.cache.has_files(name, config):
            self.refuse_other_cpu(name, variant)
        self.progress(name, config, files, restorable=restorable)
        # every later stage was computed from the recorded weights: a recomputation must give them again (the
        # digest; records older than it have the probes, which equal weights give and most changes move)
        self.cache.run(name, config, train, files=files, reproduce=REPRODUCED, **lora)
        return self.cache.path(name) / "model.ckpt"

    # evaluation
    def evaluate_config(self, model_stage: str, reference_stage: str | None, precision: str) -> dict[str, Any]:
        return {
            "model": self.cache.record(model_stage)["config_digest"],
            "reference": self.cache.record(reference_stage)["config_digest"] if reference_stage else None,
            "version": EVAL_VERSION,
            "max_new_tokens": self.args.max_new_tokens,
            "rouge": "rouge-score rougeL recall, Porter stemming",
            "correct_rouge_recall": CORRECT_ROUGE_RECALL,
            "prompt_format": "chat",
            "max_length": MAX_LENGTH,
            "batch_size": EVAL_BATCH,
            "max_samples": self.args.eval_samples,
            "precision": precision,
            "splits": self.eval_splits(),
        }

    def eval_splits(self) -> dict[str, str]:
        return {
            "forget_split": self.splits["forget_eval"],
            "retain_split": "retain_perturbed",
            "real_authors_split": "real_authors_perturbed",
            "world_facts_split": "world_facts_perturbed",
        }

    def evaluation(self, module: L.LightningModule, directory: Path, reference: Path | None, precision: str) -> dict:
        """TOFU's metrics of ``module`` in ``precision`` (through ``trainer.test``: one forget batch, then the
        callback)."""
        callback = UnlearningEvaluation(
            **self.eval_splits(),
            reference=str(reference) if reference else None,
            output=str(directory / EVAL_FILE),
            batch_size=EVAL_BATCH,
            max_new_tokens=self.args.max_new_tokens,
            max_samples=self.args.eval_samples,
        )
        data = QADataModule(
            source=str(self.data()),
            train_split=None,
            eval_splits=[self.splits["forget"]],
            batch_size=8,
            max_length=MAX_LENGTH,
            prompt_format="chat",
        )
        began = time.perf_counter()
        tester = bare_trainer([callback], root=directory, accelerator=self.args.accelerator, limit_test_batches=1)
        with self.autocast(precision):
            tester.test(module, data, verbose=False)
        return {**callback.results, "eval_seconds": time.perf_counter() - began}

    def evaluate_model(self, role: str, variant: str) -> dict:
        if role == "retain":  # the FQ reference of every variant on these models: as the base variant computed it
            variant = trained(variant)
        model_stage = self.stage("finetune", role, variant)
        reference_stage = None if role == "retain" else self.stage("eval", "retain", variant)
        name = self.stage("eval", role, variant)
        precision = self.precision(variant)
        config = self.evaluate_config(model_stage, reference_stage, precision)
        reference = self.cache.file(reference_stage, EVAL_FILE) if reference_stage else None
        self.weights_for(name, config, role, variant)

        def run(directory: Path) -> dict:
            checkpoint = self.cache.path(model_stage) / "model.ckpt"
            module = CausalLMFineTuning(lm={"name_or_path": str(checkpoint)}, generate=False)
            return self.evaluation(module, directory, reference, precision)

        self.progress(name, config)
        return self.cache.run(name, config, run, keep=(EVAL_FILE,))

    # LUNAR's layer: the paper's search, once per target (every LUNAR run then redirects that block)
    def lunar_layer_config(self, variant: str) -> dict[str, Any]:
        target_record = self.cache.record(self.stage("finetune", "target", variant))
        return {"target": target_record["config_digest"], "search_samples": 16, "precision": self.precision(variant)}

    def lunar_layer(self, variant: str) -> int:
        name = f"lunar-layer/{variant}"
        target = self.cache.path(self.stage("finetune", "target", variant)) / "model.ckpt"
        config = self.lunar_layer_config(variant)
        source = self.data()
        self.weights_for(name, config, "target", variant)

        def search(directory: Path) -> dict:
            module = LUNAR(
                lm={"name_or_path": str(target)},
                layer="search",
                search_samples=config["search_samples"],
                generate=False,
            )
            searcher = bare_trainer(
                root=directory, accelerator=self.args.accelerator, max_steps=0, precision=config["precision"]
            )
            searcher.fit(module, self.forget_retain_data(source, seed=0))
            return module.layer_search

        self.progress(name, config)
        return self.cache.run(name, config, search)["selected_layer"]

    def forget_retain_data(self, source: Path, seed: int) -> ForgetRetainDataModule:
        """The unlearning batches; ``seed`` orders them (the models have no dropout, so without it a run's seed
        would change nothing)."""
        return ForgetRetainDataModule(
            seed=seed,
            source=str(source),
            forget_split=self.splits["forget"],
            retain_split=self.splits["retain"],
            eval_splits=[],
            batch_size=MICRO_BATCH,
            max_length=MAX_LENGTH,
            prompt_format="chat",
            refusals=str(source / "idontknow.jsonl"),
        )

    # unlearning
    def unlearn_config(self, variant: str, method: str, setting: Mapping[str, Any], seed: int) -> dict[str, Any]:
        precision = self.precision(variant)
        target, reference = self.stage("finetune", "target", variant), self.stage("eval", "retain", variant)
        config = {
            "target": self.cache.record(target)["config_digest"],
            "evaluation": config_digest(self.evaluate_config(target, reference, precision)),
            "method": method,
            "setting": dict(setting),
            "schedule": "released" if method in OWN_SCHEDULE else "tofu",
            "epochs": self.args.unlearn_epochs or EPOCHS.get(method, UNLEARN_EPOCHS),
            "effective_batch": EFFECTIVE_BATCH,
            "micro_batch": MICRO_BATCH,
            "gradient_clip": UNLEARN_CLIP,
            "seed": seed,
            "precision": precision,
        }
        if adapts_with_lora(variant, method):
            config["evaluated"] = "adapters merged"  # see merge_adapters
        return config

    def unlearn(self, variant: str, method: str, setting: Mapping[str, Any], seed: int) -> dict:
        name = f"unlearn/{variant}/{method}/{setting_name(setting)}/seed{seed}"
        config = self.unlearn_config(variant, method, setting, seed)
        if method == "LUNAR":
            config["layer"] = self.lunar_layer(variant)
        elif method == "RMU" and self.args.tiny:  # RMU's released layer 7 lies past a --quick model's last
            config["layer"] = self.args.tiny["num_layers"] - 1
        target = self.cache.path(self.stage("finetune", "target", variant)) / "model.ckpt"
        reference = self.cache.file(self.stage("eval", "retain", variant), EVAL_FILE)
        source = self.data()
        self.weights_for(name, config, "target", variant)

        def run(directory: Path) -> dict:
            L.seed_everything(seed, workers=True, verbose=False)
            data = self.forget_retain_data(source, seed)
            chosen = {**setting, "layer": config["layer"]} if "layer" in config else setting
            module = build_method(method, target, chosen, variant, steps_per_epoch(source, self.splits["forget"]))
            trainer = self.trainer(
                directory, name, config["epochs"], every=2, clip=config["gradient_clip"], precision=config["precision"]
            )
            began = time.perf_counter()
            trainer.fit(module, data)
            fit_seconds = time.perf_counter() - began
            merge_adapters(module)
            evaluation = self.evaluation(module, directory, reference, config["precision"])
            return {**evaluation, "fit_seconds": fit_seconds, "train_loss": step_losses(trainer)}

        self.progress(name, config)
        return self.cache.run(name, config, run, keep=(EVAL_FILE,))

    def weights_for(self, name: str, config: Mapping[str, Any], role: str, variant: str) -> None:
        """Fine-tune ``role`` again in this checkout if stage ``name`` still has to run and lacks its weights."""
        if not self.cache.done(name, config):
            self.finetune(role, variant, files=True)

    def refuse_other_cpu(self, name: str, variant: str) -> None:
        """Stop before recomputing fine-tune ``name`` for ``variant`` if another kind of CPU made it (unless
        ``--other-cpu``): its bf16 kernels round otherwise, so the recomputation would end in StageNotReproduced after
        the whole fine-tune; and a bf16 LoRA chain, whose checkpoint committed adapters rebuild anywhere, would mix
        two roundings in one sweep. A float32 variant on rebuilt adapters goes on (:meth:`runs_on`)."""
        made_on, here = self.runs_on(variant, name), cpu_kind()
        if not self.args.other_cpu and here not in made_on and ANY_CPU not in made_on:
            restorable = self.cache.restorable(name, (ADAPTERS_FILE,))
            here_too = f"--variants {trained(variant)}{FLOAT32} (float32, on any CPU), " if restorable else ""
            raise SystemExit(
                f"{name}: a stage still to run needs its weights, which this checkout lacks, and it was made on "
                f"{' / '.join(made_on)}, not on this {here}: another kind of CPU's bf16 kernels "
                "round otherwise, so the fine-tune would not give the recorded weights, nor the later stages the "
                f"chain's rounding; run on that kind of machine (or with {here_too}--variants of a chain made on "
                "this one), or pass --other-cpu to try anyway"
            )

    def runs_on(self, variant: str, name: str) -> list[str]:
        """The CPU kinds on which ``variant``'s chain grows from fine-tune ``name``: those that made it
        (:func:`made_on_kinds`), or :data:`ANY_CPU` for a float32 variant whose fine-tune rebuilds from committed
        adapters (bit for bit on any CPU; float32 kernels then differ only in summation order)."""
        if self.precision(variant) == "32-true" and self.cache.restorable(name, (ADAPTERS_FILE,)):
            return [ANY_CPU]
        return made_on_kinds(self.cache.record(name))

    def progress(self, name: str, config: Mapping[str, Any], files: bool = False, restorable: bool = False) -> None:
        if not self.cache.done(name, config):
            state = "running"
        elif not files or self.cache.has_files(name, config):
            state = "cached"
        else:
            state = "rebuilding its files from the kept ones" if restorable else "recomputing its files"
            made_on = made_on_kinds(self.cache.record(name))
            if cpu_kind() not in made_on:
                state += f" (made on {' / '.join(made_on)}; the check at its end stops the run if the weights differ)"
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {state}", flush=True)


def made_on_kinds(record: Mapping[str, Any]) -> list[str]:
    """The CPU kinds that made a fine-tune's weights: the record's, and those of recomputations that gave its
    :data:`REPRODUCED` keys again (a record older than the check lists the differing ones too); a machine text
    older than the kinds reads as :data:`LEGACY_CPU_KINDS` says."""
    reproductions = [
        entry["machine"]
        for entry in record.get("recomputed", [])
        if "restored" not in entry  # adapters rebuild the weights on any CPU: that says nothing of its rounding
        and (shared := [key for key in REPRODUCED if key in entry["result"] and key in record["result"]])
        and first_difference(record["result"], entry["result"], shared) is None
    ]
    kinds = (recorded_cpu_kind(text) for text in (record["machine"], *reproductions))
    return list(dict.fromkeys(LEGACY_CPU_KINDS.get(kind, kind) for kind in kinds))


class Progress(L.Callback):
    """One line every ``every`` optimiser steps (long CPU stages show that they advance), and ``losses``: the
    training loss of every optimiser step, the mean over its micro-batches, which a stage records so that a run
    whose loss moves but whose answers do not can be told from one whose loss never moved."""

    def __init__(self, name: str, every: int = 5) -> None:
        self.name, self.every, self.last = name, every, -1
        self.losses: list[float] = []
        self.window: list[float] = []
        self.step_before_batch = 0

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        self.step_before_batch = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, *_: Any) -> None:
        # Lightning hands over training_step's loss divided by accumulate_grad_batches (also in an epoch's last,
        # shorter window), so the window's mean is taken over the micro-batches it really had
        self.window.append(float(outputs["loss"]) * trainer.accumulate_grad_batches)
        step = trainer.global_step
        if step > self.step_before_batch:  # this micro-batch ended an optimiser step (also in a resumed fit)
            self.losses.append(round(statistics.fmean(self.window), 6))
            self.window = []
        if step % self.every == 0 and step != self.last:
            self.last = step
            total = trainer.estimated_stepping_batches
            print(f"[{time.strftime('%H:%M:%S')}] {self.name}: step {step}/{total}", flush=True)


def step_losses(trainer: L.Trainer) -> list[float]:
    """The loss of every optimiser step of ``trainer``'s fit (its :class:`Progress` callback's trace)."""
    (progress,) = (callback for callback in trainer.callbacks if isinstance(callback, Progress))
    return progress.losses


def answer_probes(module: CausalLMFineTuning, source: Path, forget_split: str, max_new_tokens: int) -> dict[str, float]:
    """The fine-tune's two probes, known before the evaluation stage: the memorisation gate (forget ROUGE-L) and
    what is left of the pretrained model's real-world knowledge (``real_authors`` ROUGE-L, the term that pins
    Model Utility when the fine-tune overwrites it)."""
    return {
        f"{key}_rougeL_probe": rouge_probe(module, source, split, max_new_tokens)
        for key, split in (("forget", forget_split), ("real_authors", "real_authors_perturbed"))
    }


def rouge_probe(module: CausalLMFineTuning, source: Path, split: str, max_new_tokens: int) -> float:
    """Mean ROUGE-L recall of greedy answers (up to ``max_new_tokens``) on ``split``, as the evaluation computes it."""
    records = list(load_qa_split(str(source), split))
    answers = [r["answer"] for r in records]
    samples = encode_pairs(module.tokenizer, [r["question"] for r in records], answers, "chat", MAX_LENGTH)
    _, rouge = greedy_rouge(module.model, module.tokenizer, samples, answers, EVAL_BATCH, max_new_tokens)
    return float(rouge.mean())


def files_digest(directory: Path) -> str:
    """A hash of the JSON files in ``directory`` (names and bytes)."""
    if not directory.is_dir():
        raise SystemExit(f"--tofu: {directory} is not a directory of TOFU's JSON files")
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.json*")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def steps_per_epoch(source: Path, split: str) -> int:
    """Optimiser steps of one epoch over ``split`` at the effective batch (the last one may be partial)."""
    return -(-len(load_qa_split(str(source), split)) // EFFECTIVE_BATCH)


def finetune_module(config: Mapping[str, Any], warmup_steps: int) -> CausalLMFineTuning:
    """The module of a fine-tune stage's ``config``, before training; one warm-up epoch of ``warmup_steps``."""
    return CausalLMFineTuning(
        lm={"name_or_path": config["model"], "lora": config["lora"], "tiny": config["tiny"] or {}},
        lr=config["lr"],
        weight_decay=config["weight_decay"],
        warmup_steps=warmup_steps,
        lr_schedule="linear",
        generate=False,
    )


def adapter_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The LoRA tensors of a peft model's state dict, under their state-dict names (the base weights are the
    pretrained model's: with these they rebuild the fine-tuned model exactly)."""
    return {key: tensor.detach().clone() for key, tensor in model.state_dict().items() if ".lora_" in key}


def load_adapters(model: torch.nn.Module, adapters: Mapping[str, torch.Tensor], path: Path) -> None:
    """Load :func:`adapter_weights` into a peft model of the same configuration; they must fill every adapter."""
    missing, unexpected = model.load_state_dict(adapters, strict=False)
    missing = [key for key in missing if ".lora_" in key]
    if missing or unexpected:
        raise ValueError(
            f"{path}: these adapters do not fit the fine-tune's LoRA configuration (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})"
        )


def adapts_with_lora(variant: str, method: str) -> bool:
    """Whether an unlearning run trains LoRA adapters (the LoRA variant, for the methods that train the model's
    weights; the others keep their own parameters)."""
    return trained(variant) == "lora" and method in ADAPTS_WITH_LORA


def merge_adapters(module: L.LightningModule) -> None:
    """Merge an unlearning run's LoRA adapters into the weights they adapt before its evaluation: the numerical path
    the target's evaluation took (its checkpoint loads merged). The path matters in bf16: NPO lr 1e-5's adapters read
    forget ROUGE-L 1.000 and MU 0.247 unmerged, 0.979 and 0.269 merged. Generation is also about 1.3x faster. TOFU's
    forget.py evaluates its peft model unmerged: the same function, another rounding."""
    if hasattr(module.model, "merge_adapter"):
        module.model.merge_adapter()


def build_method(method: str, target: Path, setting: Mapping[str, Any], variant: str, epoch_steps: int) -> Any:
    """The unlearning module of ``method`` on the target checkpoint with one swept ``setting``; the methods on
    TOFU's schedule warm up for one epoch (``epoch_steps`` optimiser steps)."""
    lm = {"name_or_path": str(target), "lora": LORA if adapts_with_lora(variant, method) else None}
    kwargs: dict[str, Any] = dict(setting)
    if method not in OWN_SCHEDULE:
        kwargs |= {**TOFU_SCHEDULE, "warmup_steps": epoch_steps}
    return METHODS[method](lm=lm, generate=False, **kwargs)


# -- selection and rendering -----------------------------------------------------------------------------


def select(sweep: Mapping[str, dict], target_utility: float) -> tuple[str, bool]:
    """The chosen setting of a sweep (name -> seed-0 metrics) and whether it reached matched utility.

    Eligible: Model Utility >= 0.95 x the target's; among them the highest Forget Quality, and of equal
    Forget Quality the higher Model Utility (the KS p-value on a few dozen truth ratios takes few distinct
    values, so ties are common). With none eligible, the setting of highest Model Utility (flagged).
    """
    eligible = {k: m for k, m in sweep.items() if matches_utility(m, target_utility)}
    if eligible:
        return max(eligible, key=lambda k: (eligible[k]["forget_quality"], eligible[k]["model_utility"])), True
    return max(sweep, key=lambda k: sweep[k]["model_utility"]), False


def matches_utility(run: Mapping[str, Any], target_utility: float) -> bool:
    """Whether a run keeps Model Utility >= 0.95 x the target's (eligible for selection)."""
    return run["model_utility"] >= MATCHED_UTILITY * target_utility


def scientific(value: float, digits: int = 3) -> bool:
    """Whether ``value`` is too small for ``digits`` decimals (a Forget Quality p-value can be 1e-5)."""
    return 0 < abs(value) < 10**-digits


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if scientific(value, digits) else f"{value:.{digits}f}"


def mean_std_of(runs: list[dict], key: str, number: Callable[[float], str] = fmt) -> str:
    """``mean ± std`` of ``key`` over ``runs``; :func:`fmt` writes the std on the mean's scale (0.298 ± 0.000, not
    0.298 ± 1.81e-06)."""
    values = [r[key] for r in runs if r.get(key) is not None]
    if number is fmt and values and not scientific(statistics.fmean(values)):
        number = "{:.3f}".format
    return mean_std(values, number=number)


COLUMNS = {
    "forget_quality": "FQ",
    "model_utility": "MU",
    "forget_rougeL": "forget ROUGE-L",
    "forget_prob": "forget prob",
    "refusal_rate": "refusal",
    "non_answer_rate": "non-answer",
    "fabrication_rate": "fabrication",
    "degenerate_rate": "degenerate",
}

# Model Utility's nine terms (UnlearningEvaluation: prob, ROUGE-L, truth ratio of each non-forget split)
UTILITY_TERMS = [f"{split}_{key}" for split in ("retain", *GENERAL_SPLITS) for key in SUMMARY_KEYS]
SWEEP_TERMS = {"retain_rougeL": "retain ROUGE-L", "real_authors_rougeL": "real_authors ROUGE-L"}
DEGENERATE_SHARE = 0.5  # of the forget answers: a setting drawn hollow in the scatter (collapse, not forgetting)
# The greedy forget answers' mean length: ROUGE-L recall against TOFU's short references grows with the length of an
# answer, so a method that stops its answers from ending gains real_authors ROUGE-L and, through it, MU.
ANSWER_CHARS, ANSWER_COLUMN = "forget_answer_chars", "forget answer (chars)"


def run_protocol(protocol: Protocol, variants: list[str], methods: list[str], phase: str) -> None:
    """Run every stage up to ``phase`` that is not cached yet (the selection of the seeds phase is
    :func:`cached_state`'s, the same one the report shows)."""
    stop = PHASES.index(phase)
    protocol.base()
    for variant in variants:
        protocol.finetune("target", variant)
    if stop < PHASES.index("finetune"):
        return
    for variant in variants:
        protocol.finetune("retain", variant)
    if stop < PHASES.index("evaluate"):
        return
    for variant, role in itertools.product(variants, ("retain", "target")):
        protocol.evaluate_model(role, variant)
    if stop < PHASES.index("sweep"):
        return
    failed = [v for v in variants if protocol.evaluate_model("target", v)["forget_rougeL"] < MEMORISATION_GATE]
    if failed and not protocol.args.ignore_gate:
        print(
            f"the target ({', '.join(failed)}) failed the memorisation gate (forget ROUGE-L recall < "
            f"{MEMORISATION_GATE}): no unlearning runs; raise --finetune-lr[-lora] / --finetune-epochs[-lora], or "
            "--ignore-gate",
            flush=True,
        )
        return
    for variant, method in itertools.product(variants, methods):
        for setting in run_order(sweep(method, variant)):
            protocol.unlearn(variant, method, setting, SWEEP_SEED)
    if stop < PHASES.index("seeds"):
        return
    chosen = {
        (variant, method): next(s for s in sweep(method, variant) if setting_name(s) == name)
        for (variant, method), (name, _) in cached_state(protocol, variants, methods)["chosen"].items()
    }
    for seed in TEST_SEEDS:  # seed by seed: a run cut short leaves every method at the same seeds
        for (variant, method), setting in chosen.items():
            protocol.unlearn(variant, method, setting, seed)


def cached_state(protocol: Protocol, variants: list[str], methods: list[str]) -> dict[str, Any]:
    """Whatever stages are cached, read without computing anything."""
    cache = protocol.cache
    state: dict[str, Any] = {"finetune": {}, "eval": {}, "sweep": {}, "seeds": {}, "chosen": {}, "runs_on": {}}

    def stored(name: str) -> Any:
        record = cache.record(name)
        return record["result"] if record else None

    def stored_run(name: str) -> Any:
        """An unlearning run's result with its forget answers' mean length (records without the answers: none)."""
        if (result := stored(name)) is None:
            return None
        path = cache.file(name, EVAL_FILE)
        answers = json.loads(path.read_text())["per_sample"].get("forget_answers") if path.is_file() else None
        return {**result, ANSWER_CHARS: statistics.fmean(map(len, answers)) if answers else None}

    for variant in variants:
        for role in ("retain", "target"):
            if record := cache.record(protocol.stage("finetune", role, variant)):
                state["finetune"][role, variant] = record
            if result := stored(protocol.stage("eval", role, variant)):
                state["eval"][role, variant] = result
        if ("target", variant) in state["finetune"]:
            state["runs_on"][variant] = protocol.runs_on(variant, protocol.stage("finetune", "target", variant))
    for variant, method in itertools.product(variants, methods):
        settings = sweep(method, variant)
        runs = {
            setting_name(s): r
            for s in settings
            if (r := stored_run(f"unlearn/{variant}/{method}/{setting_name(s)}/seed{SWEEP_SEED}"))
        }
        # LUNAR's cost includes its one layer search (shared by all its runs on this target)
        search_seconds = (stored(f"lunar-layer/{variant}") or {}).get("seconds", 0.0) if method == "LUNAR" else 0.0
        runs = {k: {**r, "fit_seconds": r["fit_seconds"] + search_seconds} for k, r in runs.items()}
        if runs:
            state["sweep"][variant, method] = runs
        target = state["eval"].get(("target", variant))
        if target and len(runs) == len(settings):
            chosen, matched = select(runs, target["model_utility"])
            state["chosen"][variant, method] = (chosen, matched)
            seeds = [r for k in TEST_SEEDS if (r := stored_run(f"unlearn/{variant}/{method}/{chosen}/seed{k}"))]
            state["seeds"][variant, method] = [{**r, "fit_seconds": r["fit_seconds"] + search_seconds} for r in seeds]
    return state


def scatter(state: dict[str, Any], variants: list[str], path: Path) -> str:
    """Forget Quality against Model Utility of every swept setting (seed 0), one marker per method and one panel per
    variant with a sweep result, written to ``path`` (PNG); the markdown that shows it, or nothing before the first."""
    plotted = [v for v in variants if any(swept_variant == v for swept_variant, _ in state["sweep"])]
    if not plotted:
        return ""
    figure, axes = new_figure(ncols=len(plotted), figsize=(6.5 * len(plotted), 4.8), squeeze=False)
    for ax, variant in zip(axes[0], plotted, strict=True):
        for (swept_variant, method), swept in state["sweep"].items():
            if swept_variant == variant:
                runs = list(swept.values())
                colour = ax.scatter([], [], label=method, s=22).get_facecolor()[0]
                ax.scatter(
                    [r["model_utility"] for r in runs],
                    [r["forget_quality"] for r in runs],
                    s=22,
                    facecolors=["none" if degenerate(r) else colour for r in runs],
                    edgecolors=[colour] * len(runs),
                )
        if target := state["eval"].get(("target", variant)):
            ax.axvline(MATCHED_UTILITY * target["model_utility"], color="grey", ls="--", lw=1)
            ax.scatter([target["model_utility"]], [target["forget_quality"]], marker="*", s=160, c="k", label="target")
        if retain := state["eval"].get(("retain", variant)):
            ax.scatter([retain["model_utility"]], [1.0], marker="P", s=110, c="tab:green", label="retain model")
        ax.set_yscale("log")
        ax.set_xlabel("Model Utility")
        ax.set_ylabel("Forget Quality (KS p-value)")
        ax.set_title(f"{chain_title(variant)}: every swept setting, seed {SWEEP_SEED}", fontsize=9)
        ax.legend(fontsize=7, ncols=2)
    save_png(figure, path)
    return (
        f"### Forget Quality against Model Utility\n\n![FQ vs MU of every swept setting]({path.name})\n\n"
        f"Dashed: {MATCHED_UTILITY} x the target's Model Utility (settings to its right are eligible). Hollow: at "
        f"least {DEGENERATE_SHARE:.0%} of the forget answers are degenerate fabrications (loops, seq-rep-4 >= 0.5), "
        "a collapse the KS test on truth ratios can score as forgetting (settings recorded before the rate: filled)."
    )


def chain_title(variant: str) -> str:
    """A chain's name for a figure: a float32 variant shares its base variant's fine-tunes."""
    if variant.endswith(FLOAT32):
        return f"{trained(variant)} fine-tuning, unlearned and evaluated in float32"
    return f"{variant} fine-tuning"


def degenerate(run: Mapping[str, Any]) -> bool:
    """Whether at least :data:`DEGENERATE_SHARE` of a run's forget answers are degenerate (a record without the
    rate: no)."""
    return (run.get("degenerate_rate") or 0.0) >= DEGENERATE_SHARE


def render(protocol: Protocol, state: dict[str, Any], variants: list[str], methods: list[str]) -> str:
    args = protocol.args
    sections = [header(args)]
    sections.append(render_finetune(protocol))
    sections.append(render_methods(state, variants, methods))
    sections.append(render_sweep(state))
    sections.append(scatter(state, variants, args.output.with_name(f"unlearning_{args.protocol}_fq_mu.png")))
    sections.append(render_pending(state, variants, methods))
    sections.append(reading(args.records))
    return "\n\n".join(part for part in sections if part)


def reading(records: Path | None) -> str:
    """The hand-written reading kept beside the committed records (``READING.md``): it survives a rerender."""
    path = records / READING_FILE if records is not None else None
    if path is None or not path.is_file():
        return ""
    return f"### Reading (written by hand, kept in `{path.relative_to(REPO_ROOT)}`)\n\n{path.read_text().strip()}"


def header(args: argparse.Namespace) -> str:
    scale = (
        "**TOFU-20** (the CPU default): the 2 authors of `forget01` and 18 retain authors (authors 0-17 of "
        "`retain_perturbed`), 400 QA pairs for the target, 360 for the retain model; unlearning `forget01` (40 "
        "records); evaluation on all 40 `forget01_perturbed` records, the 18 authors' 360 `retain_perturbed` records, "
        "all 100 `real_authors` and 117 `world_facts`."
        if args.protocol == "tofu20"
        else "**TOFU full**: target on `full`, retain model on `retain95`, unlearning `forget05`, all 817 evaluation "
        "records."
    )
    return f"""## TOFU protocol on `{args.model}`{" (quick smoke run on a tiny model)" if args.tiny else ""}

{scale}

Precision: {args.precision} (TOFU trains and evaluates in bf16; autocast keeps fp32 master weights). A `-fp32`
variant (`lora-fp32`) unlearns and evaluates the same fine-tuned target in float32, against the same retain-model
evaluation (the FQ reference): the chain a CPU without fast bf16 can grow; its target's float32 evaluation sits
beside the bf16 one in the fine-tune table, which shows what the evaluation's precision alone moves.
Fine-tuning (TOFU's recipe): {args.finetune_epochs} epochs (LoRA {args.finetune_epochs_lora}), effective batch
{EFFECTIVE_BATCH} ({MICRO_BATCH} x {EFFECTIVE_BATCH // MICRO_BATCH} accumulated), AdamW weight decay 0.01, one warm-up
epoch then linear decay, lr {args.finetune_lr} (full) / {args.finetune_lr_lora} (LoRA as TOFU's: {adapter(LORA)},
dropout {LORA["lora_dropout"]}), chat template. Memorisation gate: the target's forget ROUGE-L recall >=
{MEMORISATION_GATE}. Unlearning:
{UNLEARN_EPOCHS} epochs (LUNAR: its released 20), effective batch {EFFECTIVE_BATCH} ({MICRO_BATCH} forget +
{MICRO_BATCH} retain per micro batch), one warm-up epoch then linear decay for the methods that train the model (LUNAR
and Attention-Shifting keep their released optimisers), lr swept over {list(LRS)} (through LoRA adapters
{list(LORA_LRS)}: the lower grid barely moves the LoRA target; SimNPO also beta in {list(SIMNPO_BETAS)}, gamma in
{list(SIMNPO_GAMMAS)}; LUNAR and Attention-Shifting around their released lr) on seed {SWEEP_SEED}; the chosen
setting (Model Utility >= {MATCHED_UTILITY} x the target's, then the highest Forget Quality on seed {SWEEP_SEED}, ties
to the higher Model Utility) is rerun on seeds {", ".join(map(str, TEST_SEEDS))}, which report the mean ± std.
Evaluation: `UnlearningEvaluation`, greedy answers of up to {args.max_new_tokens} new tokens, ROUGE-L recall with
Porter stemming (`rouge-score`), Forget Quality = KS-test p-value of the forget truth ratios against the retain
model's (sample sizes next to it); refusal = an answer matching TOFU's refusal phrasings; non-answer = a wholly
contentless answer ("Nobody knows.", empty); fabrication = none of these and not correct (ROUGE-L recall < 0.5): a
hallucinated fact or degenerate text; degenerate = the fabrications that loop (seq-rep-4 >= 0.5, Welleck et al. 2020),
so fabrication - degenerate is the fluent ones ("-": a record made before this share was measured)."""


def render_finetune(protocol: Protocol) -> str:
    """The untuned model and every fine-tuned model in the cache (each learning rate tried), with its evaluation
    where there is one."""
    directory = protocol.cache.record_directory("finetune")  # the committed records: a new checkout has no files
    names = sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) if directory.is_dir() else []
    rows = []
    if base := protocol.cache.record("base"):
        rows.append(finetune_row("untuned", base, None))
    for name in names:
        if record := protocol.cache.record(f"finetune/{name}"):
            rows.append(finetune_row(name, record, protocol.cache.record(f"eval/{name}")))
            if in_float32 := protocol.cache.record(f"eval/{name}{FLOAT32}"):
                rows.append(finetune_row(f"{name}, evaluated in float32", record, in_float32))
    if not rows:
        return ""
    header_row = [
        "model",
        "trains",
        "fine-tune (s)",
        "forget ROUGE-L (probe)",
        "real_authors ROUGE-L (probe)",
        "forget ROUGE-L",
        "forget prob",
        "real_authors ROUGE-L",
        "MU",
        "retain ROUGE-L",
        "gate",
        "machine",
    ]
    return (
        "### Fine-tuned models\n\nThe untuned model and every learning rate tried; the probes are greedy ROUGE-L "
        "recall on the forget split and on `real_authors`, measured at the end of the fine-tune (before the "
        'evaluation stage), the other columns the evaluation\'s ("evaluated in float32": the same weights, the '
        "float32 variant's evaluation). The gate reads the evaluation's forget ROUGE-L "
        "where there is one, else the probe's. The machine is the fine-tune's, and the evaluation's where that ran on "
        "another.\n\n" + table(header_row, rows)
    )


def finetune_row(name: str, record: Mapping[str, Any], evaluation_record: Mapping[str, Any] | None) -> list[str]:
    """One row of the fine-tune table from a fine-tune (or the ``base``) stage record: its probes, its evaluation
    stage's results (if any), the gate (targets only) and the machines (the evaluation's too where it ran on
    another)."""
    probes, seconds = record["result"], record["result"].get("train_seconds")
    evaluation = evaluation_record["result"] if evaluation_record else {}
    machine = record["machine"]
    if evaluation_record and evaluation_record["machine"] != machine:
        machine += f"; evaluated on {evaluation_record['machine']}"
    rouge = evaluation.get("forget_rougeL", probes.get("forget_rougeL_probe"))
    gate = (
        "-"
        if not name.startswith("target") or rouge is None
        else ("passed" if rouge >= MEMORISATION_GATE else "**failed**")
    )
    evaluated = ("forget_rougeL", "forget_prob", "real_authors_rougeL", "model_utility", "retain_rougeL")
    return [
        name,
        adapter(record["config"]["lora"]) if "lora" in record["config"] else "-",
        "-" if seconds is None else f"{seconds:.0f}",
        fmt(probes.get("forget_rougeL_probe")),
        fmt(probes.get("real_authors_rougeL_probe")),
        *(fmt(evaluation.get(k)) for k in evaluated),
        gate,
        machine,
    ]


def adapter(lora: Mapping[str, Any] | None) -> str:
    """What a fine-tune trains, from its stage configuration's ``lora``: every weight, or which LoRA adapters (the
    record keeps its own, so an attempt under an earlier LoRA configuration still reads right)."""
    if lora is None:
        return "all weights"
    modules = lora["target_modules"]
    where = modules if isinstance(modules, str) else "/".join(m.removesuffix("_proj") for m in modules)
    return f"LoRA r {lora['r']}, alpha {lora['lora_alpha']}, {where}"


def render_methods(state: dict[str, Any], variants: list[str], methods: list[str]) -> str:
    rows = []
    for variant, method in itertools.product(variants, methods):
        sweep = state["sweep"].get((variant, method))
        if not sweep:
            continue
        chosen = state["chosen"].get((variant, method))
        runs = state["seeds"].get((variant, method), [])
        label = chosen[0] + ("" if chosen[1] else " (MU not matched)") if chosen else f"sweep {len(sweep)} done"
        rows.append(
            [
                f"{method} ({variant})",
                label,
                f"{len(runs)}",
                *(mean_std_of(runs, key) for key in (*COLUMNS, *SWEEP_TERMS)),
                mean_std_of(runs, ANSWER_CHARS, number="{:.0f}".format),
                mean_std_of(runs, "fit_seconds", number="{:.0f}".format),  # whole seconds, as the sweep table
            ]
        )
    if not rows:
        return ""
    sizes = next(
        (f"{r['forget_quality_n']} vs {r['forget_quality_reference_n']}" for s in state["seeds"].values() for r in s),
        None,
    )
    note = f"KS sample sizes of Forget Quality: {sizes} truth ratios (unlearned vs retain model).\n\n" if sizes else ""
    return (
        "### Methods at matched utility\n\n"
        + note
        + table(
            ["method", "chosen setting", "seeds", *COLUMNS.values(), *SWEEP_TERMS.values(), ANSWER_COLUMN, "fit (s)"],
            rows,
        )
        + lunar_wall_time(state, variants)
    )


def render_sweep(state: dict[str, Any]) -> str:
    """Every swept setting's seed-0 metrics, and whether it reaches matched utility (the selection's input), with
    the two Model Utility terms that unlearning moves most beside MU."""
    rows = []
    for (variant, method), sweep in state["sweep"].items():
        target = state["eval"].get(("target", variant))
        for setting, result in sweep.items():
            eligible = "-" if target is None else ("yes" if matches_utility(result, target["model_utility"]) else "no")
            metrics = [fmt(result.get(key)) for key in (*COLUMNS, *SWEEP_TERMS)]
            chars = mean_std_of([result], ANSWER_CHARS, number="{:.0f}".format)
            rows.append([f"{method} ({variant})", setting, *metrics, chars, eligible, f"{result['fit_seconds']:.0f}"])
    if not rows:
        return ""
    targets = {v: state["eval"][("target", v)] for v, _ in state["sweep"] if ("target", v) in state["eval"]}
    return (
        f"### Sweep (seed {SWEEP_SEED})\n\nEvery setting run so far; eligible: Model Utility >= "
        f"{MATCHED_UTILITY} x the target's. Retain and real_authors ROUGE-L are two of MU's nine terms (a harmonic "
        "mean, so its smallest terms weigh most); ROUGE-L recall grows with an answer's length, which the greedy "
        "forget answers' mean length shows (- where a record predates the saved answers)."
        + "".join(utility_margin(variant, target) for variant, target in targets.items())
        + "\n\n"
        + table(
            ["method", "setting", *COLUMNS.values(), *SWEEP_TERMS.values(), ANSWER_COLUMN, "eligible", "fit (s)"], rows
        )
    )


def utility_margin(variant: str, target: Mapping[str, float]) -> str:
    """How low real_authors ROUGE-L alone may fall before a run leaves matched utility, as a sentence (none when a
    term of the target's MU is 0, as a --quick model's: MU is then 0 and no single term can lower it)."""
    if not all(target[key] for key in UTILITY_TERMS):
        return ""
    floor = term_at_threshold(target, "real_authors_rougeL", MATCHED_UTILITY * target["model_utility"])
    return (
        f" A real_authors ROUGE-L below {floor:.3f} alone (the {variant} target's is "
        f"{target['real_authors_rougeL']:.3f}, its other eight terms kept) takes MU under the threshold."
    )


def term_at_threshold(target: Mapping[str, float], term: str, threshold: float) -> float:
    """The value of one Model Utility term that alone brings the target's MU down to ``threshold``, the other terms
    x_k kept: MU = n / sum_k 1/x_k, so 1/v = n/threshold - sum_{k != term} 1/x_k."""
    others = sum(1 / target[key] for key in UTILITY_TERMS if key != term)
    return 1 / (len(UTILITY_TERMS) / threshold - others)


def lunar_wall_time(state: dict[str, Any], variants: list[str]) -> str:
    """LUNAR's fit time (its layer search included) against SimNPO's at their chosen settings (target <= 0.2x)."""
    lines = []
    for variant in variants:
        lunar, simnpo = state["seeds"].get((variant, "LUNAR")), state["seeds"].get((variant, "SimNPO"))
        if lunar and simnpo:
            ratio = statistics.fmean(r["fit_seconds"] for r in lunar) / statistics.fmean(
                r["fit_seconds"] for r in simnpo
            )
            verdict = "met" if ratio <= 0.2 else "missed"
            lines.append(f"\n\n**LUNAR wall time ({variant})**: {ratio:.2f}x SimNPO's (target <= 0.2x, {verdict}).")
    return "".join(lines)


def render_pending(state: dict[str, Any], variants: list[str], methods: list[str]) -> str:
    """The stages not cached yet, per variant, with the CPU kinds that can run them (:meth:`Protocol.runs_on`)."""
    lines = []
    for variant in variants:
        missing = [f"fine-tune {r}" for r in ("target", "retain") if (r, variant) not in state["finetune"]]
        missing += [f"evaluate {r}" for r in ("target", "retain") if (r, variant) not in state["eval"]]
        for method in methods:
            done, planned = len(state["sweep"].get((variant, method), {})), len(sweep(method, variant))
            if done < planned:
                missing.append(f"{method} sweep {done}/{planned}")
            elif (seeds := len(state["seeds"].get((variant, method), []))) < len(TEST_SEEDS):
                missing.append(f"{method} seeds {seeds}/{len(TEST_SEEDS)}")
        if missing:
            kinds = state["runs_on"].get(variant)
            where = f", on {' or '.join(kinds)} (`--variants {variant}`)" if kinds else ""
            lines.append(f"- {variant}{where}: " + "; ".join(missing))
    if not lines:
        return ""
    return "### Not yet run\n\nThese stages are not cached yet (the run resumes them):\n\n" + "\n".join(lines)


def reported_variants(protocol: Protocol, variants: list[str]) -> list[str]:
    """The variants the report shows: the run's own and every other one with its first stage on record (the target's
    fine-tune; a float32 variant's: its target evaluation), so a run of one variant does not drop the other's rows from
    the document it rewrites (which always lists every method)."""
    first = {v: protocol.stage("eval" if v.endswith(FLOAT32) else "finetune", "target", v) for v in VARIANTS}
    return [v for v in VARIANTS if v in variants or protocol.cache.record(first[v]) is not None]


def protocol_section(args: argparse.Namespace) -> str:
    protocol = Protocol(args)
    variants, methods = comma_list(args.variants), comma_list(args.methods)
    if not args.render_only:
        run_protocol(protocol, variants, methods, args.phase)
    shown, every = reported_variants(protocol, variants), list(METHODS)
    return render(protocol, cached_state(protocol, shown, every), shown, every)


SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {"protocol": protocol_section}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", choices=("tofu20", "full"), default="tofu20", help="TOFU-20 (CPU) or full TOFU")
    parser.add_argument("--phase", choices=PHASES, default="seeds", help="run stages up to this phase (default all)")
    parser.add_argument("--render-only", action="store_true", help="render the cached stages, compute nothing")
    parser.add_argument("--ignore-gate", action="store_true", help="unlearn even a target that failed the gate")
    parser.add_argument(
        "--other-cpu", action="store_true", help="recompute a fine-tune made on another kind of CPU (default: stop)"
    )
    parser.add_argument("--accelerator", default="auto", help="Lightning accelerator of every stage (default auto)")
    parser.add_argument(
        "--variants",
        default="full",
        help="comma-separated from full,lora,full-fp32,lora-fp32 (-fp32: unlearn and evaluate that variant's target "
        "in float32; default full)",
    )
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods")
    parser.add_argument("--model", default=SMOLLM2_NAME, help="the pretrained model (default smollm2-135m-instruct)")
    parser.add_argument(
        "--finetune-lr",
        type=float,
        default=5e-4,
        help="full fine-tuning lr (default 5e-4: the lowest that passes the gate)",
    )
    parser.add_argument(
        "--finetune-lr-lora",
        type=float,
        default=3e-3,
        help="LoRA fine-tuning lr (default 3e-3: the lowest tried that passes the gate in 10 epochs)",
    )
    parser.add_argument("--finetune-epochs", type=int, default=FINETUNE_EPOCHS, help="full fine-tuning epochs")
    parser.add_argument(
        "--finetune-epochs-lora",
        type=int,
        default=FINETUNE_EPOCHS_LORA,
        help=f"LoRA fine-tuning epochs (default {FINETUNE_EPOCHS_LORA}, TOFU's LoRA config)",
    )
    parser.add_argument("--unlearn-epochs", type=int, help="override every method's epochs (smoke runs)")
    parser.add_argument("--eval-samples", type=int, help="records per evaluation split (default all)")
    parser.add_argument("--tofu", type=Path, default=TOFU, help="directory of TOFU's JSON Lines files")
    parser.add_argument("--precision", choices=PRECISIONS, default="bf16-mixed", help="default bf16-mixed, as TOFU")
    parser.add_argument(
        "--records", type=Path, help="committed stage records (default benchmarks/results/unlearning/<protocol>)"
    )


def finish_arguments(args: argparse.Namespace) -> None:
    """``--quick``: a tiny model from config, 1 epoch, 8 records per split, answers of up to 16 new tokens, its own
    work directory."""
    args.tiny, args.max_new_tokens = None, TOFU_MAX_NEW_TOKENS
    if args.quick:
        args.tiny = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "max_positions": 512}
        args.model, args.finetune_epochs, args.finetune_epochs_lora, args.unlearn_epochs = "tiny-llama", 1, 1, 1
        args.eval_samples, args.max_new_tokens = args.eval_samples or 8, QUICK_MAX_NEW_TOKENS
    default = REPO_ROOT / "runs" / "benchmarks" / "unlearning"
    if args.workdir == default:
        args.workdir = default / (args.protocol + ("-quick" if args.quick else ""))
    if args.records is None and not args.quick:  # a quick run's records stay in its work directory
        args.records = REPO_ROOT / "benchmarks" / "results" / "unlearning" / args.protocol
    for option in ("eval_samples", "unlearn_epochs", "finetune_epochs", "finetune_epochs_lora"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise SystemExit(f"--{option.replace('_', '-')}: must be a positive integer, got {value}")
    for option in ("finetune_lr", "finetune_lr_lora"):
        if not getattr(args, option) > 0:
            raise SystemExit(f"--{option.replace('_', '-')}: must be positive, got {getattr(args, option)}")
    for variant in comma_list(args.variants):
        if variant not in VARIANTS:
            raise SystemExit(f"--variants: unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
        if variant.endswith(FLOAT32) and args.precision == "32-true":
            raise SystemExit(
                f"--variants {variant} with --precision 32-true: the {trained(variant)} chain is then float32 "
                f"already; use --variants {trained(variant)}"
            )
    for method in comma_list(args.methods):
        if method not in METHODS:
            raise SystemExit(f"--methods: unknown method {method!r}; choose from {', '.join(METHODS)}")
    torch.set_num_threads(args.threads)
