"""Agnostic learning under instance-targeted poisoning: hypothesis classes of known VC dimension, the paper's
randomized learner, a deterministic ERM baseline, and the adversaries.

Chornomaz, Koren, Moran, Waknine, "Agnostic Learning under Targeted Poisoning: Optimal Rates and the Role of
Randomness" (NeurIPS 2025, arXiv 2506.03075). The adversary sees the sample S (n points) and the target (x, y) and
replaces up to floor(eta n) points of S (the normalized Hamming ball B_eta(S), Section 4: substitution, not
addition); the learner sees the poisoned S' and predicts x. The optimal excess error is Theta~(sqrt(d eta)).

The learner (Lemma 9 with Proposition 6 and Theorem 2):

- split S into S_1 (the first n_1 = floor(n / 2) points) and S_2 (the rest, n_2 = ceil(n / 2));
- draw a k-subset J of [n_1] uniformly, k = floor(sqrt(d / (4 eta))), and let T = S_1[J];
- H_T: one representative of each labelling of T's points realised by H (Sauer-Shelah: |H_T| <= (e k / d)^d);
- exponential weights on S_2: P(h) = exp(-t L_{S_2}(h)) / W with t = sqrt(log |H_T| / eta) (Proposition 6);
- shared randomness in the prediction: with r ~ U(0, 1), predict 1 iff r <= p(S', x), where
  p(S', x) = E_J P_{h ~ exp-weights}[h(x) = 1] (Theorem 2's A_pub: the only random bit is r, so an adversary who
  sees r gains nothing over one who does not).

The paper's bound: excess_{H, D, eta}(A, n) <= 36 sqrt(eta d log(e / (eta d))) for eta < 1 / (4 d), n >= 1 / eta.

The adversaries: the exact smallest flip against ERM; a greedy best-response search against A_pub over S_1 moves
(which rewrite the cover H_T of the J draws holding them) and S_2 moves; the adversary that sees r; and, for contrast,
the naive learner A_priv whose bits (J, r) are public (h drawn by inverse CDF in the cover's order), with the search
that exploits them. The lower bound (Lemmas 12-14): d coins with biases from Lemma 12's U for the per-coin budget
d eta / 2 and its poisoning scheme realised on the sample by a coupling.

Notes: docs/methods/targeted_poisoning.md
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

__all__ = [
    "ERMLearner",
    "FiniteClass",
    "FiniteDistribution",
    "HypothesisClass",
    "IntervalUnions",
    "Intervals",
    "LabeledSample",
    "PiecewiseDistribution",
    "PoisonedSample",
    "RandomizedLearner",
    "Thresholds",
    "attacked_error",
    "check_eta",
    "coin_budget",
    "erm_attack",
    "erm_attack_exhaustive",
    "excess_bound",
    "hard_bias_support",
    "hard_coin_distribution",
    "hard_coin_poisoning",
    "hypothesis_class",
    "loglog_slope",
    "naive_predict",
    "naive_public_attack",
    "population_loss",
    "randomized_attack",
    "seen_bits_attack",
    "shattered",
    "stratified_bits",
    "target_excess",
    "vc_dimension_of_table",
]


def check_eta(eta: float) -> float:
    """``eta`` as a float, or a ValueError when it is outside [0, 1)."""
    if isinstance(eta, bool) or not isinstance(eta, int | float) or not 0.0 <= float(eta) < 1.0:
        raise ValueError(f"eta={eta!r} is invalid, expected a poisoning fraction in [0, 1)")
    return float(eta)


def budget_of(eta: float, n: int) -> int:
    """floor(eta n): the number of points the adversary may replace (B_eta(S), Section 4), computed on eta's decimal
    value (``Fraction(str(eta))``), so that 0.3 * 10 is 3 and no rounding slack grants an extra point."""
    return math.floor(Fraction(str(check_eta(eta))) * n)


def excess_bound(d: int, eta: float) -> float:
    """Theorem 4's upper bound 36 sqrt(eta d log(e / (eta d))) (meaningful for eta < 1 / (4 d))."""
    product = check_eta(eta) * d
    return 0.0 if product == 0 else 36.0 * math.sqrt(product * math.log(math.e / product))


# --------------------------------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class LabeledSample:
    """A training sample: points ``xs`` [n] (reals, or domain indices of a finite class) and labels ``ys`` [n] in
    {0, 1}. Order matters: the randomized learner splits it into its first and second half."""

    xs: np.ndarray
    ys: np.ndarray

    def __post_init__(self) -> None:
        if self.xs.shape != self.ys.shape or self.xs.ndim != 1:
            raise ValueError(f"LabeledSample: xs {self.xs.shape} and ys {self.ys.shape} must be equal 1-D shapes")
        if not np.isin(self.ys, (0, 1)).all():
            raise ValueError("LabeledSample: ys must be labels in {0, 1}")

    def __len__(self) -> int:
        return len(self.xs)


@dataclass(frozen=True)
class PoisonedSample:
    """The adversary's S' and the positions it replaced (|changed| <= floor(eta n))."""

    sample: LabeledSample
    changed: np.ndarray


def replace(sample: LabeledSample, positions: Sequence[int], x: float, label: int) -> PoisonedSample:
    """S with the points at ``positions`` replaced by copies of (x, label)."""
    positions = np.asarray(sorted(set(int(p) for p in positions)), dtype=np.int64)
    xs, ys = sample.xs.copy(), sample.ys.copy()
    xs[positions], ys[positions] = x, label
    return PoisonedSample(LabeledSample(xs, ys), positions)


# --------------------------------------------------------------------------------------------- distributions


