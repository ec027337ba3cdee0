"""Exact Shapley values and the unified KernelSHAP family of estimators.

Chen, Seshadri, Villani, Niroula, Chakrabarti, Ray, Deshpande, Yalovetzky, Pistoia, Kumar, "A Unified Framework for
Provably Efficient Algorithms to Estimate Shapley Values", NeurIPS 2025, arXiv:2506.05216. Also Lundberg & Lee 2017
(KernelSHAP), Musco & Witter 2025 (LeverageSHAP, arXiv:2410.01917), Covert & Lee 2021 (unbiased KernelSHAP,
AISTATS, arXiv:2012.01536).

Over the proper non-empty coalitions S (1 <= |S| = s <= n-1) with kernel weight w(s) = (n-1) / (C(n,s) s (n-s)),
Shapley values solve phi = argmin_{1^T phi = v(N) - v(0)} sum_S w(s) (1_S^T phi - v(S) + v(0))^2. With the
projection P = I - 11^T/n and phi = P y + (v(N) - v(0))/n 1 the constraint disappears:

    zbar_S = sqrt(w(s)) P 1_S,    ybar_S = sqrt(w(s)) (v(S) - v(0) - s (v(N) - v(0)) / n),
    phi = Zbar^+ ybar + (v(N) - v(0))/n 1 = (n/(n-1)) Zbar^T ybar + (v(N) - v(0))/n 1    (Zbar^T Zbar = (n-1)/n P).

This is the paper's Theorem 2.1 (phi = Q U^T b_lambda + alpha 1, Q Q^T = P) with lambda = alpha = (v(N) - v(0))/n.

A sketch S (m sampled rows, weight 1/(m p_S) with replacement, 1/q_S without) gives the two estimators:
``regression`` phi_hat = (S Zbar)^+ S ybar + ... (KernelSHAP, LeverageSHAP) and ``matrix_vector``
phi_hat = (n/(n-1)) Zbar^T S^T S ybar + ... (unbiased). Sampling p_S ∝ w(s)^tau (||u_S||^2)^(1-tau) with leverage
scores ||u_S||^2 ∝ w(s) s (n-s) ∝ 1/C(n,s): tau = 1 kernel weights, tau = 0 leverage scores, tau = 1/2 the
paper's modified l2 weights (their geometric mean).

Notes: docs/methods/kernel_shap.md
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from trustlit.attribution.value import CountingValue, ValueFunction

SAMPLINGS = {"kernel": 1.0, "leverage": 0.0, "modified_l2": 0.5}
MAX_EXACT_PLAYERS = 20
# w(s) and p_S are held as float64 per coalition; C(n, n/2) s (n-s) overflows float64 from n = 1011 on (silent zero
# kernel weights from n = 1012, OverflowError from n ~ 1030), so the sampling estimators refuse n > 1000.
MAX_SAMPLED_PLAYERS = 1000
ENUMERATE_LIMIT = 200_000  # strata up to this size are enumerated; larger ones are sampled by rejection


@dataclass
class ShapleyResult:
    """Shapley values [n], the distinct evaluations spent, v(0) and v(N), and what produced them."""

    values: torch.Tensor
    n_evaluations: int
    empty_value: float = 0.0
    full_value: float = 0.0
    method: str = ""
    details: dict = field(default_factory=dict)


def all_masks(n: int, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Masks of the coalitions with integer codes start..stop-1 (bit i = player i), as bool [B, n]."""
    codes = torch.arange(start, 2**n if stop is None else stop, dtype=torch.long)
    return (codes[:, None] >> torch.arange(n)) & 1 == 1


def exact_shapley(value: ValueFunction, batch_size: int = 4096) -> ShapleyResult:
    """phi_i = sum_{S not containing i} s! (n-s-1)! / n! (v(S + i) - v(S)), all 2^n coalitions enumerated in
    batches (n <= 20)."""
    n = int(value.n_players)
    if not 1 <= n <= MAX_EXACT_PLAYERS:
        raise ValueError(f"exact_shapley: n_players={n}; enumeration needs 1 <= n <= {MAX_EXACT_PLAYERS}")
    counter = CountingValue(value, batch_size)
    v = torch.cat([counter(all_masks(n, a, min(a + batch_size, 2**n))) for a in range(0, 2**n, batch_size)])
    codes = torch.arange(2**n)
    sizes = all_masks(n).sum(1)
    weight = torch.tensor(
        [math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n) for s in range(n)], dtype=torch.float64
    )
    values = torch.empty(n, dtype=torch.float64)
    for i in range(n):
        without = codes[(codes >> i) & 1 == 0]
        values[i] = (weight[sizes[without]] * (v[without | (1 << i)] - v[without])).sum()
    return ShapleyResult(values, counter.n_evaluations, float(v[0]), float(v[-1]), "exact")


