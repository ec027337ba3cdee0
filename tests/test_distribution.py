"""Distribution estimation in KL (trustlit/privacy/distribution.py): closed forms on hand-made counts, proper
distributions on edge cases, seeds, bad input, DP Good-Turing against the minimax baseline, and canary audits of the
private estimators (and of their noise-off variants, which must fail them)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trustlit.audit import run_canary_audit
from trustlit.privacy.distribution import (
    ESTIMATORS,
    add_constant,
    check_estimators,
    dp_add_constant,
    dp_good_turing,
    dp_good_turing_from_halves,
    dp_minimax,
    empirical,
    good_turing,
    good_turing_from_halves,
    kl_divergence,
    kl_divergences,
    multinomial_counts,
    poisson_counts,
    power_law,
    split_counts,
    token_counts,
    token_distribution,
    uniform,
)

ESTIMATE = {
    "empirical": empirical,
    "add_constant": add_constant,
    "good_turing": good_turing,
    "dp_add_constant": lambda x: dp_add_constant(x, 1.0),
    "dp_minimax": lambda x: dp_minimax(x, 1.0),
    "dp_good_turing": lambda x: dp_good_turing(x, 1.0),
}
EDGE_CASES = {
    "all zeros": [0, 0, 0, 0, 0],
    "one symbol, no sample": [0],
    "one symbol": [7],
    "huge counts": [10**12, 0, 3, 10**9],
    "a batch": [[0, 1, 2, 3], [9, 0, 0, 0]],
}


def test_kl_divergence_closed_form_and_zeros():
    assert kl_divergence([0.5, 0.5], [0.25, 0.75]) == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert kl_divergence([0.2, 0.8], [0.2, 0.8]) == 0.0
    assert kl_divergence([0.0, 1.0], [0.5, 0.5]) == pytest.approx(math.log(2))  # p_i = 0 contributes nothing
    assert kl_divergence([0.5, 0.5], [1.0, 0.0]) == math.inf  # q_i = 0 < p_i
    rows = kl_divergences([0.5, 0.5], [[0.25, 0.75], [0.5, 0.5]])
    assert rows == pytest.approx([kl_divergence([0.5, 0.5], [0.25, 0.75]), 0.0])


def test_empirical_and_add_constant_closed_forms():
    assert empirical([3, 0, 1]) == pytest.approx([0.75, 0.0, 0.25])
    assert empirical([0, 0]) == pytest.approx([0.5, 0.5])
    assert add_constant([3, 0, 1]) == pytest.approx(np.array([3.5, 0.5, 1.5]) / 5.5)
    assert add_constant([3, 0, 1], c=1.0) == pytest.approx(np.array([4, 1, 2]) / 7)


def test_good_turing_from_halves_by_hand():
    # Algorithm 1: L = {x = 0} = symbols 0, 1 share c = max(1 + 0, 1) = 1; the others keep max(x', 1): 2, 1, 4
    q = good_turing_from_halves([0, 0, 1, 1, 5], [1, 0, 2, 0, 4])
    assert q == pytest.approx(np.array([0.5, 0.5, 2, 1, 4]) / 8)
    # three unseen symbols share the one held-out sample of L, 1/3 each
    q = good_turing_from_halves([0, 0, 0, 2], [1, 0, 0, 3])
    assert q == pytest.approx(np.array([1 / 3, 1 / 3, 1 / 3, 3]) / 4)
    # no held-out sample in L: its mass is truncated at 1
    q = good_turing_from_halves([0, 0, 2], [0, 0, 4])
    assert q == pytest.approx(np.array([0.5, 0.5, 4]) / 5)


def test_good_turing_is_the_halves_estimate_of_its_split():
    x = [4, 0, 9, 1, 1, 30]
    first, second = split_counts(x, seed=3)
    assert (first + second == np.array(x)).all() and (first >= 0).all() and (second >= 0).all()
    assert good_turing(x, seed=3) == pytest.approx(good_turing_from_halves(first, second))


def test_dp_good_turing_from_halves_without_noise_by_hand():
    # epsilon = 1: b = 2, c = max(b, 1) = 2, T = 2 ln 5 = 3.22, so L = symbols 1, 2, 3 (first-part counts 0, 1, 3).
    # L's held-out count 0 is truncated at c and scaled by 1 / (1 - alpha): 20, shared as max(x, c) = 2, 2, 3 of 7;
    # frequent symbols keep max(x, c) + max(x', c): 30 + 10 and 10 + 2; total 72
    q = dp_good_turing_from_halves([30, 0, 1, 3, 10], [10, 0, 0, 0, 2], 1.0, alpha=0.9, noise=False)
    assert q == pytest.approx(np.array([40, 40 / 7, 40 / 7, 60 / 7, 12]) / 72)
    # epsilon = 10: b = 0.2, c = 1, T = 0.2 ln 2 = 0.14: no rare symbol; max(x, 1) + max(x', 1)
    q = dp_good_turing_from_halves([8, 9], [1, 0], 10.0, noise=False)
    assert q == pytest.approx(np.array([9, 10]) / 19)
    # alpha = 1/2: L's held-out count 3 is doubled (6) and shared 2 : 1 by max(x, c) = 2, 1
    q = dp_good_turing_from_halves([5, 0, 0], [4, 3, 0], 10.0, alpha=0.5, noise=False)
    assert q == pytest.approx(np.array([5 + 4, 3, 3]) / 15)


def test_private_estimators_without_noise_are_their_closed_forms():
    x = np.array([6, 0, 1, 3])
    assert dp_add_constant(x, 1.0, noise=False) == pytest.approx(add_constant(x))
    assert dp_minimax(x, 1.0, noise=False) == pytest.approx(np.array([6, 2, 2, 3]) / 13)  # c = b = 2
    assert dp_minimax(x, 10.0, noise=False) == pytest.approx(np.array([6, 1, 1, 3]) / 11)  # c = 1 > b = 0.2
    # dp_good_turing is dp_good_turing_from_halves on the split (alpha = 0.9) of its own seed
    first, second = split_counts(x, seed=5, alpha=0.9)
    expected = dp_good_turing_from_halves(first, second, 1.0, noise=False)
    assert dp_good_turing(x, 1.0, seed=5, noise=False) == pytest.approx(expected)


@pytest.mark.parametrize("case", list(EDGE_CASES))
@pytest.mark.parametrize("name", list(ESTIMATE))
def test_every_estimator_returns_a_distribution(name, case):
    counts = np.array(EDGE_CASES[case])
    q = ESTIMATE[name](counts)
    assert q.shape == counts.shape and np.isfinite(q).all()
    assert q.sum(axis=-1) == pytest.approx(np.ones(counts.shape[:-1]))
    if name == "empirical":  # zero on unseen symbols, by definition
        assert (q >= 0).all()
    else:
        assert (q > 0).all()


@pytest.mark.parametrize("name", ["good_turing", "dp_add_constant", "dp_minimax", "dp_good_turing"])
def test_seeds_make_runs_repeatable(name):
    x = poisson_counts(power_law(50, 1.0), 200, seed=1)[0]
    same = ESTIMATORS[name](x, 1.0, 7), ESTIMATORS[name](x, 1.0, 7)
    assert np.array_equal(*same)
    assert not np.array_equal(same[0], ESTIMATORS[name](x, 1.0, 8))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: add_constant([1, -2, 3]), r"counts\[1\]=-2 is invalid, expected non-negative integer counts"),
        (lambda: good_turing([1.5, 2]), r"counts\[0\]=1.5 is invalid"),
        (lambda: dp_minimax([[1, 2], [3, -1]], 1.0), r"counts\[\(1, 1\)\]=-1 is invalid"),
        (lambda: empirical([]), r"counts has shape \(0,\)"),
        (lambda: empirical(np.zeros((2, 2, 2))), r"counts has shape \(2, 2, 2\)"),
        (lambda: dp_good_turing([1, 2], 0.0), "epsilon must be a finite number > 0, got 0.0"),
        (lambda: dp_minimax([1, 2], -1.0), "epsilon must be a finite number > 0, got -1.0"),
        (lambda: dp_add_constant([1, 2], math.nan), "epsilon must be a finite number > 0, got nan"),
        (lambda: add_constant([1, 2], c=0), "c must be a finite number > 0, got 0.0"),
        (lambda: kl_divergence([0.5, 0.5], [0.2, 0.3, 0.5]), r"q has shape \(3,\), expected \[2\]"),
        (lambda: kl_divergence([0.5, 0.6], [0.5, 0.5]), "p sums to 1.1, expected a probability vector"),
        (lambda: good_turing_from_halves([1, 2], [1]), "the halves must have one shape"),
        (lambda: dp_good_turing([1, 2], 1.0, alpha=1.0), "alpha=1.0 is invalid, expected a fraction strictly"),
        (lambda: split_counts([1, 2], alpha=0), "alpha=0 is invalid"),
        (lambda: check_estimators(["dp_magic"]), r"estimators=\['dp_magic'\] is invalid"),
        (lambda: power_law(0, 1.0), "d=0 is invalid"),
        (lambda: poisson_counts(uniform(3), -5), "n=-5 is invalid"),
    ],
)
def test_bad_input_is_one_line_value_error(call, message):
    with pytest.raises(ValueError, match=message) as error:
        call()
    assert "\n" not in str(error.value)


def test_samplers():
    p = power_law(4, 2.0)
    assert p.sum() == pytest.approx(1.0) and p[0] / p[1] == pytest.approx(4.0)
    assert uniform(5) == pytest.approx(np.full(5, 0.2))
    x = multinomial_counts(p, 100, draws=3, seed=0)
    assert x.shape == (3, 4) and (x.sum(axis=1) == 100).all()
    # Poisson model: means n p over many draws (standard error < 0.5 % of n p_1 = 1000 here, so 2 % is > 4 sigma)
    y = poisson_counts(p, 1000, draws=2000, seed=0)
    assert y.mean(axis=0) == pytest.approx(1000 * p, rel=0.02)


def test_split_halves_are_independent_poisson_halves():
    # x ~ Poi(lambda) thinned by alpha: Poi(alpha lambda), Poi((1 - alpha) lambda), uncorrelated (4 sigma, 20,000 draws)
    x = poisson_counts([1.0], 40, draws=20_000, seed=2)[:, 0]
    first, second = split_counts(x, seed=4)
    assert first.mean() == pytest.approx(20.0, abs=4 * math.sqrt(20 / 20_000))
    assert first.var() == pytest.approx(20.0, rel=0.05)
    assert abs(np.corrcoef(first, second)[0, 1]) < 4 / math.sqrt(20_000)
    first, second = split_counts(x, seed=4, alpha=0.9)  # Poi(36) and Poi(4)
    assert first.mean() == pytest.approx(36.0, abs=4 * math.sqrt(36 / 20_000))
    assert second.var() == pytest.approx(4.0, rel=0.05)


def test_dp_good_turing_beats_the_minimax_baseline_on_a_power_law():
    # beta = 1.5, d = 1000, n = 1000, epsilon = 1 (measured 0.38 vs 0.97): 10 draws, margin 25 %
    p = power_law(1000, 1.5)
    x = poisson_counts(p, 1000, draws=10, seed=11)
    good_turing_kl = kl_divergences(p, dp_good_turing(x, 1.0, seed=12))
    minimax_kl = kl_divergences(p, dp_minimax(x, 1.0, seed=12))
    assert good_turing_kl.mean() < 0.75 * minimax_kl.mean()


def test_token_distribution_cuts_to_the_top_d():
    assert token_distribution([0, 5, 2, 0, 1], d=2) == pytest.approx([5 / 7, 2 / 7])
    assert token_distribution([0, 3, 1], d=5) == pytest.approx([0.75, 0.25, 0, 0, 0])


def test_token_counts_count_and_cache(tmp_path, monkeypatch):
    texts = ["Who wrote the book?", "The book was written by Jaime Vasquez."]
    counts = token_counts(texts, cache=tmp_path / "tiny.npy")
    assert counts.ndim == 1 and counts.size == 49152 and 10 <= counts.sum() <= 30
    # the second call reads the cached counts: the tokenizer is not loaded again
    monkeypatch.setattr("trustlit.privacy.distribution.smollm2_tokenizer", lambda: pytest.fail("tokenizer loaded"))
    assert np.array_equal(token_counts(texts, cache=tmp_path / "tiny.npy"), counts)
    assert len(list(tmp_path.glob("tiny-*.npy"))) == 1


NEIGHBOURS = (np.array([5, 5, 5, 5]), np.array([4, 6, 5, 5]))  # one sample moved from symbol 0 to symbol 1


def audit_bound(estimate, runs: int = 300) -> float:
    """The canary audit's epsilon lower bound (confidence 95 %, delta = 0) for ``estimate(counts, seed)`` on the
    neighbouring counts, scored by log(q_1 / q_0)."""

    def train_and_score(include_canary: bool, seed: int) -> float:
        q = estimate(NEIGHBOURS[1] if include_canary else NEIGHBOURS[0], seed)
        return float(np.log(q[1] / q[0]))

    return run_canary_audit(train_and_score, runs=runs, delta=0.0).epsilon_lb


@pytest.mark.parametrize("name", ["dp_minimax", "dp_good_turing"])
def test_canary_audit_stays_below_the_claim_and_catches_noise_off(name):
    estimator = {"dp_minimax": dp_minimax, "dp_good_turing": dp_good_turing}[name]
    claimed = 1.0
    private = audit_bound(lambda x, seed: estimator(x, claimed, seed=seed))
    broken = audit_bound(lambda x, seed: estimator(x, claimed, seed=seed, noise=False))
    assert private < claimed < broken


def run_analysis(tmp_path, datamodule, **options):
    from helpers import quiet_trainer

    from trustlit.privacy.distribution_analysis import PrivateDistributionEstimation

    module = PrivateDistributionEstimation(**options)
    quiet_trainer(default_root_dir=tmp_path).test(module, datamodule=datamodule)
    return module, json.loads((tmp_path / "distribution.json").read_text())


def test_analysis_module_counts_the_batches_and_scores_each_estimator(tmp_path):
    from trustlit.data.distribution_samples import DistributionSamples

    data = DistributionSamples(source="power_law", d=50, beta=1.0, n=3000, batch_size=256, seed=4)
    _, results = run_analysis(tmp_path, data, epsilons=[1.0, 10.0], draws=4, fractions=[1.0, 0.1])
    counts = np.bincount(data.samples.numpy(), minlength=50)
    assert results["n"] == counts.sum() and results["d"] == 50
    # 2 non-private + 3 private x 2 epsilons, at 2 fractions
    assert len(results["table"]) == 2 * (2 + 3 * 2)
    # add-constant is deterministic: its KL at the whole sample is the closed form's
    assert results["kl/add_constant"] == pytest.approx(kl_divergence(data.probabilities, add_constant(counts)))
    assert results["kl/dp_good_turing/eps=10"] > 0 and (tmp_path / "distribution.png").is_file()


def test_analysis_module_without_a_truth_writes_the_estimates(tmp_path):
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    class Symbols(L.LightningDataModule):
        d = 3

        def test_dataloader(self) -> DataLoader:
            return DataLoader(torch.tensor([0, 0, 1, 0, 2, 0]), batch_size=4)

    _, results = run_analysis(tmp_path, Symbols(), estimators=["add_constant"], draws=2, fractions=[1.0])
    assert results["table"] == [] and results["estimates"]["add_constant"] == pytest.approx([4.5 / 7.5, 1 / 5, 1 / 5])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"epsilons": [0.0]}, "epsilon=0.0 is invalid"),
        ({"fractions": [1.5]}, "fraction=1.5 is invalid"),
        ({"estimators": ["dp_magic"]}, "estimators=\\['dp_magic'\\] is invalid"),
        ({"draws": 0}, "draws=0 is invalid"),
    ],
)
def test_analysis_module_bad_arguments(options, message):
    from trustlit.privacy.distribution_analysis import PrivateDistributionEstimation

    with pytest.raises(ValueError, match=message):
        PrivateDistributionEstimation(**options)
