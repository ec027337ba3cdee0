"""Shapley values and interactions from a recipe: the attribution estimators run by ``trustlit test``.

- :class:`TabularShapley` explains a tabular classifier's predictions on the test split: an XGBoost model fitted on
  the train split, or a trained :class:`~trustlit.classifiers.MLPClassifier` checkpoint (the DP-SGD recipe's, say).
  The game of a point x is the baseline game v(S) = mean_b f_c(x_S, b_~S) (:class:`TabularValue`), f_c the margin or
  probability of the class predicted for x. Every estimator listed runs at budget = ``budget_multiple`` * n and is
  scored by its relative error ||phi_hat - phi||^2 / ||phi||^2 against the exact values (n <= ``max_exact_players``)
  or interventional TreeSHAP with the same background (XGBoost margins: the same game, by linearity). Features equal
  to the background are null players: the estimators play the others only (:func:`estimate_over_varying`).
- :class:`TokenInteractions` runs ProxySPEX on a causal LM: for each question of a QA data module, the players are
  words of a passage (the record's answer, with the question after it: the model answers from it) or of the
  question, inside the prompt template, and v(S) = log p(target | template(words S)) (:class:`TokenValue`), the
  target being the model's own greedy answer to the full prompt (or the given answer). ProxySPEX, the LASSO
  baseline and LeverageSHAP run at one budget and are scored by faithfulness (R^2 of the reconstructed game on
  held-out uniform masks).

Both write their results (JSON), a PNG figure next to them, a printed table, and the same to W&B.

Estimator names (``TabularShapley.estimators``): ``unbiased`` (Covert & Lee 2021) or
``<regression|matrix_vector>/<kernel|leverage|modified_l2|tau>/<with|without>[/unpaired]``, the arguments of
:func:`~trustlit.attribution.shapley.kernel_shap`: ``regression/kernel/with`` is KernelSHAP, ``regression/leverage/
without`` LeverageSHAP, ``regression/modified_l2/without`` Chen et al.'s modified-l2 scheme.

Notes: docs/methods/kernel_shap.md, docs/methods/proxyspex.md
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from trustlit.analysis import AnalysisModule
from trustlit.attribution.linear import additive_faithfulness, holdout_masks, lasso_attribution
from trustlit.attribution.proxy_spex import InteractionResult, min_budget, proxyspex
from trustlit.attribution.shapley import (
    SAMPLINGS,
    ShapleyResult,
    exact_shapley,
    kernel_shap,
    tau_of,
    unbiased_kernel_shap,
)
from trustlit.attribution.value import CountingValue, RestrictedValue, TabularValue, TokenValue, ValueFunction
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import NonNegativeInt, PositiveInt, check_arguments, plain_numbers
from trustlit.interpret.tracing import answer_prefix, check_target, greedy_continuation, prompt_parts
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.prompts import PromptFormat

Estimator = Callable[[ValueFunction, int, int], ShapleyResult]
ESTIMATOR_GRAMMAR = (
    "'unbiased' or '<regression|matrix_vector>/<kernel|leverage|modified_l2|tau>/<with|without>[/unpaired]' "
    "(e.g. 'regression/leverage/without')"
)
DEFAULT_ESTIMATORS = [
    "regression/kernel/with",
    "regression/leverage/without",
    "regression/modified_l2/without",
    "matrix_vector/leverage/without",
    "unbiased",
]


def parse_estimator(spec: str) -> Estimator:
    """The estimator ``(value, budget, seed) -> ShapleyResult`` named by ``spec`` (grammar in the module docstring)."""
    if spec == "unbiased":
        return lambda value, budget, seed: unbiased_kernel_shap(value, budget, seed=seed)
    parts = spec.split("/")
    valid = (
        len(parts) in (3, 4)
        and parts[0] in ("regression", "matrix_vector")
        and parts[2] in ("with", "without")
        and parts[3:] in ([], ["unpaired"])
    )
    if not valid:
        raise ValueError(f"estimator {spec!r} is invalid: expected {ESTIMATOR_GRAMMAR}")
    sampling: str | float = parts[1]
    if sampling not in SAMPLINGS:
        try:
            sampling = float(sampling)
        except ValueError:
            raise ValueError(
                f"estimator {spec!r}: sampling {parts[1]!r} is invalid, expected {ESTIMATOR_GRAMMAR}"
            ) from None
    tau_of(sampling)
    options = {
        "estimator": parts[0],
        "sampling": sampling,
        "replacement": parts[2] == "with",
        "paired": len(parts) == 3,
    }
    return lambda value, budget, seed: kernel_shap(value, budget, seed=seed, **options)


def estimate_over_varying(estimate: Estimator, value: TabularValue, budget: int, seed: int) -> ShapleyResult:
    """``estimate`` on the features that differ from the background only (:class:`RestrictedValue`), 0 for the
    others, which are null players; the budget stays the caller's (shap's KernelExplainer does the same)."""
    varying = torch.nonzero(~value.null_players()).flatten().tolist()
    if len(varying) == value.n_players:
        return estimate(value, budget, seed)
    if not varying:  # x equals the background: v is constant, every value is 0
        v = float(value(torch.zeros(1, value.n_players, dtype=torch.bool))[0])
        return ShapleyResult(torch.zeros(value.n_players, dtype=torch.float64), 1, v, v, "constant")
    game = RestrictedValue(value, varying)
    result = estimate(game, budget, seed) if len(varying) > 1 else exact_shapley(game)
    return replace(result, values=game.expand(result.values))


def relative_error(estimate: torch.Tensor, truth: torch.Tensor) -> float:
    """||phi_hat - phi||^2 / ||phi||^2 (0 when both vanish)."""
    denominator = float(truth.double().pow(2).sum())
    numerator = float((estimate.double() - truth.double()).pow(2).sum())
    return numerator / denominator if denominator > 0 else (0.0 if numerator == 0 else float("inf"))


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile)."""
    q1, median, q3 = np.percentile(np.asarray(values, dtype=np.float64), [25, 50, 75])
    return float(q1), float(median), float(q3)