def kernel_weight(n: int, s: np.ndarray) -> np.ndarray:
    """w(s) = (n-1) / (C(n,s) s (n-s)), the Shapley kernel of a coalition of size s (0 < s < n)."""
    return (n - 1) / (np.array([math.comb(n, int(k)) for k in s], dtype=np.float64) * s * (n - s))


def size_probabilities(n: int, tau: float) -> np.ndarray:
    """p_S for one coalition of each size s = 1..n-1, ∝ w(s)^tau (w(s) s (n-s))^(1-tau), summing to 1 over all S."""
    s = np.arange(1, n)
    w = kernel_weight(n, s)
    with np.errstate(divide="ignore"):
        log_p = tau * np.log(w) + (1 - tau) * np.log(w * s * (n - s))
    counts = np.array([math.comb(n, int(k)) for k in s], dtype=np.float64)
    log_p -= log_p.max()
    p = np.exp(log_p)
    return p / (p * counts).sum()


def inclusion_probabilities(p: np.ndarray, counts: np.ndarray, m: int) -> np.ndarray:
    """q_s = min(1, c p_s) with c chosen so that sum_s counts_s q_s = m (the paper's without-replacement weights).

    Solved exactly by water-filling: with the strata sorted by p_s (largest first) and the first k saturated
    (q = 1), c = (m - sum_{j<k} counts_j) / sum_{j>=k} counts_j p_j; k is the first for which c p_k <= 1. (A
    bisection on c fails once p spans hundreds of orders of magnitude, as it does from n ~ 200 on.)
    """
    order = np.argsort(-p, kind="stable")
    saturated = np.concatenate([[0.0], np.cumsum(counts[order])])[:-1]  # coalitions in the strata before each one
    mass_after = np.cumsum((counts * p)[order][::-1])[::-1]  # sum_{j>=k} counts_j p_j
    with np.errstate(divide="ignore", invalid="ignore"):
        c = (m - saturated) / mass_after
    k = int(np.argmax((c * p[order] <= 1) & (saturated < m)))
    return np.minimum(1.0, c[k] * p)