@dataclass(frozen=True)
class FiniteDistribution:
    """D over a finite set of points: P(x = points[i]) = weights[i], P(y = 1 | x = points[i]) = p_one[i]."""

    points: np.ndarray
    weights: np.ndarray
    p_one: np.ndarray

    def __post_init__(self) -> None:
        if not (self.points.shape == self.weights.shape == self.p_one.shape):
            raise ValueError("FiniteDistribution: points, weights and p_one must have one shape")
        if (self.weights < 0).any() or not math.isclose(float(self.weights.sum()), 1.0, abs_tol=1e-9):
            raise ValueError("FiniteDistribution: weights must be >= 0 and sum to 1")
        if ((self.p_one < 0) | (self.p_one > 1)).any():
            raise ValueError("FiniteDistribution: p_one must lie in [0, 1]")

    def sample(self, n: int, rng: np.random.Generator) -> LabeledSample:
        index = rng.choice(len(self.points), size=n, p=self.weights)
        return LabeledSample(self.points[index], (rng.random(n) < self.p_one[index]).astype(np.int64))

    def cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points, P(x, y = 0), P(x, y = 1)): the cost of labelling each point 1, resp. 0."""
        return self.points, self.weights * (1 - self.p_one), self.weights * self.p_one


@dataclass(frozen=True)
class PiecewiseDistribution:
    """D on [0, 1]: x ~ U(0, 1), P(y = 1 | x) = p_one[j] on [breaks[j], breaks[j + 1]) (breaks from 0 to 1)."""

    breaks: np.ndarray
    p_one: np.ndarray

    def __post_init__(self) -> None:
        if len(self.breaks) != len(self.p_one) + 1 or self.breaks[0] != 0 or self.breaks[-1] != 1:
            raise ValueError("PiecewiseDistribution: breaks must run from 0 to 1, one more than p_one")
        if (np.diff(self.breaks) <= 0).any() or ((self.p_one < 0) | (self.p_one > 1)).any():
            raise ValueError("PiecewiseDistribution: breaks must increase and p_one lie in [0, 1]")

    def sample(self, n: int, rng: np.random.Generator) -> LabeledSample:
        xs = rng.random(n)
        piece = np.searchsorted(self.breaks, xs, side="right") - 1
        return LabeledSample(xs, (rng.random(n) < self.p_one[piece]).astype(np.int64))

    def cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(piece midpoints, P(piece, y = 0), P(piece, y = 1)): a label constant on each piece is optimal."""
        mass = np.diff(self.breaks)
        return (self.breaks[:-1] + self.breaks[1:]) / 2, mass * (1 - self.p_one), mass * self.p_one


