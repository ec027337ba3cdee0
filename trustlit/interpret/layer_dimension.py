"""Intrinsic dimension of a causal LM's layer representations, measured at validation and test end.

Joshi, Bhatt, Modi, "Geometry of Decision Making in Language Models" (NeurIPS 2025, arXiv 2511.20315):
the last-token representations ``h_l(x)`` of a set of prompts ``x`` lie, at each decoder layer ``l``, on
a manifold whose intrinsic dimension ``ID_l`` is low in early layers, rises in the middle and falls
again in late layers, where the MCQA decision becomes readable. :class:`IntrinsicDimension` measures
``ID_l`` with the estimators of :mod:`trustlit.interpret.intrinsic_dimension` (TwoNN, MLE, GRIDE).

For every evaluation batch the callback runs one forward of ``pl_module.model`` with capture hooks
(:func:`trustlit.llm.hooks.capture`) on the chosen site of each chosen block (the sites of
:mod:`trustlit.llm.harvest`: ``residual`` = the block's output, the paper's residual-post; ``mlp``, the
paper's MLP-out; ``attention``) and keeps the state at the last prompt token of every sample (the first
answer token's position minus one when the batch has ``labels``, else the last real token by the
attention mask). When the batch carries ``choice_ids`` and ``correct``
(:class:`trustlit.data.MCQADataModule`) the forward also scores the options: the model's answer is
``argmax_j log p(choice_ids[j] | x)`` at the last prompt position, and its accuracy is logged. At the
epoch end the rows are gathered over the ranks (DDP), a sample seen twice (the distributed sampler's
padding) kept once, and :func:`layer_estimates` (the pure part) gives ``ID_l`` per estimator.

Logged: ``id/<estimator>/layer_<l>``, ``mcqa/accuracy`` (with choices), ``probe/layer_<l>`` (with
``probe_folds``: the cross-validated accuracy of a logistic-regression probe for the correct option,
:func:`trustlit.interpret.probes.probe_accuracy`). Written per epoch, on rank 0, to ``output_dir``
(default ``<trainer.log_dir or default_root_dir>/intrinsic_dimension``): ``<stage>_epoch<E>.json`` (every
number, the sample count, the settings), ``.csv`` (one row per layer) and ``.png`` (ID against layer,
probe accuracy on a second axis); with a ``WandbLogger``, a ``wandb.Table`` and a ``wandb.plot.line_series``.

Notes: docs/methods/intrinsic_dimension.md
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from trustlit.analysis import gather_rows
from trustlit.figures import new_figure, save_png, wandb_loggers
from trustlit.hparams import NonNegativeInt, OpenUnitInterval, PositiveInt, check_arguments
from trustlit.interpret.intrinsic_dimension import ESTIMATORS, gride, mle, twonn
from trustlit.interpret.probes import probe_accuracy
from trustlit.llm import hooks
from trustlit.llm.anatomy import decoder_layer, decoder_layers
from trustlit.llm.harvest import SUPPORTED_STRATEGIES, Site, position_mask, site_modules, tensor_name
from trustlit.paths import atomic_path, write_json_atomic
from trustlit.strategies import check_strategy

Estimator = Literal["twonn", "mle", "gride"]
Stage = Literal["validation", "test"]
ESTIMATOR_NAMES: tuple[str, ...] = get_args(Estimator)
STAGES: tuple[str, ...] = get_args(Stage)
log = logging.getLogger(__name__)


def neighbours_needed(estimator: str, k: int, n2: int) -> int:
    """Neighbours per point an estimator uses (it needs one point more than that)."""
    return {"twonn": 2, "mle": k, "gride": n2}[estimator]


def layer_estimates(
    representations: Mapping[int, Any],
    estimators: Sequence[str] = ESTIMATOR_NAMES,
    discard_fraction: float = 0.1,
    k: int = 20,
    n1: int = 1,
    n2: int = 2,
) -> dict[str, dict[int, float]]:
    """``{estimator: {layer: ID}}`` of ``{layer: [N, D] points}``: TwoNN, MLE and GRIDE with these settings."""
    unknown = [name for name in estimators if name not in ESTIMATORS]
    if unknown:
        raise ValueError(f"layer_estimates: unknown estimators {unknown}, expected some of {ESTIMATOR_NAMES}")
    functions = {
        "twonn": partial(twonn, discard_fraction=discard_fraction),
        "mle": partial(mle, k=k),
        "gride": partial(gride, n1=n1, n2=n2),
    }
    return {name: {layer: functions[name](X) for layer, X in representations.items()} for name in estimators}


def last_prompt_positions(batch: Mapping[str, Any]) -> torch.Tensor:
    """``[B]`` the last prompt token of each sample: before the first answer token (``labels``), else the last
    real token by ``attention_mask`` (any padding side)."""
    if "labels" in batch:
        return position_mask(batch, "last_prompt").int().argmax(dim=1)
    real = batch["attention_mask"].bool()
    return real.size(1) - 1 - real.flip(1).int().argmax(dim=1)


def batch_representations(
    model: nn.Module, batch: Mapping[str, Any], layers: Sequence[int], site: str = "residual"
) -> tuple[dict[int, torch.Tensor], torch.Tensor | None]:
    """``({layer: [B, D]}, choice log-probs [B, C] or None)`` at the last prompt token of each sample.

    With ``choice_ids`` in the batch the forward runs to the LM head, computing logits only at the
    selected positions (``logits_to_keep``); without, it stops after the deepest chosen block.
    """
    positions = last_prompt_positions(batch)
    rows = torch.arange(len(positions), device=positions.device)
    modules = site_modules(model, layers, [site])
    forward = partial(model, input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    scores = None
    with torch.no_grad(), hooks.capture(modules) as captured:
        if "choice_ids" in batch:
            kept, where = positions.unique(return_inverse=True)
            logits = forward(logits_to_keep=kept).logits[rows, where].float()
            scores = logits.log_softmax(dim=-1).gather(1, batch["choice_ids"].to(logits.device))
        else:
            deepest = max(layers)
            with hooks.stop_at(decoder_layer(model, deepest)):
                hooks.run_until_stopped(forward, f"decoder layer {deepest}")
    states = {layer: captured[tensor_name(site, layer)][rows, positions].float() for layer in layers}
    return states, scores


def causal_lm(pl_module: L.LightningModule) -> nn.Module:
    """The causal LM a trustlit LLM module holds in ``.model``; another module is a one-line error."""
    model = getattr(pl_module, "model", None)
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"IntrinsicDimension needs a LightningModule holding its causal LM in `.model` "
            f"(trustlit.CausalLMModule); {type(pl_module).__name__} has none"
        )
    return model


class IntrinsicDimension(Callback):
    """Per-layer intrinsic dimension (and probe, answer accuracy) of last-token states; see the module docstring.

    Args:
        estimators: any of ``twonn``, ``mle``, ``gride``.
        layers: decoder-block indices (negatives count from the last); default every block.
        site: ``residual`` (block output), ``mlp`` or ``attention``.
        stages: when to measure: ``validation`` (under fit and validate) and/or ``test``.
        discard_fraction: TwoNN's discarded fraction of the largest ratios (Facco et al.: 0.1).
        k: MLE's neighbours (20).
        n1, n2: GRIDE's neighbour orders (Denti et al.'s TwoNN scale: 1, 2).
        probe_folds: cross-validation folds of the linear probe for the correct option (needs
            ``correct`` in the batches); 0 (the default) runs no probe.
        output_dir: where the tables and plots go (module docstring).

    Too few distinct samples for an estimator is a one-line error, except under ``fast_dev_run``
    (one batch), where that estimator is skipped with a warning. The sanity check is not measured.
    Strategies: single device and DDP (the hooks need whole modules).
    """

    def __init__(
        self,
        estimators: list[Estimator] | None = None,
        layers: list[int] | None = None,
        site: Site = "residual",
        stages: list[Stage] | None = None,
        discard_fraction: OpenUnitInterval = 0.1,
        k: PositiveInt = 20,
        n1: PositiveInt = 1,
        n2: PositiveInt = 2,
        probe_folds: NonNegativeInt = 0,
        output_dir: str | None = None,
    ) -> None:
        check_arguments(IntrinsicDimension.__init__, locals())
        estimators = list(estimators) if estimators is not None else list(ESTIMATOR_NAMES)
        stages = list(stages) if stages is not None else list(STAGES)
        if not estimators or any(name not in ESTIMATOR_NAMES for name in estimators):
            raise ValueError(
                f"IntrinsicDimension: estimators={estimators} is invalid, expected some of {ESTIMATOR_NAMES}"
            )
        if not stages or any(stage not in STAGES for stage in stages):
            raise ValueError(f"IntrinsicDimension: stages={stages} is invalid, expected some of {STAGES}")
        if layers is not None and not layers:
            raise ValueError("IntrinsicDimension: layers is empty, give decoder-layer indices or leave it unset (all)")
        if not n1 < n2:
            raise ValueError(f"IntrinsicDimension: n1={n1}, n2={n2} are invalid, GRIDE needs n1 < n2")
        if probe_folds == 1:
            raise ValueError("IntrinsicDimension: probe_folds=1 is invalid, expected 0 (no probe) or >= 2")
        self.estimators = list(dict.fromkeys(estimators))
        self.layers = list(layers) if layers is not None else None
        self.site = site
        self.stages = stages
        self.settings = {"discard_fraction": discard_fraction, "k": k, "n1": n1, "n2": n2}
        self.probe_folds = probe_folds
        self.output_dir = output_dir
        self.resolved_layers: list[int] = []
        self.results: dict[str, Any] = {}
        # the last measured epoch's inputs (after the DDP gather): {layer: [N, D]}, correct and predicted options
        self.representations: dict[int, torch.Tensor] = {}
        self.correct: torch.Tensor | None = None
        self.predicted: torch.Tensor | None = None
        self._reset()

    def _reset(self) -> None:
        self._states: dict[int, list[torch.Tensor]] = {layer: [] for layer in self.resolved_layers}
        self._keys: list[torch.Tensor] = []
        self._correct: list[torch.Tensor] = []
        self._predicted: list[torch.Tensor] = []

    # -- Lightning hooks ---------------------------------------------------------------------

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        check_strategy(type(self).__name__, trainer.strategy, SUPPORTED_STRATEGIES, "the hooks need whole modules")
        model = causal_lm(pl_module)
        num_layers = len(decoder_layers(model))
        layers = self.layers if self.layers is not None else list(range(num_layers))
        for layer in layers:
            decoder_layer(model, layer)  # an index out of range names the valid ones
        self.resolved_layers = sorted({layer % num_layers for layer in layers})
        self._reset()

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._reset()

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._reset()

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        if "validation" in self.stages and not trainer.sanity_checking:
            self._collect(pl_module, batch, dataloader_idx)

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        if "test" in self.stages:
            self._collect(pl_module, batch, dataloader_idx)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if "validation" in self.stages and not trainer.sanity_checking:
            self._finish(trainer, pl_module, "validation")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if "test" in self.stages:
            self._finish(trainer, pl_module, "test")

    # -- collection and results --------------------------------------------------------------

    def _collect(self, pl_module: L.LightningModule, batch: Mapping[str, Any], dataloader_idx: int) -> None:
        states, scores = batch_representations(causal_lm(pl_module), batch, self.resolved_layers, self.site)
        for layer, rows in states.items():
            self._states[layer].append(rows)
        index = batch["index"].to(pl_module.device)
        self._keys.append(torch.stack([torch.full_like(index, dataloader_idx), index], dim=1))
        if "correct" in batch:
            self._correct.append(batch["correct"].to(pl_module.device))
        if scores is not None:
            self._predicted.append(scores.argmax(dim=1))

    def _gathered(self, pl_module: L.LightningModule, parts: list[torch.Tensor]) -> torch.Tensor:
        return gather_rows(pl_module, torch.cat(parts)).cpu()

    def _finish(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self._keys:
            raise RuntimeError(f"IntrinsicDimension: no {stage} batch was seen, nothing to measure")
        keys = self._gathered(pl_module, self._keys)
        # the distributed sampler pads ranks by repeating samples: keep each (dataloader, index) once
        _, inverse = keys.unique(dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), len(keys), dtype=torch.long).scatter_reduce(
            0, inverse, torch.arange(len(keys)), reduce="amin"
        )
        states = {layer: self._gathered(pl_module, parts)[first] for layer, parts in self._states.items()}
        correct = self._gathered(pl_module, self._correct)[first] if self._correct else None
        predicted = self._gathered(pl_module, self._predicted)[first] if self._predicted else None
        results = None
        if trainer.is_global_zero:
            results = self._compute(trainer, states, correct, predicted)
        self.results = trainer.strategy.broadcast(results, src=0)
        self.representations, self.correct, self.predicted = states, correct, predicted
        for name, value in metric_values(self.results).items():
            pl_module.log(name, value, sync_dist=False, add_dataloader_idx=False)
        if trainer.is_global_zero:
            self._write(trainer, stage)
        self._reset()

    def _compute(
        self, trainer: L.Trainer, states: dict[int, torch.Tensor], correct: torch.Tensor | None,
        predicted: torch.Tensor | None,
    ) -> dict[str, Any]:  # fmt: skip
        count = len(next(iter(states.values())))
        estimators = [name for name in self.estimators if self._enough(trainer, name, count)]
        s = self.settings
        ids = layer_estimates(states, estimators, s["discard_fraction"], s["k"], s["n1"], s["n2"])
        results: dict[str, Any] = {
            "num_samples": count, "layers": self.resolved_layers, "site": self.site, "settings": s, "id": ids,
        }  # fmt: skip
        if predicted is not None and correct is not None:
            results["accuracy"] = float((predicted == correct).double().mean())
        if self.probe_folds and correct is not None and self._probe_possible(trainer, correct):
            folds = {layer: probe_accuracy(x, correct, self.probe_folds) for layer, x in states.items()}
            results["probe"] = {layer: sum(f) / len(f) for layer, f in folds.items()}
            results["probe_folds"] = folds
        return results

    def _enough(self, trainer: L.Trainer, estimator: str, count: int) -> bool:
        needed = neighbours_needed(estimator, self.settings["k"], self.settings["n2"]) + 1
        if count >= needed:
            return True
        return too_few(
            trainer, f"IntrinsicDimension: {estimator} needs at least {needed} samples, {count} were gathered"
        )

    def _probe_possible(self, trainer: L.Trainer, correct: torch.Tensor) -> bool:
        counts = torch.bincount(correct)
        if (counts > 0).sum() >= 2 and counts[counts > 0].min() >= self.probe_folds:
            return True
        message = f"IntrinsicDimension: the {self.probe_folds}-fold probe needs {self.probe_folds} samples of each"
        return too_few(trainer, f"{message} of 2 or more options, got counts {counts.tolist()}")

    def _write(self, trainer: L.Trainer, stage: str) -> None:
        directory = Path(self.output_dir or Path(trainer.log_dir or trainer.default_root_dir) / "intrinsic_dimension")
        stem = f"{stage}_epoch{trainer.current_epoch:03d}"
        header, rows = result_rows(self.results)
        write_json_atomic(
            directory / f"{stem}.json", {"stage": stage, "epoch": trainer.current_epoch, **json_ready(self.results)}
        )
        text = io.StringIO()
        csv.writer(text).writerows([header, *rows])
        with atomic_path(directory / f"{stem}.csv") as temporary:
            temporary.write_text(text.getvalue(), encoding="utf-8")
        save_plot(self.results, directory / f"{stem}.png", f"{stage}, epoch {trainer.current_epoch}")
        log_wandb(trainer, self.results, stage)


def too_few(trainer: L.Trainer, message: str) -> bool:
    """False with a warning under ``fast_dev_run`` (a smoke run sees one batch); else ``message`` as an error."""
    if not trainer.fast_dev_run:
        raise ValueError(f"{message}: evaluate on more samples (limit_*_batches, max_samples)")
    log.warning("%s: skipped under fast_dev_run", message)
    return False


def metric_values(results: Mapping[str, Any]) -> dict[str, float]:
    """The scalars to log: ``id/<estimator>/layer_<l>``, ``mcqa/accuracy``, ``probe/layer_<l>``."""
    values = {
        f"id/{name}/layer_{layer}": value
        for name, per_layer in results["id"].items()
        for layer, value in per_layer.items()
    }
    if "accuracy" in results:
        values["mcqa/accuracy"] = results["accuracy"]
    for layer, value in results.get("probe", {}).items():
        values[f"probe/layer_{layer}"] = value
    return values


def result_rows(results: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The table: one row per layer, a column per estimator (and ``probe`` when measured)."""
    header = ["layer", *results["id"], *(["probe"] if "probe" in results else [])]
    rows = [
        [
            layer,
            *(results["id"][name][layer] for name in results["id"]),
            *([results["probe"][layer]] if "probe" in results else []),
        ]
        for layer in results["layers"]
    ]
    return header, rows


