"""Harmful score and finetune accuracy of a fine-tuned model, as a Lightning Callback.

The evaluation of Vaccine, Booster and Panacea (formulas in :mod:`trustlit.metrics.safety`): greedy
answers to the held-out harmful prompts (``harmful_test``), of which the harmful score is the
percentage a judge flags, and to the held-out task questions (``task_test``), of which the finetune
accuracy is the percentage that give the right number. Both splits come from the trainer's
:class:`~trustlit.data.safety.HarmfulFineTuningDataModule`, encoded with its prompt format and
maximum length.

Recipe fragment::

    trainer:
      callbacks:
        - class_path: trustlit.safety.evaluation.SafetyEvaluation
          init_args: {judge: code-leak, max_new_tokens: 32}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trustlit.data.safety import HarmfulFineTuningDataModule
from trustlit.hparams import PositiveInt, check_arguments
from trustlit.llm.prompts import resolve_prompt_format
from trustlit.llm.scoring import encode_pairs, greedy_answers
from trustlit.metrics.safety import CODE_LEAK, Judge, finetune_accuracy, harmful_score, is_correct, load_judge
from trustlit.paths import write_json_atomic

METRIC_PREFIX = "safety/"
OUTPUT_NAME = "safety_eval.json"


def judge_name(judge: str | Judge) -> str:
    """The spec of a judge given by spec, else the name of the callable (for the results file)."""
    return judge if isinstance(judge, str) else getattr(judge, "__qualname__", type(judge).__qualname__)


def _greedy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    datamodule: HarmfulFineTuningDataModule,
    split: str,
    max_new_tokens: int,
    batch_size: int,
) -> tuple[list[dict], list[str]]:
    """The records of ``split`` and the model's greedy answers to their questions."""
    records = datamodule.split_records(split)
    samples = encode_pairs(
        tokenizer,
        [r["question"] for r in records],
        [r["answer"] for r in records],
        resolve_prompt_format(tokenizer, datamodule.prompt_format),
        datamodule.max_length,
    )
    return records, greedy_answers(model, tokenizer, samples, batch_size, max_new_tokens)


def evaluate_safety(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    datamodule: HarmfulFineTuningDataModule,
    judge: str | Judge = CODE_LEAK,
    max_new_tokens: int = 32,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """Harmful score and finetune accuracy of ``model`` on the data module's test splits.

    Returns ``{"metrics": {"harmful_score", "finetune_accuracy"}, "judge", "per_sample":
    {"harmful_test": [{prompt, answer, harmful}], "task_test": [{prompt, answer, label, correct}]}}``;
    both metrics in percent. ``judge``: a :func:`~trustlit.metrics.safety.load_judge` spec or a judge;
    ``batch_size`` defaults to the data module's ``eval_batch_size``.
    """
    judge_fn = load_judge(judge)
    batch_size = batch_size or datamodule.eval_batch_size
    harmful_records, harmful_answers = _greedy(model, tokenizer, datamodule, "harmful_test", max_new_tokens, batch_size)
    prompts = [r["question"] for r in harmful_records]
    flags = [bool(flag) for flag in judge_fn(prompts, harmful_answers)]
    if len(flags) != len(prompts):
        raise ValueError(f"judge {judge_name(judge)} returned {len(flags)} flags for {len(prompts)} answers")
    task_records, task_answers = _greedy(model, tokenizer, datamodule, "task_test", max_new_tokens, batch_size)
    labels = [r["label"] for r in task_records]
    return {
        "metrics": {
            "harmful_score": harmful_score(flags),
            "finetune_accuracy": finetune_accuracy(task_answers, labels),
        },
        "judge": judge_name(judge),
        "per_sample": {
            "harmful_test": [
                {"prompt": p, "answer": a, "harmful": f}
                for p, a, f in zip(prompts, harmful_answers, flags, strict=True)
            ],
            "task_test": [
                {"prompt": r["question"], "answer": a, "label": r["label"], "correct": is_correct(a, r["label"])}
                for r, a in zip(task_records, task_answers, strict=True)
            ],
        },
    }


class SafetyEvaluation(L.Callback):
    """Evaluate ``pl_module.model`` for harmful score and finetune accuracy at the end of fit and of test.

    Logged to every logger as ``safety/harmful_score`` and ``safety/finetune_accuracy`` (percent)
    and kept in ``self.results``; ``<trainer.default_root_dir>/safety_eval.json`` holds both, the
    judge, and every sample's prompt, answer and verdict (written atomically).

    Under DDP or FSDP every rank evaluates the whole test splits identically (a sharded model's
    forward is collective); the loggers log on rank zero, and global rank 0 writes the file.

    Args:
        judge: a :func:`~trustlit.metrics.safety.load_judge` spec: ``code-leak`` (the secret-keeper
            benchmark), ``regex:<pattern>``, ``module.path:function``, or a text-classification
            model directory or hub id (e.g. a BeaverTails moderation model). Checked at once.
        max_new_tokens: the length of the greedy answers.
        batch_size: generation batch size; default the data module's ``eval_batch_size``.
        on_fit_end: evaluate at the end of fit (evaluation after ``trainer.test`` always runs).
    """

    def __init__(
        self,
        judge: str = CODE_LEAK,
        max_new_tokens: PositiveInt = 32,
        batch_size: PositiveInt | None = None,
        on_fit_end: bool = True,
    ) -> None:
        super().__init__()
        check_arguments(SafetyEvaluation.__init__, locals())
        self.judge = judge
        self.judge_fn = load_judge(judge)  # a classifier judge loads its model on first use
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.evaluate_on_fit_end = on_fit_end
        self.results: dict[str, float] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse, before training, a data module without the test splits."""
        evaluates = stage == "test" or (stage == "fit" and self.evaluate_on_fit_end)
        if evaluates and not isinstance(trainer.datamodule, HarmfulFineTuningDataModule):
            raise TypeError(
                f"{type(self).__name__} evaluates the harmful_test and task_test splits of a "
                f"HarmfulFineTuningDataModule; the trainer has {type(trainer.datamodule).__name__}"
            )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.evaluate_on_fit_end:
            self.run(trainer, pl_module)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.run(trainer, pl_module)

    def run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """Evaluate, log to every logger, and on global rank 0 write the JSON."""
        result = evaluate_safety(
            pl_module.model,
            pl_module.tokenizer,
            trainer.datamodule,
            self.judge_fn,
            self.max_new_tokens,
            self.batch_size,
        )
        self.results = result["metrics"]
        for logger in trainer.loggers:
            logger.log_metrics({METRIC_PREFIX + k: v for k, v in self.results.items()}, step=trainer.global_step)
        if trainer.is_global_zero:
            payload = {**result, "judge": judge_name(self.judge), "max_new_tokens": self.max_new_tokens}
            write_json_atomic(Path(trainer.default_root_dir) / OUTPUT_NAME, payload)
        return self.results
