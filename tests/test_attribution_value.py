"""Games over player masks: the memoising counter, the tabular baseline game and the token game."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trustlit.attribution.shapley import all_masks, exact_shapley
from trustlit.attribution.value import CountingValue, TabularValue, TokenValue, ValueFunction


class Additive:
    """v(S) = sum_{i in S} c_i, counting the masks it is called on."""

    def __init__(self, coef: list[float]) -> None:
        self.coef = torch.tensor(coef, dtype=torch.float64)
        self.n_players = len(coef)
        self.calls = 0

    def __call__(self, masks: torch.Tensor) -> torch.Tensor:
        self.calls += masks.size(0)
        return masks.double() @ self.coef


def test_counting_value_memoises_and_counts_distinct_masks() -> None:
    game = Additive([1.0, 2.0, 4.0])
    counter = CountingValue(game, batch_size=2)
    assert isinstance(counter, ValueFunction)
    masks = torch.tensor([[1, 0, 0], [1, 0, 0], [0, 1, 1], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)
    assert counter(masks).tolist() == [1.0, 1.0, 6.0, 7.0, 6.0]
    assert counter.n_evaluations == 3 and game.calls == 3
    counter(masks[:2])
    assert counter.n_evaluations == 3 and game.calls == 3


def test_masks_of_the_wrong_width_are_refused() -> None:
    with pytest.raises(ValueError, match=r"expected \[B, 3\]"):
        CountingValue(Additive([1.0, 2.0, 3.0]))(torch.ones(2, 4, dtype=torch.bool))


def test_value_of_the_wrong_shape_is_refused() -> None:
    class Bad:
        n_players = 2

        def __call__(self, masks: torch.Tensor) -> torch.Tensor:
            return torch.zeros(masks.size(0), 2)

    with pytest.raises(ValueError, match=r"Bad returned shape \(3, 2\) for 3 masks: expected \(3,\)"):
        CountingValue(Bad())(all_masks(2)[1:])


def test_tabular_value_against_a_hand_computation() -> None:
    def predict(rows: np.ndarray) -> np.ndarray:  # f(x) = x0 * x1 + 2 x2
        return rows[:, 0] * rows[:, 1] + 2 * rows[:, 2]

    x = np.array([2.0, 3.0, 5.0])
    single = TabularValue(predict, x, np.array([1.0, 0.0, -1.0]))
    masks = torch.tensor([[0, 0, 0], [1, 0, 1], [1, 1, 0]], dtype=torch.bool)
    assert single(masks).tolist() == [-2.0, 10.0, 4.0]  # (1*0-2), (2*0+10), (2*3-2)
    background = np.array([[1.0, 0.0, -1.0], [0.0, 2.0, 1.0]])
    averaged = TabularValue(predict, x, background)
    # S = {0}: rows (2, 0, -1) -> -2 and (2, 2, 1) -> 6, mean 2
    assert averaged(torch.tensor([[1, 0, 0]], dtype=torch.bool)).tolist() == [2.0]
    with pytest.raises(ValueError, match=r"background has shape \(2, 2\): expected \[3\] or \[K, 3\]"):
        TabularValue(predict, x, np.zeros((2, 2)))


def test_exact_shapley_of_the_baseline_game_equals_interventional_treeshap() -> None:
    import shap
    from sklearn.datasets import make_regression
    from sklearn.ensemble import GradientBoostingRegressor

    features, target = make_regression(n_samples=200, n_features=6, random_state=0)
    model = GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0).fit(features, target)
    baseline = features.mean(axis=0, keepdims=True)
    x = features[3]
    ours = exact_shapley(TabularValue(model.predict, x, baseline[0])).values.numpy()
    explainer = shap.TreeExplainer(model, data=baseline, feature_perturbation="interventional")
    theirs = explainer.shap_values(x[None])[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    assert abs(ours.sum() - (model.predict(x[None])[0] - model.predict(baseline)[0])) < 1e-6


@pytest.fixture(scope="module")
def tiny_lm():
    from trustlit.llm.loading import load_causal_lm

    torch.manual_seed(0)
    return load_causal_lm("tiny-llama", tiny={"hidden_size": 32, "num_layers": 1, "num_heads": 2})


def direct_logprob(model, tokenizer, context: str, target: str) -> float:
    """log p(target | BOS context), the context and the target tokenized apart, by one plain forward pass."""
    ctx = tokenizer(context, add_special_tokens=False)["input_ids"] if context else []
    tgt = tokenizer(target, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([[tokenizer.bos_token_id, *ctx, *tgt]])
    with torch.no_grad():
        logp = model(input_ids=ids).logits.double().log_softmax(-1)[0]
    start = 1 + len(ctx)
    return float(sum(logp[start + j - 1, t] for j, t in enumerate(tgt)))


def test_token_value_matches_a_direct_sequence_logprob(tiny_lm) -> None:
    model, tokenizer = tiny_lm
    context, target = "The cat sat on the mat.", " It purred."
    value = TokenValue(model, tokenizer, context, target, mode="remove", players="tokens")
    n = value.n_players
    full, empty = value(torch.stack([torch.ones(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)])).tolist()
    assert full == pytest.approx(direct_logprob(model, tokenizer, context, target), abs=1e-4)
    assert empty == pytest.approx(direct_logprob(model, tokenizer, "", target), abs=1e-4)
    # words: dropping "cat" removes its tokens; the space before it stays (it lies outside every word)
    words = TokenValue(model, tokenizer, context, target, players="words")
    assert words.player_texts == ["The", "cat", "sat", "on", "the", "mat."]
    mask = torch.tensor([[True, False, True, True, True, True]])
    ids = words.sequence(mask[0])
    kept = [t for t, o in zip(words.context_ids.tolist(), words.owner.tolist(), strict=True) if o != 1]
    assert ids.tolist() == [tokenizer.bos_token_id, *kept, *words.target_ids.tolist()]
    batched = words(torch.cat([mask, torch.ones(1, 6, dtype=torch.bool)]))  # two lengths in one padded batch
    assert batched[1] == pytest.approx(full, abs=1e-4)
    assert batched[0] == pytest.approx(words(mask)[0].item(), abs=1e-4)


def test_token_value_pad_mode_and_sentences(tiny_lm) -> None:
    model, tokenizer = tiny_lm
    value = TokenValue(model, tokenizer, "One cat. Two dogs!", " Yes.", mode="pad", players="sentences")
    assert value.player_texts == ["One cat.", " Two dogs!"]
    ids = value.sequence(torch.tensor([False, True]))
    assert ids.numel() == 1 + value.context_ids.numel() + value.target_ids.numel()
    context = ids[1 : 1 + value.context_ids.numel()]
    assert (context[value.owner == 0] == tokenizer.pad_token_id).all()
    assert (context[value.owner == 1] == value.context_ids[value.owner == 1]).all()
    out = value(all_masks(2))
    assert out.shape == (4,) and torch.isfinite(out).all()
