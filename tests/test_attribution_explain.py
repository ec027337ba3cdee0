"""The attribution analysis modules (trustlit/attribution/explain.py): estimator names, the explained outputs,
the TreeSHAP truth, and TabularShapley / TokenInteractions run by a Trainer."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from helpers import SHARED_DATA, quiet_trainer

from trustlit.attribution.explain import (
    TabularShapley,
    TokenInteractions,
    estimate_over_varying,
    parse_estimator,
    relative_error,
    tree_shap_truth,
    xgboost_black_box,
)
from trustlit.attribution.shapley import exact_shapley
from trustlit.attribution.value import RestrictedValue, TabularValue, TokenValue
from trustlit.classifiers import MLPClassifier
from trustlit.data import QADataModule, TabularDataModule
from trustlit.llm.loading import build_tokenizer

TINY_LM = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2}}


def additive(weights: list[float]):
    """v(S) = sum_{i in S} w_i."""
    w = torch.tensor(weights, dtype=torch.float64)

    def value(masks: torch.Tensor) -> torch.Tensor:
        return masks.double() @ w

    value.n_players = len(weights)
    return value


@pytest.mark.parametrize(
    ("spec", "details"),
    [
        ("regression/kernel/with", {"estimator": "regression", "tau": 1.0, "replacement": True, "paired": True}),
        ("regression/leverage/without", {"estimator": "regression", "tau": 0.0, "replacement": False, "paired": True}),
        ("matrix_vector/0.25/without/unpaired", {"estimator": "matrix_vector", "tau": 0.25, "paired": False}),
    ],
)
def test_estimator_names_select_the_kernel_shap_variant(spec, details):
    result = parse_estimator(spec)(additive([1.0, 2.0, 3.0, 4.0, 5.0]), 20, 3)
    assert {k: result.details[k] for k in details} == details
    assert result.details["seed"] == 3 and result.n_evaluations == 20
    if details["estimator"] == "regression":  # least squares fits an additive game exactly from any design
        assert torch.allclose(result.values, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64))


def test_unbiased_name_runs_covert_and_lee():
    assert parse_estimator("unbiased")(additive([1.0, -1.0, 2.0]), 8, 0).method == "unbiased_kernel_shap"


@pytest.mark.parametrize(
    "spec", ["regression/kernel", "ridge/kernel/with", "regression/kernel/maybe", "regression/x/with"]
)
def test_bad_estimator_names_are_refused_with_the_grammar(spec):
    with pytest.raises(ValueError, match=re.escape("expected 'unbiased' or '<regression|matrix_vector>/")):
        parse_estimator(spec)


def test_out_of_range_tau_is_refused():
    with pytest.raises(ValueError, match="tau must lie in"):
        parse_estimator("regression/1.5/with")


def test_relative_error_is_the_squared_norm_ratio():
    assert relative_error(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 3.0])) == pytest.approx(4 / 10)
    assert relative_error(torch.zeros(2), torch.zeros(2)) == 0.0


def binary_and_multiclass():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    yield x, (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(int)
    yield x, np.digitize(x[:, 0] + x[:, 3], [-0.5, 0.5])


@pytest.mark.parametrize(("x", "y"), list(binary_and_multiclass()), ids=["binary", "three_classes"])
def test_tree_shap_truth_is_the_exact_shapley_value_of_the_explained_margin(x, y):
    black_box = xgboost_black_box(x, y, n_estimators=20, max_depth=3, seed=0)
    reference = x.mean(axis=0)
    for row in x[:4]:
        for label in range(int(y.max()) + 1):
            value = TabularValue(lambda rows, label=label: black_box.output(rows, label, "margin"), row, reference)
            exact = exact_shapley(value).values
            assert torch.allclose(tree_shap_truth(black_box, row, reference[None, :], label), exact, atol=1e-4)


def test_binary_margin_is_the_log_odds_of_the_class():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(100, 3))
    black_box = xgboost_black_box(x, (x[:, 0] > 0).astype(int), n_estimators=10, max_depth=2, seed=0)
    p1 = black_box.model.predict_proba(x[:5])[:, 1]
    assert np.allclose(black_box.output(x[:5], 1, "margin"), np.log(p1 / (1 - p1)), atol=1e-5)
    assert np.allclose(black_box.output(x[:5], 0, "margin"), -np.log(p1 / (1 - p1)), atol=1e-5)
    assert np.allclose(black_box.output(x[:5], 0, "probability"), 1 - p1, atol=1e-6)


def run_tabular(tmp_path, dataset: str = "iris", **options) -> dict:
    module = TabularShapley(**options)
    data = TabularDataModule(dataset=dataset, batch_size=8, seed=0)
    quiet_trainer(default_root_dir=tmp_path, limit_test_batches=1).test(module, datamodule=data)
    return json.loads((tmp_path / "shapley.json").read_text())


def test_tabular_shapley_is_exact_when_the_budget_covers_every_coalition(tmp_path):
    estimators = ["regression/kernel/with", "regression/leverage/without", "matrix_vector/modified_l2/without"]
    results = run_tabular(
        tmp_path, n_estimators=10, max_depth=3, estimators=estimators, budget_multiple=4, max_points=3
    )
    assert results["truth_source"] == "exact" and results["num_points"] == 3
    for row in results["summary"]:  # budget 4 * 4 = 16 = 2^4 coalitions
        assert row["error_median"] < 1e-12 and row["n_evaluations"] == 16
    for point in results["points"]:
        total = sum(point["truth"])
        assert all(abs(sum(run["values"]) - total) < 1e-9 for runs in point["estimators"].values() for run in runs)
    assert (tmp_path / "shapley.png").stat().st_size > 0


def test_tabular_shapley_scores_against_tree_shap_beyond_the_exact_limit(tmp_path):
    results = run_tabular(
        tmp_path,
        n_estimators=10,
        max_depth=3,
        estimators=["regression/leverage/without"],
        budget_multiple=3,
        max_points=2,
        max_exact_players=2,
    )
    assert results["truth_source"] == "tree_shap"
    assert 0 < results["summary"][0]["error_median"] < 1.0  # a 12-evaluation estimate: inexact, not wild


def test_tabular_shapley_explains_a_trained_mlp_checkpoint(tmp_path):
    data = TabularDataModule(dataset="iris", batch_size=16, seed=0)
    model = MLPClassifier(num_features=4, num_classes=3, hidden_sizes=[8], optimizer="adam", lr=0.01)
    trainer = quiet_trainer(default_root_dir=tmp_path, max_epochs=2)
    trainer.fit(model, datamodule=data)
    trainer.save_checkpoint(tmp_path / "mlp.ckpt")
    results = run_tabular(
        tmp_path,
        black_box=str(tmp_path / "mlp.ckpt"),
        output="probability",
        estimators=["regression/kernel/with"],
        budget_multiple=4,
        max_points=2,
    )
    assert results["summary"][0]["error_median"] < 1e-12
    point = results["points"][0]
    row = data.splits["test"].tensors[0][0]
    probability = torch.softmax(model(row[None]), dim=1)[0, point["label"]].item()
    mean_row = data.splits["train"].tensors[0].mean(0)
    baseline = torch.softmax(model(mean_row[None]), dim=1)[0, point["label"]].item()
    assert sum(point["truth"]) == pytest.approx(probability - baseline, abs=1e-5)  # efficiency: f(x) - f(b)


def test_missing_checkpoint_is_named(tmp_path):
    module = TabularShapley(black_box=str(tmp_path / "none.ckpt"))
    data = TabularDataModule(dataset="iris", batch_size=8)
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "none.ckpt"))):
        quiet_trainer(default_root_dir=tmp_path, limit_test_batches=1).test(module, datamodule=data)


def test_passage_context_needs_the_greedy_target():
    with pytest.raises(ValueError, match="set target='greedy'"):
        TokenInteractions(lm=TINY_LM, context="passage", target="answer")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"output": "logit"}, "output='logit' is invalid"),
        ({"estimators": []}, "estimators is empty"),
        ({"max_exact_players": 25}, "max_exact_players=25 is invalid"),
        ({"estimators": ["kernel"]}, "estimator 'kernel' is invalid"),
    ],
)
def test_bad_tabular_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        TabularShapley(**options)


def test_token_value_puts_the_template_around_every_coalition():
    tokenizer = build_tokenizer()
    value = TokenValue(
        torch.nn.Identity(), tokenizer, "where was she born", " Paris", prefix_ids=[5, 6], suffix_ids=[7]
    )
    ids = value.sequence(torch.tensor([True, False, False, True])).tolist()
    target = tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    context = tokenizer("where was she born", add_special_tokens=False)["input_ids"]
    kept = [t for t, owner in zip(context, value.owner.tolist(), strict=True) if owner in (-1, 0, 3)]
    assert ids == [5, 6, *kept, 7, *target]


@pytest.mark.parametrize(
    ("context", "target"), [("question", "answer"), ("passage", "greedy")], ids=["question", "passage"]
)
def test_token_interactions_writes_faithfulness_of_every_method(tmp_path, context, target):
    module = TokenInteractions(
        lm=TINY_LM, budget=40, n_holdout=16, context=context, target=target, target_tokens=3, top=3
    )
    data = QADataModule(source=str(SHARED_DATA / "tofu"), eval_splits=["forget01"], max_samples=1, batch_size=1)
    quiet_trainer(default_root_dir=tmp_path, limit_test_batches=1).test(module, datamodule=data)
    results = json.loads((tmp_path / "interactions.json").read_text())
    prompt = results["prompts"][0]
    assert set(prompt["faithfulness"]) == {"proxyspex", "lasso", "leverage_shap"}
    assert all(count == 40 for count in prompt["n_evaluations"].values())
    if context == "question":
        assert len(prompt["players"]) == len(prompt["question"].split())
    else:  # the players are the words of the record's answer, the passage
        answer = json.loads((SHARED_DATA / "tofu" / "forget01.json").read_text().splitlines()[0])["answer"]
        assert prompt["players"] == answer.split()
    assert len(prompt["shapley"]) == len(prompt["players"]) and len(prompt["top_interactions"]) <= 3
    assert (tmp_path / "interactions.png").stat().st_size > 0


def test_results_reach_wandb_as_a_table_and_the_figure(tmp_path, monkeypatch):
    import lightning as L
    import wandb

    from trustlit.loggers import WandbLogger

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logger = WandbLogger(offline=True, save_dir=str(tmp_path), project="attribution")
    trainer = L.Trainer(
        accelerator="cpu", logger=logger, enable_progress_bar=False, limit_test_batches=1, default_root_dir=tmp_path
    )
    module = TabularShapley(n_estimators=5, estimators=["regression/kernel/with"], budget_multiple=4, max_points=2)
    trainer.test(module, datamodule=TabularDataModule(dataset="iris", batch_size=4))
    summary = logger.experiment.summary
    assert {"shapley/table", "shapley/shapley", "test/regression_kernel_with/relative_error"} <= set(summary.keys())
    logger.experiment.finish()
    wandb.teardown()
    images = list((tmp_path / "wandb").glob("offline-run-*/files/media/images/shapley/*.png"))
    assert len(images) == 1 and images[0].read_bytes()[:4] == b"\x89PNG"


def test_null_features_are_left_out_and_get_zero():
    """Features equal to the background are null players: estimating over the others gives the exact values of the
    full game (checked against exact_shapley), 0 for the null ones, within the caller's budget."""
    rng = np.random.default_rng(3)
    weights, background = rng.normal(size=8), rng.normal(size=8)
    x = background.copy()
    x[[1, 4, 6]] += rng.normal(size=3)

    def predict(rows: np.ndarray) -> np.ndarray:
        return rows @ weights + rows[:, 1] * rows[:, 4]

    value = TabularValue(predict, x, background)
    assert value.null_players().tolist() == [True, False, True, True, False, True, False, True]
    result = estimate_over_varying(parse_estimator("regression/leverage/without"), value, 40, 0)
    exact = exact_shapley(value).values
    assert torch.allclose(result.values, exact, atol=1e-10) and result.n_evaluations == 8  # 2^3 coalitions
    assert (result.values[[0, 2, 3, 5, 7]] == 0).all()
    assert torch.equal(
        estimate_over_varying(parse_estimator("unbiased"), TabularValue(predict, x, x), 40, 0).values,
        torch.zeros(8, dtype=torch.float64),
    )


def test_restricted_value_refuses_bad_players():
    game = TabularValue(lambda rows: rows.sum(1), np.ones(3), np.zeros(3))
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 3\)"):
        RestrictedValue(game, [0, 3])
    with pytest.raises(ValueError, match="expected distinct player indices"):
        RestrictedValue(game, [1, 1])
