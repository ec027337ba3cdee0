"""TOFU and MUSE evaluation of an unlearned model, as a Lightning Callback.

TOFU (Maini et al., 2024, arXiv 2401.06121; formulas in :mod:`trustlit.metrics.tofu`) and MUSE
(Shi et al., 2024, arXiv 2407.06460; formulas in :mod:`trustlit.metrics.muse`). Two of the numbers
compare the unlearned model with the *retain model* (trained without the forget set):

- ``forget_quality`` = KS-test p-value between the forget-split truth ratios R of the two models,
  reported with the test's two sample sizes ``forget_quality_n`` (this model's forget records) and
  ``forget_quality_reference_n`` (the retain model's); a warning says when they differ (e.g. one of
  the two runs was cut by ``max_samples``), since TOFU compares the same full forget split;
- ``privleak`` = 100 * (AUC - AUC_retain) / AUC_retain, AUC the Min-K% membership AUC of forget
  against holdout records.

So the protocol is: evaluate the retain model once with this callback (it writes
``unlearning_eval.json``, which holds the per-sample truth ratios and the AUC), then evaluate
every unlearned model with ``reference=`` that file. Without a reference both are left out.

Recipe fragment (TOFU)::

    trainer:
      callbacks:
        - class_path: trustlit.unlearning.evaluation.UnlearningEvaluation
          init_args: {forget_split: forget05_perturbed, reference: runs/retain95/unlearning_eval.json}

Notes: docs/methods/tofu_evaluation.md
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn
from rich.console import Console
from rich.table import Table

from trustlit.callbacks import ResultsTable
from trustlit.data.qa import FictitiousConfig, QADataModule, QARecords, load_qa_split
from trustlit.hparams import PositiveInt, check_arguments
from trustlit.llm.prompts import resolve_prompt_format
from trustlit.llm.scoring import pairs_nll
from trustlit.metrics.muse import MIN_K, knowmem, min_k_scores, privleak, privleak_auc, verbmem_scores
from trustlit.metrics.tofu import (
    TOFU_MAX_NEW_TOKENS,
    SplitScores,
    answer_rates,
    forget_quality,
    model_utility,
    perturbed_answers,
    score_split,
    summarise_split,
)
from trustlit.paths import write_json_atomic

TRIGGERS = ("fit_end", "test")
METRIC_PREFIX = "unlearn/"
OUTPUT_NAME = "unlearning_eval.json"
GENERAL_SPLITS = ("real_authors", "world_facts")  # TOFU's general-knowledge splits
FORGET_RATIO_KEY = "per_sample.forget_truth_ratio"  # what a reference must hold, as dotted paths
AUC_KEY = "metrics.minkprob_auc"


@dataclass(frozen=True)
class _Data:
    """Where the records come from and how they are encoded."""

    source: str
    fictitious: FictitiousConfig | None
    prompt_format: str
    max_length: int


def tofu_summary(scores: Mapping[str, SplitScores]) -> dict[str, float]:
    """``{split}_prob``, ``{split}_rougeL``, ``{split}_truth_ratio`` of each TOFU split, and ``model_utility``."""
    summaries = {
        name: summarise_split(split_scores, "general" if name in GENERAL_SPLITS else name)
        for name, split_scores in scores.items()
    }
    results = {f"{name}_{key}": value for name, summary in summaries.items() for key, value in summary.items()}
    results["model_utility"] = model_utility(summary for name, summary in summaries.items() if name != "forget")
    return results


def forget_quality_results(ratios: Sequence[float], reference_ratios: Sequence[float]) -> dict[str, float]:
    """``forget_quality`` and the KS test's sample sizes; warns when the two sizes differ."""
    n, reference_n = len(ratios), len(reference_ratios)
    if n != reference_n:
        rank_zero_warn(
            f"forget_quality: the KS test compares {n} forget truth ratios with the reference's {reference_n}: "
            "the two models were not evaluated on the same forget records (max_samples?), so the p-value is not "
            "TOFU's Forget Quality"
        )
    return {
        "forget_quality": forget_quality(ratios, reference_ratios),
        "forget_quality_n": n,
        "forget_quality_reference_n": reference_n,
    }