def systematic_round(expected: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Integers k_j with E[k_j] = expected_j and sum_j k_j = round(sum_j expected_j) (systematic sampling)."""
    edges = np.concatenate([[0.0], np.cumsum(expected)])
    total = round(float(edges[-1]))
    edges[-1] = total  # float round-off must not drop the last point
    points = rng.uniform() + np.arange(total)
    return np.histogram(points, bins=edges)[0] if points.size else np.zeros(len(expected), dtype=int)


@functools.lru_cache(maxsize=64)
def combinations(n: int, s: int) -> np.ndarray:
    """All C(n, s) coalitions of size s as player indices [C(n, s), s]."""
    return np.array(list(itertools.combinations(range(n), s)), dtype=np.int64).reshape(-1, s)


def random_subsets(n: int, s: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct uniformly random coalitions of size s, as bool [k, n]."""
    total = math.comb(n, s)
    if k > total:
        raise ValueError(f"cannot draw {k} distinct coalitions of size {s} from {total}")
    out = np.zeros((k, n), dtype=bool)
    if total <= ENUMERATE_LIMIT:
        out[np.arange(k)[:, None], combinations(n, s)[rng.choice(total, size=k, replace=False)]] = True
        return out
    seen: set[bytes] = set()
    row = 0
    while row < k:
        mask = np.zeros(n, dtype=bool)
        mask[rng.choice(n, size=s, replace=False)] = True
        key = np.packbits(mask).tobytes()
        if key not in seen:
            seen.add(key)
            out[row] = mask
            row += 1
    return out


def sample_without_replacement(
    n: int, m: int, tau: float, paired: bool, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """m distinct proper coalitions, each S included with probability q_S = min(1, c p_S), and weights 1/q_S.

    Per size stratum (or pair of strata {s, n-s} when paired) the count is rounded systematically so that the
    total is exactly m; within a stratum coalitions are uniform, so each S has marginal inclusion q_S. Paired: the
    stratum's coalitions come as complementary pairs, with one half pair when its count is odd.
    """
    p = size_probabilities(n, tau)
    sizes = np.arange(1, n)
    counts = np.array([math.comb(n, int(s)) for s in sizes], dtype=np.float64)
    q = inclusion_probabilities(p, counts, m)
    masks, weights = [], []
    if not paired:
        for s, k in zip(sizes, systematic_round(counts * q, rng), strict=True):
            if k:
                masks.append(random_subsets(n, int(s), int(k), rng))
                weights.append(np.full(k, 1.0 / q[s - 1]))
    else:
        low = sizes[sizes <= n - sizes]  # s <= n - s: one group per pair of strata
        expected = np.array([counts[s - 1] * q[s - 1] * (1 if 2 * s == n else 2) for s in low])
        for s, k in zip(low, systematic_round(expected, rng), strict=True):
            if not k:
                continue
            n_pairs = (k + 1) // 2
            if 2 * s == n:  # the middle stratum pairs with itself: choose pairs, one representative each
                reps = random_pair_representatives(n, int(s), n_pairs, rng)
            else:
                reps = random_subsets(n, int(s), n_pairs, rng)
            both = np.concatenate([reps, ~reps])
            if k % 2:
                both = np.delete(both, len(reps) + n_pairs - 1 if rng.uniform() < 0.5 else n_pairs - 1, axis=0)
            masks.append(both)
            weights.append(np.full(len(both), 1.0 / q[s - 1]))
    return np.concatenate(masks), np.concatenate(weights)


def random_pair_representatives(n: int, s: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """k coalitions of size s = n/2 from distinct complementary pairs (those holding player 0), bool [k, n]."""
    rest = random_subsets(n - 1, s - 1, k, rng)
    reps = np.concatenate([np.ones((k, 1), dtype=bool), rest], axis=1)
    flip = rng.uniform(size=k) < 0.5
    reps[flip] = ~reps[flip]
    return reps


def sample_with_replacement(
    n: int, m: int, tau: float, paired: bool, rng: np.random.Generator, chunk: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """i.i.d. draws S ~ p (and S^c when paired) until m distinct coalitions are held; weights count_S / (M p_S).

    M is the number of draws (twice that when paired, where each draw stands for S and S^c at p_S each). A
    complement that would exceed m distinct coalitions is dropped.
    """
    p = size_probabilities(n, tau)
    size_mass = p * np.array([math.comb(n, int(s)) for s in range(1, n)], dtype=np.float64)
    held: dict[bytes, list] = {}
    draws = 0
    while len(held) < m:
        sizes = rng.choice(np.arange(1, n), size=chunk, p=size_mass / size_mass.sum())
        for s in sizes:
            if len(held) >= m:
                break
            mask = np.zeros(n, dtype=bool)
            mask[rng.choice(n, size=int(s), replace=False)] = True
            draws += 1
            for member in [mask, ~mask] if paired else [mask]:
                key = np.packbits(member).tobytes()
                if key in held:
                    held[key][1] += 1
                elif len(held) < m:
                    held[key] = [member, 1, p[int(member.sum()) - 1]]
    effective = draws * (2 if paired else 1)
    masks = np.stack([h[0] for h in held.values()])
    weights = np.array([h[1] / (effective * h[2]) for h in held.values()])
    return masks, weights


def check_budget(n: int, budget: int) -> None:
    if n < 2:
        raise ValueError(f"n_players={n}: sampling estimators need at least 2 players (use exact_shapley)")
    if n > MAX_SAMPLED_PLAYERS:
        raise ValueError(
            f"n_players={n}: the float64 kernel weights overflow past n = {MAX_SAMPLED_PLAYERS} "
            "(a log-space sampler, as in the paper's high-dimensional implementation, is not implemented)"
        )
    if int(budget) != budget or budget < n + 1:
        raise ValueError(f"budget={budget}: at least n + 1 = {n + 1} evaluations are needed for {n} players")


def tau_of(sampling: str | float) -> float:
    if isinstance(sampling, str):
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling={sampling!r}: valid are {sorted(SAMPLINGS)} or a float tau in [0, 1]")
        return SAMPLINGS[sampling]
    if not 0.0 <= float(sampling) <= 1.0:
        raise ValueError(f"sampling={sampling}: a float tau must lie in [0, 1] (1 kernel, 0 leverage, 0.5 modified_l2)")
    return float(sampling)


def design(masks: np.ndarray, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """sqrt(w(s)) P 1_S rows [m, n] and sqrt(w(s)) [m] for the masks."""
    z = torch.as_tensor(masks, dtype=torch.float64)
    s = z.sum(1)
    per_size = torch.as_tensor(np.sqrt(kernel_weight(n, np.arange(1, n))))  # n - 1 binomials, not one per row
    sqrt_w = per_size[s.long() - 1]
    return sqrt_w[:, None] * (z - s[:, None] / n), sqrt_w


def solve(
    zbar: torch.Tensor, ybar: torch.Tensor, weights: torch.Tensor, estimator: str, n: int, total: float
) -> torch.Tensor:
    """phi_hat from sketched rows: the least-squares or the matrix-vector estimator, plus (v(N) - v(0))/n."""
    if estimator == "matrix_vector":
        y = n / (n - 1) * (zbar * (weights * ybar)[:, None]).sum(0)
    else:
        # every row of zbar lies in range(P), so the minimum-norm least-squares solution does too: it is the
        # constrained solution y in range(P) without projecting the rows onto a basis of range(P) first
        root = weights.sqrt()
        y = torch.linalg.lstsq(root[:, None] * zbar, root * ybar, driver="gelsy").solution  # min-norm, via QR
    return y + total / n


def kernel_shap(
    value: ValueFunction,
    budget: int,
    *,
    estimator: Literal["regression", "matrix_vector"] = "regression",
    sampling: str | float = "leverage",
    replacement: bool = False,
    paired: bool = True,
    seed: int = 0,
    batch_size: int = 1024,
) -> ShapleyResult:
    """The unified KernelSHAP family (Chen et al. 2025): ``budget`` distinct evaluations, v(0) and v(N) included.

    ``estimator="regression", sampling="kernel", replacement=True`` is KernelSHAP (Lundberg & Lee 2017);
    ``"regression", "leverage", replacement=False, paired=True`` is LeverageSHAP (Musco & Witter 2025);
    ``sampling="modified_l2"`` (tau = 1/2) the paper's proposal. When the budget covers all 2^n coalitions every
    variant evaluates them all and returns the exact values.
    """
    n = int(value.n_players)
    check_budget(n, budget)
    if estimator not in ("regression", "matrix_vector"):
        raise ValueError(f"estimator={estimator!r}: valid are 'regression', 'matrix_vector'")
    tau = tau_of(sampling)
    counter = CountingValue(value, batch_size)
    ends = counter(torch.stack([torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool)]))
    v0, total = float(ends[0]), float(ends[1] - ends[0])
    rng = np.random.default_rng(seed)
    m = int(budget) - 2
    if n < 63 and m >= 2**n - 2:  # every proper coalition: the exact solve, whatever the sampler
        masks = all_masks(n, 1, 2**n - 1).numpy()
        weights = np.ones(len(masks))
    elif replacement:
        masks, weights = sample_with_replacement(n, m, tau, paired, rng)
    else:
        masks, weights = sample_without_replacement(n, m, tau, paired, rng)
    v = counter(torch.as_tensor(masks))
    zbar, sqrt_w = design(masks, n)
    ybar = sqrt_w * (v - v0 - zbar.new_tensor(masks.sum(1)) * total / n)
    phi = solve(zbar, ybar, torch.as_tensor(weights), estimator, n, total)
    details = {"estimator": estimator, "tau": tau, "replacement": replacement, "paired": paired, "seed": seed}
    return ShapleyResult(phi, counter.n_evaluations, v0, float(ends[1]), "kernel_shap", details)


def unbiased_kernel_shap(
    value: ValueFunction, budget: int, *, paired: bool = True, seed: int = 0, batch_size: int = 1024
) -> ShapleyResult:
    """Unbiased KernelSHAP (Covert & Lee 2021): phi = A^-1 (b - 1 (1^T A^-1 b - v(N) + v(0)) / (1^T A^-1 1)).

    Coalitions z ~ p(z) ∝ w(|z|) (i.i.d., with their complements when paired); A = E[z z^T] is known in closed form
    (A_ii = 1/2, A_ij = E[s(s-1)/(n(n-1))]) and b_hat = mean_k z_k (v(z_k) - v(0)) is unbiased, so phi_hat is.
    Draws stop once ``budget`` distinct coalitions (v(0), v(N) included) are held; b_hat averages every draw.
    """
    n = int(value.n_players)
    check_budget(n, budget)
    counter = CountingValue(value, batch_size)
    ends = counter(torch.stack([torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool)]))
    v0, total = float(ends[0]), float(ends[1] - ends[0])
    rng = np.random.default_rng(seed)
    masks, weights = sample_with_replacement(n, int(budget) - 2, 1.0, paired, rng)
    # weights count_S / (M p_S) times p_S recovers the empirical frequency of S among the M (or 2M) draws
    freq = torch.as_tensor(weights * size_probabilities(n, 1.0)[masks.sum(1) - 1])
    z = torch.as_tensor(masks, dtype=torch.float64)
    b = (freq[:, None] * z * (counter(torch.as_tensor(masks)) - v0)[:, None]).sum(0)
    size_mass = size_probabilities(n, 1.0) * np.array([math.comb(n, s) for s in range(1, n)])
    sizes = np.arange(1, n)
    off = float((size_mass * sizes * (sizes - 1) / (n * (n - 1))).sum())
    a = torch.full((n, n), off, dtype=torch.float64)
    a.fill_diagonal_(0.5)
    a_inv_b = torch.linalg.solve(a, b)
    a_inv_1 = torch.linalg.solve(a, torch.ones(n, dtype=torch.float64))
    phi = a_inv_b - a_inv_1 * (a_inv_b.sum() - total) / a_inv_1.sum()
    details = {"paired": paired, "seed": seed}
    return ShapleyResult(phi, counter.n_evaluations, v0, float(ends[1]), "unbiased_kernel_shap", details)
