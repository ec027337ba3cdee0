"""Targeted poisoning (trustlit.attacks.targeted_poisoning): VC dimensions by brute force, the constrained-minimum
program against enumeration, ERM's exact attack, the adversaries' budgets and bookkeeping, consistency at eta = 0,
the randomized learner's sqrt(d eta) growth under attack, the naive public-bits learner, and the lower bound's
hard distribution and poisoning scheme."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from trustlit.attacks.targeted_poisoning import (
    ERMLearner,
    FiniteClass,
    FiniteDistribution,
    Intervals,
    IntervalUnions,
    LabeledSample,
    PiecewiseDistribution,
    RandomizedLearner,
    Thresholds,
    _error_probability,
    _greedy_search,
    budget_of,
    check_eta,
    coin_budget,
    erm_attack,
    erm_attack_exhaustive,
    hard_bias_support,
    hard_coin_distribution,
    hard_coin_poisoning,
    naive_predict,
    naive_public_attack,
    population_loss,
    randomized_attack,
    seen_bits_attack,
    stratified_bits,
    target_excess,
    vc_dimension_of_table,
)

CLASSES = [Thresholds(), Intervals(), IntervalUnions(2)]
GRID = np.arange(12.0)
# a label-noise agnostic distribution on 12 points: P(y = 1 | x) = 0.8 inside [3, 8], 0.25 outside
NOISY = FiniteDistribution(GRID, np.full(12, 1 / 12), np.where((GRID >= 3) & (GRID <= 8), 0.8, 0.25))


def changed_points(before: LabeledSample, after: LabeledSample) -> int:
    return int(((before.xs != after.xs) | (before.ys != after.ys)).sum())


@pytest.mark.parametrize("eta", [-0.1, 1.0, 1.5, float("nan")])
def test_eta_outside_unit_interval_is_refused(eta: float) -> None:
    with pytest.raises(ValueError, match="eta="):
        check_eta(eta)
    with pytest.raises(ValueError, match="eta="):
        RandomizedLearner(Intervals(), eta)


def test_vc_dimension_of_small_tables_by_shattering() -> None:
    thresholds = np.array([[int(i >= a) for i in range(4)] for a in range(5)])
    assert vc_dimension_of_table(thresholds) == 1
    everything = np.array(list(itertools.product([0, 1], repeat=3)))
    assert vc_dimension_of_table(everything) == 3
    assert vc_dimension_of_table(np.array([[0, 1, 1]])) == 0
    assert FiniteClass(everything, vc_dimension=3).vc_dimension == 3
    with pytest.raises(ValueError, match="vc_dimension=2 is inconsistent"):
        FiniteClass(everything, vc_dimension=2)
    with pytest.raises(ValueError, match="table"):
        FiniteClass([[0, 2]])


@pytest.mark.parametrize("point", [1.5, -1, 3])
def test_finite_class_refuses_points_outside_its_domain(point: float) -> None:
    everything = FiniteClass(np.array(list(itertools.product([0, 1], repeat=3))))
    with pytest.raises(ValueError, match=r"outside the domain, expected an integer in \[0, 3\)"):
        everything.cover(np.array([0, point]))
    costs = np.zeros((1, 2, 2))
    with pytest.raises(ValueError, match="outside the domain"):
        everything.constrained_minima(costs, np.array([0, point]), forced=0)


def test_budget_is_the_floor_of_eta_n_without_slack() -> None:
    assert budget_of(0.29, 100) == 29  # 0.29 * 100 is 28.999999999999996 in binary floating point
    assert budget_of(0.57, 100) == 57
    assert budget_of(0.1, 29) == 2
    assert budget_of(0.0, 1000) == 0
    assert budget_of(0.999, 1000) == 999


@pytest.mark.parametrize(("hclass", "d"), [(Thresholds(), 1), (Intervals(), 2), (IntervalUnions(2), 4)])
def test_interval_classes_realise_exactly_their_labellings(hclass: IntervalUnions, d: int) -> None:
    patterns = hclass.patterns(7)
    assert hclass.vc_dimension == d
    assert vc_dimension_of_table(patterns) == d  # brute-force shattering of the class on 7 points
    assert len(np.unique(patterns, axis=0)) == len(patterns)  # one row per labelling
    blocks = (np.diff(np.concatenate([np.zeros((len(patterns), 1)), patterns], axis=1), axis=1) == 1).sum(axis=1)
    assert blocks.max() == hclass.k
    expected = 8 if hclass.to_the_right else sum(math.comb(8, 2 * j) for j in range(hclass.k + 1))
    assert len(patterns) == expected  # thresholds: u + 1; unions: sum_j C(u + 1, 2j)


@pytest.mark.parametrize("hclass", [*CLASSES, FiniteClass(np.array(list(itertools.product([0, 1], repeat=4)))[::3])])
def test_constrained_minima_match_enumeration(hclass) -> None:
    rng = np.random.default_rng(0)
    locations = np.arange(4.0) if isinstance(hclass, FiniteClass) else np.sort(rng.random(6))
    table = hclass.table[:, :4] if isinstance(hclass, FiniteClass) else hclass.patterns(6)
    costs = rng.random((3, len(locations), 2))
    minima = hclass.constrained_minima(costs, locations, forced=2)
    totals = np.take_along_axis(costs[:, None], table.astype(int)[None, ..., None], axis=3)[..., 0].sum(axis=2)
    np.testing.assert_allclose(minima[:, 0], totals.min(axis=1))
    for label in (0, 1):
        np.testing.assert_allclose(minima[:, 1 + label], totals[:, table[:, 2] == label].min(axis=1))


def test_cover_extends_each_labelling_of_t_inside_the_class() -> None:
    cover = IntervalUnions(2).cover(np.array([0.5, 0.1, 0.9, 0.3]))
    np.testing.assert_array_equal(cover.values(np.array([0.1, 0.3, 0.5, 0.9])), IntervalUnions(2).patterns(4))
    extended = cover.values(np.linspace(0, 1, 41))  # nearest-point extension: still <= 2 blocks of ones
    starts = (np.diff(np.concatenate([np.zeros((len(extended), 1)), extended], axis=1), axis=1) == 1).sum(axis=1)
    assert starts.max() <= 2


def test_exponential_weights_closed_form_on_a_tiny_sample() -> None:
    # T = S_1 = {0, 2} (k = n_1), S_2 = [(1, 1), (3, 0)]; thresholds on T: a in {<0, (0,2], >2} -> 3 hypotheses
    sample = LabeledSample(np.array([0.0, 2.0, 1.0, 3.0]), np.array([0, 1, 1, 0]))
    learner = RandomizedLearner(Thresholds(), eta=0.1, subsets=1, subset_size=2)
    # the cover's nearest-point cells split at 1: S_2's point 1.0 falls in the right cell (a midpoint goes right)
    values = Thresholds().cover(np.array([0.0, 2.0])).values(np.array([1.0, 3.0]))
    errors = (values != np.array([True, False])).sum(axis=1)
    t = math.sqrt(math.log(3) / 0.1)
    weights = np.exp(-t * errors / 2)
    at_x = Thresholds().cover(np.array([0.0, 2.0])).values(np.array([2.5]))[:, 0]
    assert learner.probability(sample, 2.5) == pytest.approx(weights @ at_x / weights.sum())


def test_erm_exact_attack_flips_a_hand_made_sample() -> None:
    # intervals; five ones at 0.4..0.6, zeros far out: ERM labels 0.5 one
    xs = np.array([0.0, 0.1, 0.4, 0.45, 0.5, 0.55, 0.6, 0.9, 1.0])
    ys = np.array([0, 0, 1, 1, 1, 1, 1, 0, 0])
    sample, erm = LabeledSample(xs, ys), ERMLearner(Intervals())
    assert erm.predict(sample, 0.5) == 1
    # an interval can drop 0.5 only by ending before it or starting after it: cheapest drops {0.4, 0.45, 0.5}
    # (3 errors) against 0 errors; each replacement of a one at 0.4-0.5 by (0.5, 0) moves the margin by 2
    assert erm_attack(erm, sample, 0.5, 1, budget=1) is None
    poisoned = erm_attack(erm, sample, 0.5, 1, budget=4)
    assert poisoned is not None and len(poisoned.changed) == 2
    assert changed_points(sample, poisoned.sample) == 2
    assert erm.predict(poisoned.sample, 0.5) == 0
    exhaustive = erm_attack_exhaustive(erm, sample, 0.5, 1, budget=4)
    assert exhaustive is not None and len(exhaustive.changed) == 2


def test_greedy_erm_attack_is_exact_on_random_small_samples() -> None:
    rng = np.random.default_rng(1)
    compared = 0
    for trial in range(60):
        hclass = CLASSES[trial % 3]
        distribution = FiniteDistribution(np.arange(5.0), np.full(5, 0.2), rng.random(5))
        sample = distribution.sample(10, rng)
        x, y = float(rng.integers(5)), int(rng.integers(2))
        erm = ERMLearner(hclass)
        if erm.predict(sample, x) != y:
            continue
        greedy, exact = erm_attack(erm, sample, x, y, 5), erm_attack_exhaustive(erm, sample, x, y, 5)
        assert (greedy is None) == (exact is None)
        if exact is not None:
            assert len(greedy.changed) == len(exact.changed)
            assert erm.predict(greedy.sample, x) == 1 - y
        compared += 1
    assert compared >= 20


@pytest.mark.parametrize("eta", [0.01, 0.05, 0.2])
def test_adversaries_never_exceed_the_budget(eta: float) -> None:
    rng = np.random.default_rng(2)
    sample = NOISY.sample(120, rng)
    budget = budget_of(eta, len(sample))
    learner = RandomizedLearner(Intervals(), eta, subsets=4)
    for x in (0.0, 5.0, 11.0):
        for y in (0, 1):
            attacks = [
                randomized_attack(learner, sample, x, y, budget),
                seen_bits_attack(learner, sample, x, y, budget, 0.5)[0],
                naive_public_attack(learner, sample, x, y, budget, 1, 0.3)[0],
            ]
            erm = erm_attack(ERMLearner(Intervals()), sample, x, y, budget)
            attacks += [] if erm is None else [erm]
            for attack in attacks:
                assert len(attack.changed) <= budget
                assert changed_points(sample, attack.sample) <= budget
    coins = hard_coin_distribution(4, eta, rng)
    coin_sample = coins.sample(200, rng)
    poisoned = hard_coin_poisoning(coins, coin_sample, 1, 1, eta, rng)
    assert changed_points(coin_sample, poisoned.sample) <= budget_of(eta, 200)


@pytest.mark.parametrize("hclass", [*CLASSES, FiniteClass(np.array(list(itertools.product([0, 1], repeat=3))))])
def test_unpoisoned_learners_are_consistent(hclass) -> None:
    # eta = 0: the clean excess error, exact in the target, falls below 0.02 by n = 2000 (mean of 3 seeds)
    if isinstance(hclass, FiniteClass):
        distribution = FiniteDistribution(np.arange(3), np.array([0.5, 0.3, 0.2]), np.array([0.7, 0.4, 0.6]))
    else:
        distribution = NOISY
    for learner in (RandomizedLearner(hclass, 0.0), ERMLearner(hclass)):
        small, large = (
            np.mean(
                [
                    target_excess(learner, distribution, distribution.sample(n, np.random.default_rng(s)), 0)[0]
                    for s in range(3)
                ]
            )
            for n in (20, 2000)
        )
        assert large <= 0.02
        assert large <= small


def test_population_loss_on_a_continuous_distribution() -> None:
    distribution = PiecewiseDistribution(np.array([0, 0.3, 0.7, 1.0]), np.array([0.2, 0.9, 0.1]))
    assert population_loss(Intervals(), distribution) == pytest.approx(0.3 * 0.2 + 0.4 * 0.1 + 0.3 * 0.1)
    # thresholds: the best is 1[x >= 0.3] (0.06 + 0.04 + 0.27) against all-zero 0.45, 1[x >= 0.7] 0.69, all-one 0.55
    assert population_loss(Thresholds(), distribution) == pytest.approx(0.37)


@pytest.mark.slow
def test_randomized_learner_excess_grows_like_sqrt_d_eta() -> None:
    # attacked excess <= C sqrt(d eta log(e / (d eta))) with C = 1 (Theorem 4 states C = 36) on a grid, while
    # ERM's attacked excess is at least 0.5 at the top of the grid (its collapse)
    rng = np.random.default_rng(3)
    for hclass in (Thresholds(), Intervals()):
        d = hclass.vc_dimension
        for eta in (0.02, 0.1):
            sample = NOISY.sample(150, rng)
            _, attacked = target_excess(RandomizedLearner(hclass, eta, subsets=4), NOISY, sample, eta)
            assert attacked <= math.sqrt(d * eta * math.log(math.e / (d * eta)))
        assert target_excess(ERMLearner(hclass), NOISY, NOISY.sample(300, rng), 0.1)[1] >= 0.5


def test_seen_bits_adversary_gains_nothing() -> None:
    # Theorem 2: the adversary that sees r errs exactly when r lies beyond the p(S', x) the private search reaches
    rng = np.random.default_rng(4)
    sample = NOISY.sample(200, rng)
    learner = RandomizedLearner(Intervals(), 0.05, subsets=4)
    budget = budget_of(0.05, 200)
    private = learner.probability(randomized_attack(learner, sample, 5.0, 1, budget).sample, 5.0)
    for r in np.linspace(0.05, 0.95, 7):
        _, wrong = seen_bits_attack(learner, sample, 5.0, 1, budget, float(r))
        assert wrong == (r > private)


def test_hard_distribution_follows_lemma_12() -> None:
    # biases u_i in {2 i eta' : |i| <= m} or {±(2m + 1) eta'}, eta' = d eta, sqrt(eta')/2 <= (2m + 1) eta' <= sqrt(eta')
    eta, d = 0.002, 4
    eta_coin = coin_budget(d, eta)
    assert eta_coin == pytest.approx(d * eta / 2)  # Lemma 14: the oblivious budget eta / 2, times d per coin
    support, probabilities = hard_bias_support(eta_coin)
    edge = support[-1]
    assert math.sqrt(eta_coin) / 2 <= edge <= math.sqrt(eta_coin)
    m = (len(support) - 3) // 2
    np.testing.assert_allclose(support[:-2] / (2 * eta_coin), np.arange(-m, m + 1))
    assert probabilities.sum() == pytest.approx(1) and probabilities[-2:].sum() == pytest.approx(0.5)
    distribution = hard_coin_distribution(d, eta, np.random.default_rng(5))
    assert np.isin(np.round(distribution.p_one - 0.5, 12), np.round(support, 12)).all()
    np.testing.assert_allclose(distribution.weights, 1 / d)


def test_search_bookkeeping_matches_a_fresh_evaluation() -> None:
    # the search updates error counts (S_2 moves) and covers (S_1 moves) incrementally; its final score must equal
    # P[A_pub(S')(x) != y] computed from scratch, and first-half moves must be taken somewhere
    rng = np.random.default_rng(6)
    learner = RandomizedLearner(Intervals(), 0.05, subsets=4)
    sample = NOISY.sample(120, rng)
    index_sets = learner.index_sets(len(sample))
    first_half_used = False
    for x, y in itertools.product((2.0, 5.0, 9.0), (0, 1)):
        term = lambda draw, at_x, errors, y=y: _error_probability(draw, at_x, errors, y)  # noqa: E731
        poisoned, score = _greedy_search(learner, sample, x, y, 6, index_sets, 8, term, lambda _: False)
        p_one = learner.probability(poisoned.sample, x)
        assert score == pytest.approx(1 - p_one if y == 1 else p_one, abs=1e-12)
        first_half_used |= bool((poisoned.changed < len(sample) // 2).any())
        # the returned attack is never weaker than this search
        best = learner.probability(randomized_attack(learner, sample, x, y, 6).sample, x)
        assert (1 - best if y == 1 else best) >= score - 1e-12
    assert first_half_used


def test_naive_learner_has_the_same_marginal_as_a_pub() -> None:
    # over uniform (j, r) the naive learner predicts 1 with probability p(S, x) (inverse-CDF sampling of the
    # exponential weights): a midpoint r grid of 4000 points per draw is exact up to (|H_T| + 1) / 4000
    sample = NOISY.sample(100, np.random.default_rng(7))
    learner = RandomizedLearner(Intervals(), 0.05, subsets=3)
    grid = (np.arange(4000) + 0.5) / 4000
    for x in (1.0, 4.0, 8.0):
        naive = np.mean([naive_predict(learner, sample, x, j, grid) for j in range(3)])
        assert naive_predict(learner, sample, x, 0, 0.5) == naive_predict(learner, sample, x, 0, grid[2000:2001])[0]
        assert naive == pytest.approx(learner.probability(sample, x), abs=0.005)
    bits = stratified_bits(3, 8, seed=1)
    assert [j for j, _ in bits] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert all(i / 8 <= r < (i + 1) / 8 for i, (_, r) in enumerate(bits))


def test_public_bits_help_the_adversary_against_the_naive_learner() -> None:
    # Theorem 2's point: with (J, r) public the naive learner A_priv is easier to attack than A_pub (whose only bit is
    # r): intervals, eta = 0.01, n = 200, the naive learner's attacked excess exceeds A_pub's by at least 0.05
    sample = NOISY.sample(200, np.random.default_rng(8))
    learner = RandomizedLearner(Intervals(), 0.01, subsets=3)
    _, public = target_excess(learner, NOISY, sample, 0.01)
    _, naive = target_excess(learner, NOISY, sample, 0.01, stratified_bits(3, 6))
    assert naive >= public + 0.05


def test_hard_coin_poisoning_is_a_coupling_with_the_shifted_bias() -> None:
    # Lemma 12's scheme: an inner bias u moves by eta' against the target label; the flips realise it exactly, so the
    # target coin's ones lose eta' (n / d) in expectation (checked within 4 standard deviations), about eta n / 2 flips
    d, eta, n = 2, 0.02, 20000
    eta_coin = coin_budget(d, eta)
    support, _ = hard_bias_support(eta_coin)
    coins = hard_coin_distribution(d, eta, np.random.default_rng(0), biases=np.array([support[0], support[-1]]))
    rng = np.random.default_rng(9)
    flips = [len(hard_coin_poisoning(coins, coins.sample(n, rng), 0, 1, eta, rng).changed) for _ in range(20)]
    expected = eta_coin * n / d
    assert abs(np.mean(flips) - expected) <= 4 * math.sqrt(expected / len(flips))
    # the edge coin (bias ±(2m + 1) eta') is left alone, and eta >= 1 / d is refused (Lemma 13 needs d eta < 1)
    assert len(hard_coin_poisoning(coins, coins.sample(200, rng), 1, 1, eta, rng).changed) == 0
    with pytest.raises(ValueError, match=r"eta=0\.5"):
        coin_budget(2, 0.5)