def json_ready(results: Mapping[str, Any]) -> dict[str, Any]:
    """``results`` with integer layer keys as strings (JSON object keys)."""
    return {
        key: (
            {str(k): json_ready(v) if isinstance(v, Mapping) else v for k, v in value.items()}
            if isinstance(value, Mapping)
            else value
        )
        for key, value in results.items()
    }


def save_plot(results: Mapping[str, Any], path: Path, title: str) -> None:
    """ID against layer, one line per estimator; probe accuracy (and the model's accuracy) on a second axis."""
    figure, axis = new_figure(figsize=(7, 4))
    layers = results["layers"]
    for name, per_layer in results["id"].items():
        axis.plot(layers, [per_layer[layer] for layer in layers], marker="o", markersize=3, label=f"ID ({name})")
    axis.set_xlabel("decoder layer")
    axis.set_ylabel("intrinsic dimension")
    if "probe" in results or "accuracy" in results:
        second = axis.twinx()
        if "probe" in results:
            second.plot(
                layers,
                [results["probe"][layer] for layer in layers],
                color="black",
                linestyle="--",
                label="probe accuracy",
            )
        if "accuracy" in results:
            second.axhline(results["accuracy"], color="grey", linestyle=":", label="model accuracy")
        second.set_ylabel("accuracy")
        second.set_ylim(0, 1)
        second.legend(loc="upper right", fontsize=8)
    axis.legend(loc="upper left", fontsize=8)
    axis.set_title(f"Intrinsic dimension per layer ({results['site']}, N = {results['num_samples']}; {title})")
    save_png(figure, path)


def log_wandb(trainer: L.Trainer, results: Mapping[str, Any], stage: str) -> None:
    """A ``wandb.Table`` of :func:`result_rows` and a line plot of ID per layer, for every ``WandbLogger``."""
    loggers = wandb_loggers(trainer)
    if not loggers:
        return
    import wandb

    header, rows = result_rows(results)
    layers = results["layers"]
    for logger in loggers:
        plot = wandb.plot.line_series(
            xs=layers,
            ys=[[results["id"][name][layer] for layer in layers] for name in results["id"]],
            keys=list(results["id"]),
            title=f"Intrinsic dimension per layer ({stage})",
            xname="layer",
        )
        logger.experiment.log({f"id/{stage}/table": wandb.Table(columns=header, data=rows), f"id/{stage}/plot": plot})