def _field(document: Any, dotted: str) -> Any:
    """``document["a"]["b"]`` for ``"a.b"``; None where a level is missing or not a mapping."""
    for key in dotted.split("."):
        document = document.get(key) if isinstance(document, dict) else None
    return document


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def read_reference(path: Path, forget_split: str, holdout_split: str | None) -> dict[str, Any]:
    """Read and check a retain model's evaluation file; every problem is an error naming the path."""
    if not path.is_file():
        raise FileNotFoundError(f"reference file not found: {path} (write it by evaluating the retain model)")
    try:
        reference = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"reference file {path} is not valid JSON: {error}") from error
    splits, ratios = _field(reference, "splits"), _field(reference, FORGET_RATIO_KEY)
    if not isinstance(splits, dict) or not isinstance(ratios, list) or not ratios or not all(map(_number, ratios)):
        raise ValueError(
            f"reference file {path} lacks 'splits' or a non-empty list of numbers '{FORGET_RATIO_KEY}': "
            "is it a file written by UnlearningEvaluation?"
        )
    if splits.get("forget") != forget_split:
        raise ValueError(f"reference file {path} evaluated forget split {splits.get('forget')!r}, not {forget_split!r}")
    auc = _field(reference, AUC_KEY)
    if holdout_split is not None and (splits.get("holdout") != holdout_split or not _number(auc) or auc <= 0):
        raise ValueError(
            f"reference file {path} has no positive '{AUC_KEY}' for holdout split {holdout_split!r} "
            "(PrivLeak needs it): evaluate the retain model with the same holdout_split"
        )
    return reference