class TabularBlackBox:
    """The explained model's per-class scores [N, C] on rows [N, F] (numpy), and what it is."""

    def __init__(self, scores: Callable[[np.ndarray], np.ndarray], model: Any, kind: str) -> None:
        self.scores, self.model, self.kind = scores, model, kind

    def output(self, rows: np.ndarray, label: int, output: str) -> np.ndarray:
        """Margin (log-odds for two classes, raw score otherwise) or probability of class ``label``, per row."""
        scores = self.scores(rows)
        if output == "probability":
            return torch.softmax(torch.as_tensor(scores, dtype=torch.float64), dim=1)[:, label].numpy()
        if scores.shape[1] == 2:  # binary: the log-odds of the class, +-m for XGBoost's margin m
            return scores[:, label] - scores[:, 1 - label]
        return scores[:, label]


def xgboost_black_box(x: np.ndarray, y: np.ndarray, n_estimators: int, max_depth: int, seed: int) -> TabularBlackBox:
    """XGBoost fitted on (x, y); a binary margin m becomes the scores [0, m], whose softmax is its probabilities."""
    from xgboost import XGBClassifier

    model = XGBClassifier(n_estimators=n_estimators, max_depth=max_depth, random_state=seed, n_jobs=1)
    model.fit(x, y)

    def scores(rows: np.ndarray) -> np.ndarray:
        margin = model.predict(rows, output_margin=True)
        return np.stack([np.zeros_like(margin), margin], axis=1) if margin.ndim == 1 else margin

    return TabularBlackBox(scores, model, "xgboost")


def mlp_black_box(checkpoint: str) -> TabularBlackBox:
    """A trained :class:`MLPClassifier` from its Lightning checkpoint; scores are its logits."""
    from trustlit.classifiers import MLPClassifier

    path = Path(checkpoint).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"TabularShapley: black_box checkpoint not found: {path}")
    model = MLPClassifier.load_from_checkpoint(path, map_location="cpu").eval()

    def scores(rows: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.as_tensor(rows, dtype=torch.float32)).double().numpy()

    return TabularBlackBox(scores, model, "mlp")