def coin_budget(d: int, eta: float) -> float:
    """The per-coin budget of the lower bound's scheme: Lemma 14 runs Lemma 13 with the oblivious budget eta / 2 (which
    the sample adversary with budget eta realises, Proposition 11), and Lemma 13 gives each coin d times that; Lemma
    12 caps it at 1/16 (its construction for larger budgets). Needs d eta < 1 and eta > 0."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d={d!r} is invalid, expected an integer >= 1")
    if not 0 < check_eta(eta) < 1 / d:
        raise ValueError(f"eta={eta!r} is invalid for d={d}, expected 0 < eta < 1 / d (Lemma 13)")
    return min(d * eta / 2, 1 / 16)


def hard_bias_support(eta_coin: float) -> tuple[np.ndarray, np.ndarray]:
    """Lemma 12's U for a per-coin budget eta_coin <= 1/16: with m the natural number with
    sqrt(eta)/2 <= (2m + 1) eta <= sqrt(eta), U is ½ uniform{2 i eta : |i| <= m} + ½ uniform{±(2m + 1) eta}.
    Returns (support, probabilities)."""
    m = max(0, math.floor((1 / math.sqrt(eta_coin) - 1) / 2))
    inner = 2 * eta_coin * np.arange(-m, m + 1)
    edge = (2 * m + 1) * eta_coin
    support = np.concatenate([inner, [-edge, edge]])
    probabilities = np.concatenate([np.full(2 * m + 1, 0.5 / (2 * m + 1)), [0.25, 0.25]])
    return support, probabilities


def hard_coin_distribution(
    d: int, eta: float, rng: np.random.Generator, biases: np.ndarray | None = None
) -> FiniteDistribution:
    """The lower bound's fixed hard distribution D_u (Lemmas 12-14): d shattered points 0..d-1 with uniform marginal
    and P(y = 1 | x_i) = 1/2 + u_i, u_i drawn i.i.d. from Lemma 12's U for the per-coin budget
    :func:`coin_budget` (``biases``: u given instead of drawn)."""
    support, probabilities = hard_bias_support(coin_budget(d, eta))
    u = rng.choice(support, size=d, p=probabilities) if biases is None else np.asarray(biases, dtype=np.float64)
    return FiniteDistribution(np.arange(d), np.full(d, 1 / d), 0.5 + u)


def hard_coin_poisoning(
    distribution: FiniteDistribution, sample: LabeledSample, x: int, y: int, eta: float, rng: np.random.Generator
) -> PoisonedSample:
    """Lemma 12's poisoning scheme xi_y made a sample attack: the target coin's inner bias u = 2 i eta' (eta' =
    :func:`coin_budget`) moves to u - (2y - 1) eta' (against the target label); the edge biases ±(2m + 1) eta' are
    left alone. The shift is realised by flipping labels y -> 1 - y of the target coin's examples, each with
    probability eta' / P(y | x): a coupling, so S' ~ D_{u'}^n exactly, with about eta n / 2 flips; the cap at
    floor(eta n) binds with probability <= exp(-eta n / 6) (Proposition 11's Chernoff bound)."""
    eta_coin = coin_budget(len(distribution.points), eta)
    u = distribution.p_one[x] - 0.5
    support, _ = hard_bias_support(eta_coin)
    if math.isclose(abs(u), support[-1]):
        return PoisonedSample(sample, np.zeros(0, dtype=np.int64))
    p_label = 0.5 + u if y == 1 else 0.5 - u
    candidates = np.flatnonzero((sample.xs == x) & (sample.ys == y))
    flips = candidates[rng.random(len(candidates)) < eta_coin / p_label][: budget_of(eta, len(sample))]
    ys = sample.ys.copy()
    ys[flips] = 1 - y
    return PoisonedSample(LabeledSample(sample.xs.copy(), ys), flips)


# ------------------------------------------------------------------------------------------- hypothesis classes


class Cover(ABC):
    """H_T: m hypotheses, one per labelling of the cover points realised by the class."""

    @abstractmethod
    def values(self, z: np.ndarray) -> np.ndarray:
        """The m hypotheses at points ``z``: bool [m, len(z)]."""


class HypothesisClass(ABC):
    """A class H of {0, 1}-valued hypotheses with known VC dimension ``vc_dimension``."""

    vc_dimension: int

    @abstractmethod
    def cover(self, points: np.ndarray) -> Cover:
        """H_T for the points of T: one representative per realised labelling (Sauer-Shelah)."""

    @abstractmethod
    def constrained_minima(self, costs: np.ndarray, locations: np.ndarray, forced: int) -> np.ndarray:
        """min over h in H with no restriction / with h(locations[forced]) = 0 / = 1 of
        sum_j costs[c, j, h(locations[j])]: float [C, 3] for ``costs`` [C, u, 2] (C candidate cost tables at the
        same sorted distinct ``locations``)."""


@dataclass(frozen=True)
class _NearestCellCover(Cover):
    """The 1-D classes' cover: each realised labelling of the sorted distinct cover points extended to the line by
    the nearest cover point (cell boundaries at midpoints, a midpoint itself goes right), which stays in the class."""

    centres: np.ndarray
    patterns: np.ndarray

    def values(self, z: np.ndarray) -> np.ndarray:
        cell = np.searchsorted((self.centres[1:] + self.centres[:-1]) / 2, z, side="right")
        return self.patterns[:, cell]


@functools.lru_cache(maxsize=64)
def _union_patterns(k: int, to_the_right: bool, u: int) -> np.ndarray:
    """Labellings of u ordered cells by unions of <= k blocks: a block of ones between toggles 2i and 2i + 1 of
    2j increasing toggle positions in 0..u (j <= k; ``to_the_right``: the last toggle at u)."""
    rows = [np.zeros((1, u), dtype=bool)]
    for blocks in range(1, min(k, (u + 1) // 2) + 1):
        toggles = np.array(list(itertools.combinations(range(u + 1), 2 * blocks)), dtype=np.int64)
        if to_the_right:
            toggles = toggles[toggles[:, -1] == u]
        marks = np.zeros((len(toggles), u + 1), dtype=np.int8)
        np.put_along_axis(marks, toggles, 1, axis=1)
        rows.append(np.cumsum(marks, axis=1)[:, :u] % 2 == 1)
    patterns = np.concatenate(rows)
    patterns.setflags(write=False)
    return patterns


@dataclass(frozen=True)
class IntervalUnions(HypothesisClass):
    """Unions of at most ``k`` closed intervals on the line: VC dimension 2k (k = 1: intervals, d = 2).
    ``to_the_right`` keeps only unions whose last block is unbounded (k = 1: the thresholds 1[x >= a], d = 1)."""

    k: int = 1
    to_the_right: bool = False
    vc_dimension: int = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"IntervalUnions: k={self.k!r} is invalid, expected an integer >= 1")
        if self.to_the_right and self.k != 1:
            raise ValueError("IntervalUnions: to_the_right needs k=1 (thresholds)")
        object.__setattr__(self, "vc_dimension", 1 if self.to_the_right else 2 * self.k)

    def patterns(self, u: int) -> np.ndarray:
        """Every labelling of u ordered points by the class: bool [m, u] (blocks of ones between 2j toggles)."""
        return _union_patterns(self.k, self.to_the_right, u)

    def cover(self, points: np.ndarray) -> Cover:
        centres = np.unique(points)
        return _NearestCellCover(centres, self.patterns(len(centres)))

    def constrained_minima(self, costs: np.ndarray, locations: np.ndarray, forced: int) -> np.ndarray:
        # states s = 0..2k: even = outside after s/2 blocks, odd = inside block (s+1)/2; a cell keeps or advances
        n_states = 2 if self.to_the_right else 2 * self.k + 1
        label = np.arange(n_states) % 2
        results = []
        for restriction in (None, 0, 1):
            best = np.full((costs.shape[0], n_states), np.inf)
            best[:, 0] = 0.0
            for j in range(costs.shape[1]):
                step = costs[:, j, label]
                if j == forced and restriction is not None:
                    step = np.where(label == restriction, step, np.inf)
                moved = np.concatenate([best[:, :1], np.minimum(best[:, 1:], best[:, :-1])], axis=1)
                best = moved + step
            results.append(best.min(axis=1))
        return np.stack(results, axis=1)


class Thresholds(IntervalUnions):
    """Thresholds 1[x >= a] on the line (VC dimension 1)."""

    def __init__(self) -> None:
        super().__init__(1, to_the_right=True)


class Intervals(IntervalUnions):
    """Closed intervals [a, b] on the line (VC dimension 2)."""

    def __init__(self) -> None:
        super().__init__(1)


def shattered(table: np.ndarray, points: Sequence[int]) -> bool:
    """Whether the rows of ``table`` realise all 2^|points| labellings of the columns ``points``."""
    restricted = np.unique(table[:, list(points)], axis=0)
    return len(restricted) == 2 ** len(points)


def vc_dimension_of_table(table: np.ndarray) -> int:
    """The VC dimension of a finite class given as a bool table [|H|, N], by brute-force shattering."""
    d = 0
    for size in range(1, table.shape[1] + 1):
        if 2**size > len(np.unique(table, axis=0)):
            break
        if not any(shattered(table, subset) for subset in itertools.combinations(range(table.shape[1]), size)):
            break
        d = size
    return d


def domain_indices(points: np.ndarray | Sequence[float], size: int) -> np.ndarray:
    """``points`` as indices of a finite domain {0, ..., size - 1}, or a ValueError naming what lies outside it."""
    values = np.asarray(points, dtype=float).reshape(-1)
    bad = values[(values != np.round(values)) | (values < 0) | (values >= size)]
    if bad.size:
        raise ValueError(f"FiniteClass: point {bad[0]!r} is outside the domain, expected an integer in [0, {size})")
    return values.astype(np.int64).reshape(np.shape(points))


@dataclass(frozen=True)
class _TableCover(Cover):
    rows: np.ndarray

    def values(self, z: np.ndarray) -> np.ndarray:
        return self.rows[:, domain_indices(z, self.rows.shape[1])]


class FiniteClass(HypothesisClass):
    """A finite class over the domain {0, ..., N-1} given as a bool table [|H|, N]; its VC dimension is computed by
    brute-force shattering, and a declared ``vc_dimension`` that disagrees is a ValueError."""

    def __init__(self, table: np.ndarray | Sequence[Sequence[int]], vc_dimension: int | None = None) -> None:
        table = np.asarray(table)
        if table.ndim != 2 or table.size == 0 or not np.isin(table, (0, 1)).all():
            raise ValueError(f"FiniteClass: table of shape {table.shape} is invalid, expected a non-empty 0/1 matrix")
        self.table = table.astype(bool)
        computed = vc_dimension_of_table(self.table)
        if vc_dimension is not None and vc_dimension != computed:
            raise ValueError(
                f"FiniteClass: vc_dimension={vc_dimension!r} is inconsistent with the table, which has VC dimension "
                f"{computed}"
            )
        self.vc_dimension = computed

    def cover(self, points: np.ndarray) -> Cover:
        # the first row realising each labelling of T's points is its representative
        _, first = np.unique(self.table[:, domain_indices(points, self.table.shape[1])], axis=0, return_index=True)
        return _TableCover(self.table[np.sort(first)])

    def constrained_minima(self, costs: np.ndarray, locations: np.ndarray, forced: int) -> np.ndarray:
        values = self.table[:, domain_indices(locations, self.table.shape[1])].astype(np.int64)  # [|H|, u]
        totals = np.take_along_axis(costs[:, None, :, :], values[None, :, :, None], axis=3)[..., 0].sum(axis=2)
        at_target = values[:, forced]
        results = [totals.min(axis=1)]
        for label in (0, 1):
            allowed = totals[:, at_target == label]
            results.append(allowed.min(axis=1) if allowed.shape[1] else np.full(len(costs), np.inf))
        return np.stack(results, axis=1)


def population_loss(hclass: HypothesisClass, distribution: FiniteDistribution | PiecewiseDistribution) -> float:
    """inf_{h in H} L_D(h), exactly (the constrained-minimum program on D's cells)."""
    points, cost_one, cost_zero = distribution.cells()
    costs = np.stack([cost_zero, cost_one], axis=1)[None]  # labelling 0 costs P(y = 1), labelling 1 P(y = 0)
    return float(hclass.constrained_minima(costs, points, forced=0)[0, 0])


# --------------------------------------------------------------------------------------------------- learners


def _count_costs(sample: LabeledSample, x: float) -> tuple[np.ndarray, np.ndarray, int]:
    """(sorted distinct locations of S and x, costs [u, 2] of labelling each location 0 / 1, the index of x)."""
    locations = np.unique(np.append(sample.xs, x))
    where = np.searchsorted(locations, sample.xs)
    costs = np.zeros((len(locations), 2))
    np.add.at(costs[:, 0], where[sample.ys == 1], 1.0)  # label 0 errs on the ones
    np.add.at(costs[:, 1], where[sample.ys == 0], 1.0)
    return locations, costs, int(np.searchsorted(locations, x))


@dataclass(frozen=True)
class ERMLearner:
    """Deterministic empirical risk minimisation over the whole class. Its prediction at x is the label of the
    constrained empirical minimum: 1 iff min_{h(x)=1} L_S(h) < min_{h(x)=0} L_S(h), ties -> ``tie_label``
    (every prediction agrees with an empirical risk minimiser). A point x not in S takes the label of an ERM whose
    value at x is free, i.e. the same rule with x added at cost 0."""

    hclass: HypothesisClass
    tie_label: int = 0

    def margins(self, sample: LabeledSample, x: float) -> tuple[float, float]:
        """(min_{h(x)=0} L_S(h), min_{h(x)=1} L_S(h)) in counts."""
        locations, costs, index = _count_costs(sample, x)
        minima = self.hclass.constrained_minima(costs[None], locations, index)[0]
        return float(minima[1]), float(minima[2])

    def predict(self, sample: LabeledSample, x: float) -> int:
        zero, one = self.margins(sample, x)
        return int(one < zero or (one == zero and self.tie_label == 1))

    def probability(self, sample: LabeledSample, x: float) -> float:
        """P[predict 1] (0 or 1: deterministic)."""
        return float(self.predict(sample, x))


def summarise(second: LabeledSample) -> tuple[np.ndarray, np.ndarray, int]:
    """S_2's distinct (location, label) pairs [2, u], their counts [u] and its size: errors are weighted sums."""
    keys, counts = np.unique(second.xs + 1j * second.ys, return_counts=True)  # sorted by location, then label
    return np.stack([keys.real, keys.imag]), counts.astype(np.float64), len(second)


@dataclass(frozen=True)
class _Draw:
    """One draw J of the randomized learner: the cover H_T, its hypotheses' error counts on S_2 and temperature."""

    cover: Cover
    errors: np.ndarray
    temperature: float
    n2: int

    def weights(self, errors: np.ndarray) -> np.ndarray:
        """exp(-t L_{S_2}(h)) normalised (t = inf: uniform over the empirical minimisers)."""
        if math.isinf(self.temperature):
            weights = (errors == errors.min(axis=-1, keepdims=True)).astype(np.float64)
        else:
            weights = np.exp(-self.temperature * (errors - errors.min(axis=-1, keepdims=True)) / self.n2)
        return weights / weights.sum(axis=-1, keepdims=True)


class RandomizedLearner:
    """The paper's learner (Lemma 9 + Theorem 2; module docstring): sample splitting, the cover H_T of a random
    k-subset of S_1, exponential weights on S_2, prediction 1 iff r <= p(S, x) with one shared r ~ U(0, 1).

    Args:
        hclass: the class H (its VC dimension d sets k).
        eta: the budget the learner is tuned for; eta = 0 gives k = n_1 and t = inf (ERM over H_{S_1} on S_2,
            uniform over ties), the consistent no-poisoning limit.
        subsets: how many J draws estimate p(S, x) = E_J[...] (a fixed Monte Carlo set, so p is a deterministic
            function of S, as Theorem 2's A_pub needs; ours: the paper takes the exact expectation).
        seed: seeds the J draws.
        subset_size: overrides k (None: floor(sqrt(d / (4 eta))) clipped to [1, n_1], the paper's).
    """

    def __init__(
        self, hclass: HypothesisClass, eta: float, subsets: int = 32, seed: int = 0, subset_size: int | None = None
    ) -> None:
        self.hclass = hclass
        self.eta = check_eta(eta)
        if isinstance(subsets, bool) or not isinstance(subsets, int) or subsets < 1:
            raise ValueError(f"RandomizedLearner: subsets={subsets!r} is invalid, expected an integer >= 1")
        if subset_size is not None and (not isinstance(subset_size, int) or subset_size < 1):
            raise ValueError(f"RandomizedLearner: subset_size={subset_size!r} is invalid, expected an integer >= 1")
        self.subsets, self.seed, self.subset_size_override = subsets, seed, subset_size

    def subset_size(self, n: int) -> int:
        """k = floor(sqrt(d / (4 eta))) (Lemma 9), clipped to [1, n_1]; n_1 when eta = 0."""
        n1 = n // 2
        if self.subset_size_override is not None:
            return min(self.subset_size_override, n1)
        if self.eta == 0:
            return n1
        return max(1, min(n1, math.floor(math.sqrt(self.hclass.vc_dimension / (4 * self.eta)))))

    def temperature(self, m: int) -> float:
        """t = sqrt(log m / eta) (Proposition 6); inf when eta = 0."""
        return math.inf if self.eta == 0 else math.sqrt(math.log(m) / self.eta)

    def index_sets(self, n: int) -> list[np.ndarray]:
        """The J draws (k-subsets of the first half's positions), fixed by ``seed``; one (all of S_1) when k = n_1,
        since every J is then S_1."""
        k = self.subset_size(n)
        if k == n // 2:
            return [np.arange(k)]
        rng = np.random.default_rng(self.seed)
        return [rng.choice(n // 2, size=k, replace=False) for _ in range(self.subsets)]

    def draw(self, points: np.ndarray, second: LabeledSample | tuple[np.ndarray, np.ndarray, int]) -> _Draw:
        """The :class:`_Draw` of the cover points ``points`` (T's locations) with its errors on S_2 = ``second``
        (or on :func:`summarise`'s summary of it)."""
        pairs, counts, n2 = summarise(second) if isinstance(second, LabeledSample) else second
        cover = self.hclass.cover(points)
        errors = (cover.values(pairs[0]) != pairs[1].astype(bool)) @ counts
        return _Draw(cover, errors, self.temperature(len(errors)), n2)

    def draws(self, sample: LabeledSample) -> list[_Draw]:
        """One :class:`_Draw` per J."""
        n = len(sample)
        if n < 2:
            raise ValueError(f"RandomizedLearner: a sample of {n} points is too small, expected at least 2")
        second = LabeledSample(sample.xs[n // 2 :], sample.ys[n // 2 :])
        return [self.draw(sample.xs[index], second) for index in self.index_sets(n)]

    def probabilities(self, sample: LabeledSample, targets: np.ndarray) -> np.ndarray:
        """p(S, x) = E_J P_{h ~ exp(-t L_{S_2})}[h(x) = 1] at every x in ``targets``."""
        return np.mean([d.weights(d.errors) @ d.cover.values(np.asarray(targets)) for d in self.draws(sample)], axis=0)

    def probability(self, sample: LabeledSample, x: float) -> float:
        """p(S, x) at one target."""
        return float(self.probabilities(sample, np.array([x]))[0])

    def predict(self, sample: LabeledSample, x: float, r: float) -> int:
        """1 iff r <= p(S, x): the shared randomness r ~ U(0, 1) couples the predictions of all samples."""
        return int(r <= self.probability(sample, x))


# ------------------------------------------------------------------------------------------------ adversaries


def _check_target(sample: LabeledSample, y: int, budget: int) -> None:
    if y not in (0, 1):
        raise ValueError(f"y={y!r} is invalid, expected a label in {{0, 1}}")
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or not 0 <= budget <= len(sample):
        raise ValueError(f"budget={budget!r} is invalid, expected an integer in [0, {len(sample)}]")


def _removal_types(sample: LabeledSample, x: float, y: int) -> list[tuple[float, int]]:
    """The distinct (location, label) pairs that may be removed (all but copies of the attack point (x, 1 - y))."""
    pairs = {(float(a), int(b)) for a, b in zip(sample.xs, sample.ys, strict=True)}
    pairs.discard((float(x), 1 - y))
    return sorted(pairs)


def _erm_flipped(minima: np.ndarray, y: int, tie_label: int) -> np.ndarray:
    """Whether ERM predicts 1 - y from the constrained minima [C, 3] (columns: any, h(x) = 0, h(x) = 1)."""
    wrong, right = minima[:, 2 - y], minima[:, 1 + y]
    return (wrong < right) | ((wrong == right) & (tie_label == 1 - y))


def _erm_after(
    learner: ERMLearner, sample: LabeledSample, x: float, y: int, removed: Sequence[dict[tuple[float, int], int]]
) -> np.ndarray:
    """The constrained minima of ERM on S minus each removal multiset plus as many copies of (x, 1 - y): [C, 3]."""
    locations, costs, index = _count_costs(sample, x)
    tables = np.repeat(costs[None], len(removed), axis=0)
    for c, counts in enumerate(removed):
        total = 0
        for (location, label), count in counts.items():
            tables[c, int(np.searchsorted(locations, location)), 1 - label] -= count
            total += count
        tables[c, index, y] += total  # the added copies of (x, 1 - y) err under label y
    return learner.hclass.constrained_minima(tables, locations, index)


def _positions_for(sample: LabeledSample, removed: dict[tuple[float, int], int]) -> list[int]:
    positions = []
    for (location, label), count in removed.items():
        positions.extend(np.flatnonzero((sample.xs == location) & (sample.ys == label))[:count].tolist())
    return positions


def erm_attack(learner: ERMLearner, sample: LabeledSample, x: float, y: int, budget: int) -> PoisonedSample | None:
    """The smallest substitution (at most ``budget`` points) that flips ERM's prediction at the target to 1 - y,
    or None when the budget does not suffice. Each replacement adds a copy of (x, 1 - y), which is optimal: it
    raises the loss of every h with h(x) = y by one and no other (any other point raises those by at most one and
    may raise the others). The removed points are chosen greedily, each step taking the removal that most widens
    the margin min_{h(x)=y} - min_{h(x)=1-y} after the step (exact evaluation of both minima);
    :func:`erm_attack_exhaustive` searches every removal multiset and the tests check the two agree."""
    _check_target(sample, y, budget)
    if learner.predict(sample, x) != y:
        return PoisonedSample(sample, np.zeros(0, dtype=np.int64))
    removed: dict[tuple[float, int], int] = {}
    available = {
        pair: int(((sample.xs == pair[0]) & (sample.ys == pair[1])).sum()) for pair in _removal_types(sample, x, y)
    }
    for _ in range(budget):
        options = [pair for pair, count in available.items() if count > removed.get(pair, 0)]
        if not options:
            return None
        trials = [{**removed, pair: removed.get(pair, 0) + 1} for pair in options]
        minima = _erm_after(learner, sample, x, y, trials)
        flipped = _erm_flipped(minima, y, learner.tie_label)
        choice = int(np.argmax(flipped)) if flipped.any() else int(np.argmax(minima[:, 1 + y] - minima[:, 2 - y]))
        removed = trials[choice]
        if flipped[choice]:
            return replace(sample, _positions_for(sample, removed), x, 1 - y)
    return None


def erm_attack_exhaustive(
    learner: ERMLearner, sample: LabeledSample, x: float, y: int, budget: int
) -> PoisonedSample | None:
    """:func:`erm_attack`'s problem solved by trying every removal multiset of each size up to ``budget`` (small
    samples only): the exact smallest flipping substitution, or None."""
    _check_target(sample, y, budget)
    if learner.predict(sample, x) != y:
        return PoisonedSample(sample, np.zeros(0, dtype=np.int64))
    types = _removal_types(sample, x, y)
    available = [int(((sample.xs == a) & (sample.ys == b)).sum()) for a, b in types]
    for size in range(1, budget + 1):
        trials = [
            dict(zip(types, combo, strict=True))
            for combo in itertools.product(*(range(a + 1) for a in available))
            if sum(combo) == size
        ]
        if not trials:
            continue
        flipped = _erm_flipped(_erm_after(learner, sample, x, y, trials), y, learner.tie_label)
        if flipped.any():
            chosen = {pair: c for pair, c in trials[int(np.argmax(flipped))].items() if c}
            return replace(sample, _positions_for(sample, chosen), x, 1 - y)
    return None


Term = Callable[["_Draw", np.ndarray, np.ndarray], np.ndarray]


def _error_probability(draw: _Draw, at_x: np.ndarray, errors: np.ndarray, y: int) -> np.ndarray:
    """One draw's P_{h ~ exp-weights}[h(x) != y] for each row of candidate error counts ``errors`` [C, m] (``at_x``
    [m]: its hypotheses at x); their mean over the draws is P[A_pub(S')(x) != y]."""
    p_one = draw.weights(errors) @ at_x
    return 1 - p_one if y == 1 else p_one


def _candidate_positions(
    xs: np.ndarray,
    ys: np.ndarray,
    x: float,
    y: int,
    holders: dict[int, tuple[int, ...]],
    used: Sequence[int],
    size: int,
) -> tuple[list[int], list[int]]:
    """The ``size`` S_1 positions nearest to x among those some J holds (``holders``: position -> the draws holding
    it), and the ``size`` nearest S_2 positions: the moves worth trying (an S_1 point no J holds never reaches the
    learner; copies of (x, 1 - y) stay)."""
    # S_1 points at one location held by the same J draws are interchangeable: try one of each
    signature = {(float(xs[p]), draws): p for p, draws in reversed(holders.items()) if p not in used and xs[p] != x}
    first = sorted(signature.values())
    second = [q for q in range(len(xs) // 2, len(xs)) if q not in used and not (xs[q] == x and ys[q] == 1 - y)]
    return tuple(sorted(group, key=lambda p: abs(xs[p] - x))[:size] for group in (first, second))


def _greedy_search(
    learner: RandomizedLearner,
    sample: LabeledSample,
    x: float,
    y: int,
    budget: int,
    index_sets: Sequence[np.ndarray],
    candidates: int,
    term: Term,
    done: Callable[[float], bool],
    first_half: bool = True,
) -> tuple[PoisonedSample, float]:
    """Greedy best response: replace, one point at a time, the candidate (:func:`_candidate_positions`) whose
    replacement by (x, 1 - y) maximises the score, the mean over the draws of ``term``. An S_2 point changes each
    draw's error counts by [h(x) = y] - [h errs on the old point]; an S_1 point changes the cover H_T of the draws
    whose J holds it (only T's locations reach the learner, so its label is irrelevant); ``first_half=False`` tries S_2
    points only. The search stops at a local optimum (no candidate raises the score), when the budget is spent or
    when ``done(score)`` holds. Returns (S', its score)."""
    n = len(sample)
    xs, ys = sample.xs.copy(), sample.ys.copy()
    target = np.array([x])
    draws = [learner.draw(xs[index], LabeledSample(xs[n // 2 :], ys[n // 2 :])) for index in index_sets]
    at_x = [d.cover.values(target)[:, 0] for d in draws]
    terms = np.array([term(d, a, d.errors[None])[0] for d, a in zip(draws, at_x, strict=True)])
    holders: dict[int, tuple[int, ...]] = {}
    for j, index in enumerate(index_sets):
        for p in index.tolist() if first_half else ():
            holders[p] = (*holders.get(p, ()), j)
    holders = dict(sorted(holders.items()))
    used: list[int] = []
    while len(used) < budget and not done(float(terms.mean())):
        first, second = _candidate_positions(xs, ys, x, y, holders, used, candidates)
        options: list[tuple[float, int, list[_Draw], np.ndarray]] = []  # (score, position, draws, their terms)
        if second:
            deltas = [
                (a == bool(y))[:, None].astype(np.float64) - (d.cover.values(xs[second]) != ys[second].astype(bool))
                for d, a in zip(draws, at_x, strict=True)
            ]
            table = np.array(
                [term(d, a, (d.errors[:, None] + z).T) for d, a, z in zip(draws, at_x, deltas, strict=True)]
            )
            best = int(np.argmax(table.mean(axis=0)))
            moved = [dataclasses.replace(d, errors=d.errors + z[:, best]) for d, z in zip(draws, deltas, strict=True)]
            options.append((float(table[:, best].mean()), second[best], moved, table[:, best]))
        summary = summarise(LabeledSample(xs[n // 2 :], ys[n // 2 :])) if first else None
        for p in first:
            points = xs.copy()
            points[p] = x
            moved, moved_terms = list(draws), terms.copy()
            for j in holders[p]:
                moved[j] = learner.draw(points[index_sets[j]], summary)
                moved_terms[j] = term(moved[j], moved[j].cover.values(target)[:, 0], moved[j].errors[None])[0]
            options.append((float(moved_terms.mean()), p, moved, moved_terms))
        if not options:
            break
        value, position, draws_after, terms_after = max(options, key=lambda option: option[0])
        if value <= terms.mean():
            break
        used.append(position)
        xs[position], ys[position] = x, 1 - y
        draws, terms = draws_after, terms_after
        at_x = [d.cover.values(target)[:, 0] for d in draws]
    return replace(sample, used, x, 1 - y), float(terms.mean())


def randomized_attack(
    learner: RandomizedLearner,
    sample: LabeledSample,
    x: float,
    y: int,
    budget: int,
    candidates: int = 8,
    stop_at: float | None = None,
) -> PoisonedSample:
    """A best-response search against the randomized learner A_pub: greedily replace points by copies of (x, 1 - y),
    each step trying the ``candidates`` S_1 points nearest to x among those the J draws hold (one per location and set
    of holding draws: a T point changes the cover H_T, the route Lemma 9's proof bounds by k eta) and the
    ``candidates`` nearest S_2 points (either label), and taking the one that most raises P[A_pub(S')(x) != y]
    (evaluated exactly on p(S', x), all J draws). Greedy is not monotone in its move set, so the search also runs on
    S_2 moves alone and returns the better S'. A search, not a proof of optimality: its error is a lower bound on
    what the best adversary in B_eta(S) achieves. ``stop_at``: stop early once p(S', x) crosses this r (the adversary
    that sees r, :func:`seen_bits_attack`; the path is a prefix of the private one)."""
    _check_target(sample, y, budget)

    def crossed(error: float) -> bool:
        p_one = 1 - error if y == 1 else error
        return stop_at is not None and bool((y == 1 and stop_at > p_one) or (y == 0 and stop_at <= p_one))

    term = functools.partial(_error_probability, y=y)
    index_sets = learner.index_sets(len(sample))
    searches = [
        _greedy_search(learner, sample, x, y, budget, index_sets, candidates, term, crossed, first_half)
        for first_half in (True, False)
    ]
    return max(searches, key=lambda search: search[1])[0]


def seen_bits_attack(
    learner: RandomizedLearner, sample: LabeledSample, x: float, y: int, budget: int, r: float
) -> tuple[PoisonedSample, bool]:
    """The adversary that sees the learner's random bit r (public randomness, Theorem 2): it searches as
    :func:`randomized_attack` and stops once p(S', x) crosses r. Returns (S', whether the prediction is wrong).
    Because the prediction is 1 iff r <= p(S', x), it errs for exactly the r beyond the p the private search reaches:
    seeing r buys nothing."""
    poisoned = randomized_attack(learner, sample, x, y, budget, stop_at=r)
    return poisoned, learner.predict(poisoned.sample, x, r) != y


def _naive_pick(draw: _Draw, r: float | np.ndarray) -> np.ndarray:
    """The hypotheses of H_T that inverse-CDF sampling with the uniform(s) r picks, in the cover's own order."""
    cumulative = np.cumsum(draw.weights(draw.errors))
    return np.minimum(np.searchsorted(cumulative, r, side="left"), len(cumulative) - 1)


def naive_predict(
    learner: RandomizedLearner, sample: LabeledSample, x: float, j: int, r: float | np.ndarray
) -> int | np.ndarray:
    """The naive learner A_priv with its bits used directly: the ``j``-th J draw and h sampled from the exponential
    weights by inverse CDF with the uniform r (hypotheses in the cover's enumeration order); predicts h(x) (an array
    for an array of r). Over uniform (j, r) it has the same P[predict 1] = p(S, x) as A_pub, but with (j, r) public
    it is not monotone in p."""
    draw = learner.draws(sample)[j]
    values = draw.cover.values(np.array([x]))[_naive_pick(draw, r), 0].astype(np.int64)
    return values if isinstance(r, np.ndarray) else int(values)


def _naive_closeness(draw: _Draw, at_x: np.ndarray, errors: np.ndarray, y: int, r: float) -> np.ndarray:
    """Minus the distance from r to the nearest CDF interval of a hypothesis with h(x) != y, for each row of the
    draw's candidate error counts [C, m] (0: the naive learner picks a hypothesis that errs; -1: none can)."""
    weights = draw.weights(errors)
    upper = np.cumsum(weights, axis=-1)
    wrong = at_x != bool(y)
    if not wrong.any():
        return np.full(len(weights), -1.0)
    return -np.maximum(0.0, np.maximum(upper - weights - r, r - upper))[:, wrong].min(axis=1)


def naive_public_attack(
    learner: RandomizedLearner,
    sample: LabeledSample,
    x: float,
    y: int,
    budget: int,
    j: int,
    r: float,
    candidates: int = 8,
) -> tuple[PoisonedSample, bool]:
    """The adversary that sees the naive learner's bits (J_j, r) (:func:`naive_predict`): a greedy search over the
    same moves as :func:`randomized_attack` (S_1 points of the seen J, which rewrite the cover, and S_2 points), each
    step bringing r closest to the CDF interval of a hypothesis that errs at x, until the picked hypothesis errs;
    when that search stalls, the search that raises the draw's total weight on such hypotheses is tried too.
    Returns (S', whether the naive prediction is wrong). Theorem 2's A_pub is never worse against the best adversary
    (its public loss equals the private loss of this learner, which is at most its public loss)."""
    _check_target(sample, y, budget)
    index_sets = [learner.index_sets(len(sample))[j]]
    terms = (functools.partial(_naive_closeness, y=y, r=r), functools.partial(_error_probability, y=y))
    for term in terms:
        poisoned, _ = _greedy_search(learner, sample, x, y, budget, index_sets, candidates, term, lambda _: False)
        if naive_predict(learner, poisoned.sample, x, j, r) != y:
            return poisoned, True
    return poisoned, False


Bits = Sequence[tuple[int, float]]


def stratified_bits(draws: int, pairs: int, seed: int = 0) -> list[tuple[int, float]]:
    """``pairs`` public bits (j, r) for the naive learner: j cycles through the ``draws`` J draws, r is stratified,
    r_i ~ U(i / pairs, (i + 1) / pairs) (the average over them estimates the expectation over (J, r) with less
    variance than independent draws)."""
    rng = np.random.default_rng(seed)
    return [(i % draws, (i + float(rng.random())) / pairs) for i in range(pairs)]


def attacked_error(
    learner: ERMLearner | RandomizedLearner,
    sample: LabeledSample,
    x: float,
    y: int,
    eta: float,
    bits: Bits | None = None,
) -> tuple[float, float]:
    """(P[A(S)(x) != y], P[A(S')(x) != y]) for the clean S and the adversary's S' with budget floor(eta n):
    :func:`erm_attack` against ERM, :func:`randomized_attack` against the randomized learner A_pub; with ``bits``
    (pairs (j, r) of public random bits) the naive learner :func:`naive_predict` against
    :func:`naive_public_attack`, averaged over the pairs."""
    budget = budget_of(eta, len(sample))
    if isinstance(learner, ERMLearner):
        clean = float(learner.predict(sample, x) != y)
        return clean, 1.0 if clean or erm_attack(learner, sample, x, y, budget) is not None else 0.0
    if bits is not None:
        draws = learner.draws(sample)
        at_x = [d.cover.values(np.array([x]))[:, 0] for d in draws]
        before = [at_x[j][_naive_pick(draws[j], r)] != bool(y) for j, r in bits]
        after = [naive_public_attack(learner, sample, x, y, budget, j, r)[1] for j, r in bits]
        return float(np.mean(before)), float(np.mean(after))
    before = learner.probability(sample, x)
    after = learner.probability(randomized_attack(learner, sample, x, y, budget).sample, x)
    return (1 - before, 1 - after) if y == 1 else (before, after)


def target_excess(
    learner: ERMLearner | RandomizedLearner,
    distribution: FiniteDistribution,
    sample: LabeledSample,
    eta: float,
    bits: Bits | None = None,
) -> tuple[float, float]:
    """(clean excess, attacked excess) on a finite domain, exact in the target (x, y) ~ D:
    sum_{x, y} D(x, y) P[A(S^{(x,y)})(x) != y] - inf_h L_D(h), S^{(x,y)} the adversary's answer to that target
    (``bits``: the naive learner with those public bits, see :func:`attacked_error`)."""
    best = population_loss(learner.hclass, distribution)
    clean = attacked = 0.0
    for x, weight, p_one in zip(distribution.points, distribution.weights, distribution.p_one, strict=True):
        for y, mass in ((1, weight * p_one), (0, weight * (1 - p_one))):
            if mass > 0:
                before, after = attacked_error(learner, sample, float(x), y, eta, bits)
                clean, attacked = clean + mass * before, attacked + mass * after
    return clean - best, attacked - best


def hypothesis_class(name: str) -> HypothesisClass:
    """``thresholds`` (d = 1), ``intervals`` (d = 2) or ``unions<k>`` (unions of k intervals, d = 2k)."""
    if name == "thresholds":
        return Thresholds()
    if name == "intervals":
        return Intervals()
    if name.startswith("unions") and name[6:].isdigit() and int(name[6:]) >= 1:
        return IntervalUnions(int(name[6:]))
    raise ValueError(f"hypothesis class {name!r} is invalid, expected thresholds, intervals or unions<k> (k >= 1)")


def loglog_slope(etas: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope of log(value) on log(eta) over the positive values (nan with fewer than two)."""
    pairs = [(math.log(e), math.log(v)) for e, v in zip(etas, values, strict=True) if e > 0 and v > 0]
    if len(pairs) < 2:
        return math.nan
    return float(np.polyfit(*zip(*pairs, strict=True), deg=1)[0])