class UnlearningEvaluation(ResultsTable, L.Callback):
    """Evaluate ``pl_module.model`` with TOFU's and MUSE's metrics after test and/or at the end of fit.

    Logged to every logger as ``unlearn/<name>`` and kept in ``self.results``:

    - per TOFU split s in {forget, retain, real_authors, world_facts}: ``s_prob``, ``s_rougeL``,
      ``s_truth_ratio`` (summaries of :func:`~trustlit.metrics.tofu.summarise_split`);
    - ``model_utility``: harmonic mean of the non-forget ones; with a reference ``forget_quality`` and
      its KS sample sizes ``forget_quality_n``, ``forget_quality_reference_n``;
    - ``refusal_rate``, ``non_answer_rate``, ``fabrication_rate`` of the greedy forget answers
      (:func:`~trustlit.metrics.tofu.answer_rates`);
    - ``verbmem``, ``knowmem_forget``, ``knowmem_retain``; with a holdout split ``minkprob_auc`` and,
      with a reference, ``privleak``.

    All ranks compute (a sharded model's forward is collective); global rank 0 writes the JSON
    (summary, splits, per-sample forget truth ratios, Min-K% scores and greedy answers) and prints a table.

    Args:
        forget_split, retain_split: TOFU's ``forget05_perturbed`` and ``retain_perturbed`` by default;
            for ``source: fictitious`` use its split names (``forget10``, ``retain90``).
        real_authors_split, world_facts_split: TOFU's general-knowledge splits; ``None`` leaves them
            out (the fictitious corpus has none) and Model Utility averages the rest.
        holdout_split: records the model never trained on, for PrivLeak; ``None``: no PrivLeak.
        reference: the JSON this callback wrote for the retain model; ``None``: no forget quality
            or PrivLeak. Checked at setup, before any training.
        output: where to write the JSON; default ``<trainer.default_root_dir>/unlearning_eval.json``
            (a fixed place, so that later runs can name it as their reference).
        source: data source overriding the DataModule's (then its prompt format and max length
            are still used when the trainer has a :class:`~trustlit.data.QADataModule`).
        on: when to evaluate: ``test`` (after ``trainer.test``) and/or ``fit_end``.
        batch_size, max_new_tokens: evaluation batch size and greedy answer length (TOFU: 200 tokens).
        max_samples: keep the first N records of each split (quick runs; Forget Quality then tests fewer
            truth ratios, and a reference evaluated on a different number is warned about).
        min_k: the k of Min-K% Prob (MUSE: 0.4).
    """

    def __init__(
        self,
        forget_split: str = "forget05_perturbed",
        retain_split: str = "retain_perturbed",
        real_authors_split: str | None = "real_authors_perturbed",
        world_facts_split: str | None = "world_facts_perturbed",
        holdout_split: str | None = None,
        reference: str | None = None,
        output: str | None = None,
        source: str | None = None,
        on: Sequence[str] = ("test",),
        batch_size: PositiveInt = 8,
        max_new_tokens: PositiveInt = TOFU_MAX_NEW_TOKENS,
        max_samples: PositiveInt | None = None,
        min_k: float = MIN_K,
    ) -> None:
        super().__init__()
        check_arguments(UnlearningEvaluation.__init__, locals())
        if not on or any(trigger not in TRIGGERS for trigger in on):
            raise ValueError(f"on must be a non-empty list of {TRIGGERS}, got {on}")
        if not 0 < min_k <= 1:
            raise ValueError(f"min_k must be in (0, 1], got {min_k}")
        self.splits = {
            name: split
            for name, split in {
                "forget": forget_split,
                "retain": retain_split,
                "real_authors": real_authors_split,
                "world_facts": world_facts_split,
                "holdout": holdout_split,
            }.items()
            if split is not None
        }
        self.reference = reference
        self.output = output
        self.source = source
        self.on = tuple(on)
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.max_samples = max_samples
        self.min_k = min_k
        self.results: dict[str, float] = {}
        self._data: _Data | None = None
        self._records: dict[str, QARecords] = {}
        self._reference: dict[str, Any] | None = None

    # ------------------------------------------------------------------ setup: fail before training

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Load every split and the reference now, so that a bad name or file fails before training.

        Only for the stages that evaluate: a fit that leaves evaluation to ``trainer.test`` does
        not need the retain model's reference yet.
        """
        if {"fit": "fit_end", "test": "test"}.get(stage) not in self.on:
            return
        self._data = self._resolve_data(trainer)
        self._records = {name: self._load(split) for name, split in self.splits.items()}
        for name, records in self._records.items():
            if name != "holdout":
                perturbed_answers(records, self.splits[name])
        if self.reference is not None:
            self._reference = read_reference(Path(self.reference), self.splits["forget"], self.splits.get("holdout"))

    def _resolve_data(self, trainer: L.Trainer) -> _Data:
        datamodule = trainer.datamodule
        if isinstance(datamodule, QADataModule):
            return _Data(
                self.source or datamodule.source,
                datamodule.fictitious,
                datamodule.prompt_format,
                datamodule.max_length,
            )
        if self.source is None:
            raise ValueError(
                f"{type(self).__name__} reads its records through the trainer's QADataModule or an explicit "
                f"`source`; the trainer has {type(datamodule).__name__} and no source was given"
            )
        return _Data(self.source, FictitiousConfig(), "auto", 256)

    def _load(self, split: str) -> QARecords:
        records = load_qa_split(self._data.source, split, self._data.fictitious)
        if self.max_samples is not None:
            records = records.select(range(min(self.max_samples, len(records))))
        return records

    # ------------------------------------------------------------------ hooks

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if "fit_end" in self.on:
            self.run(trainer, pl_module)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if "test" in self.on:
            self.run(trainer, pl_module)

    def run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """Evaluate, log to every logger, and on rank 0 write the JSON and print the table."""
        self.results, per_sample = self.evaluate(pl_module)
        output = Path(self.output) if self.output else Path(trainer.default_root_dir) / OUTPUT_NAME
        for logger in trainer.loggers:
            logger.log_metrics({METRIC_PREFIX + k: v for k, v in self.results.items()}, step=trainer.global_step)
        if trainer.is_global_zero:
            payload = {
                "metrics": self.results,
                "splits": self.splits,
                "source": self._data.source,
                "min_k": self.min_k,
                "per_sample": per_sample,
            }
            write_json_atomic(output, payload)
            self._print(output)
        return self.results

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, pl_module: L.LightningModule) -> tuple[dict[str, float], dict[str, list[float] | list[str]]]:
        """The summary metrics, the per-sample arrays a later run needs as its reference, and the forget answers.

        The greedy forget answers are kept so that refusal, non-answer and fabrication can be read, not only counted.
        """
        model, tokenizer = pl_module.model, pl_module.tokenizer
        encoding = {
            "prompt_format": resolve_prompt_format(tokenizer, self._data.prompt_format),
            "max_length": self._data.max_length,
            "batch_size": self.batch_size,
        }
        scores = {
            name: score_split(
                model, tokenizer, self._records[name], self.splits[name], max_new_tokens=self.max_new_tokens, **encoding
            )
            for name in self.splits
            if name != "holdout"
        }
        results = tofu_summary(scores)
        forget, retain = scores["forget"], scores["retain"]
        results |= answer_rates(forget.generated, forget.answers)
        results["verbmem"] = float(verbmem_scores(model, tokenizer, self._records["forget"], **encoding).mean())
        results["knowmem_forget"] = knowmem(forget.generated, forget.answers)
        results["knowmem_retain"] = knowmem(retain.generated, retain.answers)

        forget_min_k = min_k_scores(forget.answer_token_nll, self.min_k)
        per_sample = {
            "forget_truth_ratio": forget.truth_ratio.tolist(),
            "forget_min_k": forget_min_k.tolist(),
            "forget_answers": list(forget.generated),
        }
        if "holdout" in self.splits:
            holdout = list(self._records["holdout"])
            questions, answers = [r["question"] for r in holdout], [r["answer"] for r in holdout]
            holdout_min_k = min_k_scores(pairs_nll(model, tokenizer, questions, answers, **encoding)[1], self.min_k)
            per_sample["holdout_min_k"] = holdout_min_k.tolist()
            results["minkprob_auc"] = privleak_auc(forget_min_k, holdout_min_k)
        if self._reference is not None:
            results |= forget_quality_results(forget.truth_ratio.tolist(), _field(self._reference, FORGET_RATIO_KEY))
            if "holdout" in self.splits:
                results["privleak"] = privleak(results["minkprob_auc"], _field(self._reference, AUC_KEY))
        return results, per_sample

    def _print(self, output: Path) -> None:
        Console().print(metrics_table({str(output): self.results}, title="unlearning evaluation"))


def metrics_table(runs: Mapping[str, Mapping[str, float]], title: str) -> Table:
    """One row per metric, one column per run (metrics missing from a run show as ``-``)."""
    table = Table(title=title)
    table.add_column("metric")
    for name in runs:
        table.add_column(name, justify="right", overflow="fold")
    names = list(dict.fromkeys(key for metrics in runs.values() for key in metrics))
    for name in names:
        cells = [_cell(metrics.get(name)) for metrics in runs.values()]
        table.add_row(name, *cells)
    return table


def _cell(value: float | None) -> str:
    """A number to 4 decimals; counts (sample sizes) as integers; ``-`` when missing."""
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.4f}"


def compare_runs(runs: Sequence[str]) -> Table:
    """The metrics of several ``unlearning_eval.json`` files side by side (``trustlit compare``).

    Each run is ``PATH`` or ``LABEL=PATH``; the label (default: the path) heads its column.
    """
    columns = {}
    for run in runs:
        label, _, path = run.rpartition("=")
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"evaluation file not found: {path}")
        metrics = _field(json.loads(file.read_text(encoding="utf-8")), "metrics")
        if not isinstance(metrics, dict):
            raise ValueError(f"{path} has no 'metrics': is it a file written by UnlearningEvaluation?")
        columns[label or path] = metrics
    return metrics_table(columns, title="unlearning evaluation")