def tree_shap_truth(black_box: TabularBlackBox, x: np.ndarray, background: np.ndarray, label: int) -> torch.Tensor:
    """Interventional TreeSHAP of the explained margin, with ``background`` as the reference rows."""
    import shap

    explainer = shap.TreeExplainer(black_box.model, data=background, feature_perturbation="interventional")
    values = np.asarray(explainer.shap_values(x[None, :]))
    if values.ndim == 2:  # binary: [1, F] for the margin m of class 1; class 0's log-odds is -m
        return torch.as_tensor(values[0] if label == 1 else -values[0], dtype=torch.float64)
    return torch.as_tensor(values[0, :, label], dtype=torch.float64)  # [1, F, C]


class TabularShapley(AnalysisModule):
    """Shapley values of a tabular classifier's test predictions by the chosen estimators (module docstring).

    Notes: docs/methods/kernel_shap.md

    Args:
        black_box: ``xgboost`` (fitted on the train split with ``n_estimators`` trees of depth ``max_depth``) or the
            path of an :class:`MLPClassifier` ``.ckpt``.
        output: ``margin`` (log-odds of the predicted class; the raw score with more than two classes) or
            ``probability``.
        background: ``mean`` (one reference row: the train split's column means) or ``train`` (the game averaged
            over ``background_size`` train rows drawn with ``seed``).
        estimators: estimator names (module docstring); each runs ``seeds`` times per point.
        budget_multiple: every estimator gets budget = ``budget_multiple`` * n distinct evaluations.
        max_points: how many test rows are explained.
        max_exact_players: up to this many features the truth is :func:`exact_shapley`; beyond it interventional
            TreeSHAP (XGBoost margins only; otherwise no error is reported).
        top_features: features shown in the figure and table of mean |phi|.
    """

    def __init__(
        self,
        black_box: str = "xgboost",
        n_estimators: PositiveInt = 100,
        max_depth: PositiveInt = 4,
        output: Literal["margin", "probability"] = "margin",
        background: Literal["mean", "train"] = "mean",
        background_size: PositiveInt = 100,
        estimators: list[str] | None = None,
        budget_multiple: PositiveInt = 10,
        seeds: PositiveInt = 1,
        max_points: PositiveInt = 20,
        max_exact_players: NonNegativeInt = 16,
        top_features: PositiveInt = 10,
        seed: NonNegativeInt = 0,
        results_file: str = "shapley.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(TabularShapley.__init__, locals())
        if output not in ("margin", "probability"):
            raise ValueError(f"TabularShapley: output={output!r} is invalid, expected 'margin' or 'probability'")
        if background not in ("mean", "train"):
            raise ValueError(f"TabularShapley: background={background!r} is invalid, expected 'mean' or 'train'")
        if max_exact_players > 20:
            raise ValueError(f"TabularShapley: max_exact_players={max_exact_players} is invalid, expected <= 20")
        estimators = list(DEFAULT_ESTIMATORS if estimators is None else estimators)
        if not estimators:
            raise ValueError("TabularShapley: estimators is empty, expected at least one estimator name")
        self.estimator_fns = {spec: parse_estimator(spec) for spec in estimators}
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.hparams["estimators"] = estimators
        self.black_box: TabularBlackBox | None = None
        self.reference: np.ndarray | None = None
        self.records: list[dict[str, Any]] = []

    def setup(self, stage: str) -> None:
        if self.black_box is not None:
            return
        x, y = self.train_rows()
        hp = self.hparams
        if hp.black_box == "xgboost":
            self.black_box = xgboost_black_box(x, y, hp.n_estimators, hp.max_depth, hp.seed)
        else:
            self.black_box = mlp_black_box(hp.black_box)
        if hp.background == "mean":
            self.reference = x.mean(axis=0)
        else:
            rng = np.random.default_rng(hp.seed)
            self.reference = x[rng.choice(len(x), size=min(hp.background_size, len(x)), replace=False)]

    def train_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Features and labels of the data module's train loader (batches ``(x, y, index)``)."""
        datamodule = self.trainer.datamodule
        if datamodule is None:
            raise RuntimeError("TabularShapley needs a data module with a train split (e.g. TabularDataModule)")
        datamodule.setup("fit")
        batches = [(batch[0], batch[1]) for batch in datamodule.train_dataloader()]
        if not batches:
            raise RuntimeError(f"TabularShapley: the train split of {type(datamodule).__name__} is empty")
        return torch.cat([b[0] for b in batches]).double().numpy(), torch.cat([b[1] for b in batches]).numpy()

    def reset(self) -> None:
        self.records = []

    def update(self, batch: Any) -> None:
        for row in batch[0].double().numpy():
            if len(self.records) >= self.hparams.max_points:
                return
            self.records.append(self.explain(row))

    def truth(self, value: ValueFunction, row: np.ndarray, label: int) -> tuple[torch.Tensor | None, str]:
        hp, n = self.hparams, row.size
        if n <= hp.max_exact_players:
            return exact_shapley(value).values, "exact"
        if self.black_box.kind == "xgboost" and hp.output == "margin":
            return tree_shap_truth(self.black_box, row, np.atleast_2d(self.reference), label), "tree_shap"
        return None, "none"

    def explain(self, row: np.ndarray) -> dict[str, Any]:
        """Every estimator's values (and errors) for one point."""
        hp, n = self.hparams, row.size
        label = int(np.argmax(self.black_box.scores(row[None, :])[0]))
        value = TabularValue(
            functools.partial(self.black_box.output, label=label, output=hp.output), row, self.reference
        )
        truth, truth_source = self.truth(value, row, label)
        budget = max(hp.budget_multiple * n, n + 1)
        record: dict[str, Any] = {"label": label, "truth_source": truth_source, "budget": budget, "estimators": {}}
        if truth is not None:
            record["truth"] = truth
        for spec, estimate in self.estimator_fns.items():
            runs = []
            for repeat in range(hp.seeds):
                started = time.perf_counter()
                result = estimate_over_varying(estimate, value, budget, hp.seed + repeat)
                seconds = time.perf_counter() - started
                error = relative_error(result.values, truth) if truth is not None else None
                runs.append(
                    {"values": result.values, "n_evaluations": result.n_evaluations, "seconds": seconds, "error": error}
                )
            record["estimators"][spec] = runs
        return record

    def summary(self) -> list[dict[str, Any]]:
        """Per estimator: error quartiles over points x seeds, mean evaluations and seconds per explanation."""
        rows = []
        for spec in self.estimator_fns:
            runs = [run for record in self.records for run in record["estimators"][spec]]
            errors = [run["error"] for run in runs if run["error"] is not None]
            q1, median, q3 = quartiles(errors) if errors else (float("nan"),) * 3
            rows.append(
                {
                    "estimator": spec,
                    "error_median": median,
                    "error_q1": q1,
                    "error_q3": q3,
                    "n_evaluations": statistics.mean(run["n_evaluations"] for run in runs),
                    "seconds": statistics.mean(run["seconds"] for run in runs),
                }
            )
        return rows

    def compute(self) -> dict[str, Any]:
        if not self.records:
            raise RuntimeError("TabularShapley saw no rows: the test dataloader is empty")
        summary = self.summary()
        first = next(iter(self.estimator_fns))
        importance = torch.stack([r["estimators"][first][0]["values"].abs() for r in self.records]).mean(0)
        results: dict[str, Any] = {
            "num_points": len(self.records),
            "num_features": int(importance.numel()),
            "truth_source": self.records[0]["truth_source"],
            "summary": summary,
            "mean_abs_shapley": importance,
            "points": self.records,
        }
        for row in summary:  # scalars become test/<estimator>/relative_error metrics
            name = row["estimator"].replace("/", "_")
            results[f"{name}/relative_error"] = row["error_median"]
        if self.trainer.is_global_zero:
            self.report(summary, importance, first)
        return results

    def report(self, summary: list[dict[str, Any]], importance: torch.Tensor, first: str) -> None:
        header = ["estimator", "median error", "q1", "q3", "evaluations", "seconds"]
        rows = [
            [r["estimator"], r["error_median"], r["error_q1"], r["error_q3"], r["n_evaluations"], r["seconds"]]
            for r in summary
        ]
        print_table(
            f"Shapley estimators at {self.records[0]['budget']} evaluations ({len(self.records)} points)", header, rows
        )
        top = torch.argsort(importance, descending=True)[: self.hparams.top_features].tolist()
        figure, axis = new_figure(figsize=(6, 0.3 * len(top) + 1.5))
        axis.barh([f"feature {i}" for i in reversed(top)], [float(importance[i]) for i in reversed(top)])
        axis.set_xlabel(f"mean |phi| over {len(self.records)} points ({first})")
        axis.set_title(f"Shapley values of the {self.black_box.kind} model ({self.hparams.output})")
        image = save_png(figure, Path(self.trainer.default_root_dir) / Path(self.results_file).with_suffix(".png"))
        log_to_wandb(self.trainer, "shapley", header=header, rows=rows, images=[image])


class TokenInteractions(AnalysisModule):
    """ProxySPEX interactions of a causal LM's answer with the words of its question (module docstring).

    Notes: docs/methods/proxyspex.md

    Args:
        lm: the explained model (``smollm2-135m-instruct``, a fine-tuning run's ``.ckpt``, ...).
        budget: distinct evaluations of the game each method may spend (ProxySPEX, LASSO, LeverageSHAP).
        n_holdout: held-out uniform masks on which faithfulness (R^2) is measured (not counted in the budget).
        context: whose words are the players: the ``question``'s, or (``passage``, reading comprehension) those of
            the record's answer, placed before the question as the passage it is asked about.
        target: ``answer`` (the data's answer) or ``greedy`` (the model's own greedy answer to the prompt).
        target_tokens: cut the target to its first tokens (None: the whole answer; required for ``greedy``).
        mode: absent words are ``remove``d or replaced by the ``pad`` token.
        players: ``words`` or ``sentences`` of the question.
        prompt_format: the template the question is placed in (``auto``: chat when the tokenizer has one).
        batch_size: sequences per forward pass.
        top: interactions (largest |Möbius coefficient|) kept per question in the results.
        seed: seeds the masks of every method.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        budget: PositiveInt = 1000,
        n_holdout: PositiveInt = 500,
        context: Literal["question", "passage"] = "passage",
        target: Literal["answer", "greedy"] = "greedy",
        target_tokens: PositiveInt | None = 8,
        mode: Literal["remove", "pad"] = "remove",
        players: Literal["words", "sentences"] = "words",
        prompt_format: PromptFormat = "auto",
        batch_size: PositiveInt = 32,
        top: PositiveInt = 10,
        seed: NonNegativeInt = 0,
        results_file: str = "interactions.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(TokenInteractions.__init__, locals())
        check_target("TokenInteractions", target, target_tokens)
        if context not in ("question", "passage"):
            raise ValueError(f"TokenInteractions: context={context!r} is invalid, expected 'question' or 'passage'")
        if context == "passage" and target != "greedy":
            raise ValueError(
                "TokenInteractions: context='passage' explains the model's own answer: set target='greedy'"
            )
        if n_holdout < 2:
            raise ValueError(f"TokenInteractions: n_holdout={n_holdout} is invalid, expected at least 2 masks for R^2")
        lm = CausalLMSpec.coerce(lm)
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.hparams["lm"] = asdict(lm)
        self.model, self.tokenizer = lm.load()
        self.model.eval()
        self.explained: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.explained = []

    def game(self, question: str, answer: str) -> TokenValue:
        """v(S) = log p(target | template(players S ...)) for one QA pair (module docstring)."""

        hp = self.hparams
        if hp.context == "passage":  # reading comprehension: the record's answer is the passage the question follows
            players, after = answer, f"\n\nQuestion: {question}"
        else:
            players, after = question, ""
        parts = prompt_parts(self.tokenizer, players + after, hp.prompt_format)
        suffix = (
            [*self.tokenizer(after, add_special_tokens=False)["input_ids"], *parts.suffix] if after else parts.suffix
        )
        if hp.target == "greedy":
            target = greedy_continuation(
                self.model, self.tokenizer, [*parts.prefix, *parts.question, *parts.suffix], hp.target_tokens
            )
        else:
            target = answer_prefix(self.tokenizer, answer, hp.target_tokens)
        return TokenValue(
            self.model,
            self.tokenizer,
            players,
            target,
            mode=hp.mode,
            players=hp.players,
            batch_size=hp.batch_size,
            prefix_ids=parts.prefix,
            suffix_ids=suffix,
        )

    def update(self, batch: dict[str, Any]) -> None:
        for question, answer in zip(batch["question"], batch["answer"], strict=True):
            self.explained.append(self.explain(question, answer))

    def explain(self, question: str, answer: str) -> dict[str, Any]:
        hp = self.hparams
        game = self.game(question, answer)
        n = game.n_players
        seed = hp.seed + len(self.explained)
        budget = max(hp.budget, min_budget(n))
        # one memo for the three methods: ProxySPEX and LASSO draw the same masks (same seed), and all three are
        # scored on the same held-out masks, so the LM runs once per distinct mask
        value = CountingValue(game, hp.batch_size)
        options = {"seed": seed, "n_holdout": hp.n_holdout, "batch_size": hp.batch_size}
        interactions = proxyspex(value, budget, **options)
        lasso = lasso_attribution(value, budget, **options)
        leverage = kernel_shap(value, budget, seed=seed, batch_size=hp.batch_size)
        holdout = holdout_masks(n, budget, hp.n_holdout, seed)
        words = game.player_texts
        return {
            "question": question,
            "target": self.tokenizer.decode(game.target_ids),
            "players": words,
            "budget": budget,
            "faithfulness": {
                "proxyspex": interactions.faithfulness,
                "lasso": lasso.faithfulness,
                "leverage_shap": additive_faithfulness(leverage, value, holdout, hp.batch_size),
            },
            "shapley": interactions.shapley,
            "top_interactions": top_interactions(interactions, words, hp.top),
            "n_evaluations": {
                "proxyspex": interactions.n_evaluations,
                "lasso": lasso.n_evaluations,
                "leverage_shap": leverage.n_evaluations,
            },
        }

    def compute(self) -> dict[str, Any]:
        if not self.explained:
            raise RuntimeError("TokenInteractions saw no (question, answer) pairs: the test dataloader is empty")
        methods = list(self.explained[0]["faithfulness"])
        mean = {m: statistics.mean(e["faithfulness"][m] for e in self.explained) for m in methods}
        results: dict[str, Any] = {f"faithfulness/{m}": mean[m] for m in methods}
        results.update({"num_prompts": len(self.explained), "prompts": self.explained})
        if self.trainer.is_global_zero:
            self.report(methods)
        return results

    def report(self, methods: list[str]) -> None:
        header = ["question", "target", *(f"R^2 {m}" for m in methods), "top interaction"]
        rows = [
            [
                e["question"],
                e["target"],
                *(e["faithfulness"][m] for m in methods),
                " x ".join(e["top_interactions"][0]["players"]) if e["top_interactions"] else "-",
            ]
            for e in self.explained
        ]
        print_table(f"ProxySPEX vs LASSO vs LeverageSHAP at {self.explained[0]['budget']} evaluations", header, rows)
        first = self.explained[0]
        figure, axis = new_figure(figsize=(7, 0.35 * len(first["top_interactions"]) + 1.5))
        labels = [" x ".join(t["players"]) for t in reversed(first["top_interactions"])]
        axis.barh(labels, [t["mobius"] for t in reversed(first["top_interactions"])])
        axis.set_xlabel("Möbius coefficient (log-probability)")
        axis.set_title(f"Top interactions: {first['question'][:60]}", fontsize=9)
        image = save_png(figure, Path(self.trainer.default_root_dir) / Path(self.results_file).with_suffix(".png"))
        log_to_wandb(self.trainer, "interactions", header=header, rows=rows, images=[image])


def top_interactions(result: InteractionResult, words: Sequence[str], top: int) -> list[dict[str, Any]]:
    """The ``top`` non-empty Möbius coefficients by magnitude, with their players' words."""
    ranked = sorted((k for k in result.mobius if k), key=lambda k: -abs(result.mobius[k]))[:top]
    return [
        {"players": [words[i] for i in sorted(k)], "indices": sorted(k), "mobius": result.mobius[k]} for k in ranked
    ]
