"""Exact Fourier (Walsh–Hadamard) and Möbius transforms of games on {0,1}^n, of LightGBM trees, and the
Shapley / Banzhaf values and interaction indices of a Möbius expansion (used by ProxySPEX).

With masks ``x`` in {0,1}^n (1 = player present): f(x) = sum_k F[k] (-1)^{<x, k>} (Fourier) and
f(x) = sum_{T ⊆ x} a[T] (Möbius), a[T] = (-2)^{|T|} sum_{k ⊇ T} F[k]. Notes: docs/methods/proxyspex.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from itertools import combinations
from typing import Any

import torch

Coefficients = dict[frozenset[int], float]


def _goes_left(node: Mapping[str, Any], bit: int) -> bool:
    if node.get("decision_type", "<=") != "<=":
        raise ValueError(f"LightGBM tree: decision_type={node['decision_type']!r}; only numerical '<=' splits")
    return bit <= float(node["threshold"])


def _restrict(coefficients: Coefficients, player: int, bit: int) -> Coefficients:
    """The function with x_player fixed to ``bit``: (-1)^{bit} folds into every frequency holding it."""
    out: Coefficients = defaultdict(float)
    for k, value in coefficients.items():
        if player in k:
            out[k - {player}] += -value if bit else value
        else:
            out[k] += value
    return out


def tree_to_fourier(node: Mapping[str, Any]) -> Coefficients:
    """Exact Fourier coefficients of one LightGBM tree (a ``dump_model()['tree_info'][t]['tree_structure']``).

    Exact also when a path splits twice on one player or a threshold sends both values one way.
    """
    if "leaf_value" in node:
        return {frozenset(): float(node["leaf_value"])}
    j = int(node["split_feature"])
    children = {"left_child": tree_to_fourier(node["left_child"]), "right_child": tree_to_fourier(node["right_child"])}
    branch = [children["left_child" if _goes_left(node, bit) else "right_child"] for bit in (0, 1)]
    low, high = _restrict(branch[0], j, 0), _restrict(branch[1], j, 1)
    out: Coefficients = defaultdict(float)
    for k in set(low) | set(high):
        a, b = low.get(k, 0.0), high.get(k, 0.0)
        out[k] += (a + b) / 2
        out[k | {j}] += (a - b) / 2
    return dict(out)


def booster_to_fourier(booster: Any) -> Coefficients:
    """Sum of the exact Fourier coefficients of every tree of a LightGBM regression booster.

    LightGBM folds the initial score into the first tree's leaves, so the sum is the whole prediction.
    """
    model = booster.dump_model()
    if model.get("num_tree_per_iteration", 1) != 1:
        raise ValueError(f"LightGBM booster: num_tree_per_iteration={model['num_tree_per_iteration']}; need 1")
    total: Coefficients = defaultdict(float)
    for tree in model["tree_info"]:
        for k, value in tree_to_fourier(tree["tree_structure"]).items():
            total[k] += value
    return {k: v for k, v in total.items() if v != 0.0}


def _support_matrix(keys: Iterable[frozenset[int]], n: int) -> torch.Tensor:
    keys = list(keys)
    support = torch.zeros(len(keys), n, dtype=torch.float64)
    for row, k in enumerate(keys):
        if k and max(k) >= n:
            raise ValueError(f"masks: width {n}, but the coefficients name player {max(k)}")
        support[row, list(k)] = 1.0
    return support


def _check_masks(masks: torch.Tensor, n: int | None = None) -> torch.Tensor:
    if masks.ndim != 2 or (n is not None and masks.shape[1] != n):
        raise ValueError(f"masks: shape {tuple(masks.shape)}; expected [B, {n if n is not None else 'n'}]")
    return masks.to(torch.float64)


def fourier_basis(keys: Iterable[frozenset[int]], masks: torch.Tensor) -> torch.Tensor:
    """[B, K] matrix of (-1)^{<x, k>}."""
    x = _check_masks(masks)
    parity = x @ _support_matrix(keys, x.shape[1]).T
    return 1.0 - 2.0 * torch.remainder(parity, 2.0)


def fourier_game(fourier: Mapping[frozenset[int], float], masks: torch.Tensor) -> torch.Tensor:
    """f(x) = sum_k F[k] (-1)^{<x, k>} on masks [B, n]."""
    keys = list(fourier)
    coef = torch.tensor([fourier[k] for k in keys], dtype=torch.float64)
    return fourier_basis(keys, masks) @ coef


def mobius_game(mobius: Mapping[frozenset[int], float], masks: torch.Tensor) -> torch.Tensor:
    """f(x) = sum_T a[T] prod_{i in T} x_i on masks [B, n]."""
    x = _check_masks(masks)
    keys = list(mobius)
    support = _support_matrix(keys, x.shape[1])
    present = (x @ support.T) == support.sum(dim=1)  # T ⊆ x
    coef = torch.tensor([mobius[k] for k in keys], dtype=torch.float64)
    return present.to(torch.float64) @ coef


def fourier_to_mobius(fourier: Mapping[frozenset[int], float]) -> Coefficients:
    """a[T] = (-2)^{|T|} sum_{k ⊇ T} F[k]."""
    mobius: Coefficients = defaultdict(float)
    for k, value in fourier.items():
        members = sorted(k)
        for size in range(len(members) + 1):
            for subset in combinations(members, size):
                mobius[frozenset(subset)] += value * (-2.0) ** size
    return {t: v for t, v in mobius.items() if v != 0.0}


def _player_values(mobius: Mapping[frozenset[int], float], n: int, weight: Callable[[int], float]) -> torch.Tensor:
    values = torch.zeros(n, dtype=torch.float64)
    for t, a in mobius.items():
        if t:
            values[list(t)] += a * weight(len(t))
    return values


def mobius_to_shapley(mobius: Mapping[frozenset[int], float], n: int) -> torch.Tensor:
    """phi_i = sum_{T ∋ i} a[T] / |T|."""
    return _player_values(mobius, n, lambda size: 1.0 / size)


def mobius_to_banzhaf(mobius: Mapping[frozenset[int], float], n: int) -> torch.Tensor:
    """beta_i = sum_{T ∋ i} a[T] / 2^{|T| - 1}."""
    return _player_values(mobius, n, lambda size: 0.5 ** (size - 1))


def _interaction_index(
    mobius: Mapping[frozenset[int], float], n: int, order: int, weight: Callable[[int], float]
) -> Coefficients:
    if not 0 <= order <= n:
        raise ValueError(f"order={order}; expected 0 <= order <= n_players={n}")
    out: Coefficients = defaultdict(float)
    for t, a in mobius.items():
        for s in combinations(sorted(t), order):
            out[frozenset(s)] += a * weight(len(t) - order)
    return {s: v for s, v in out.items() if v != 0.0}


def shapley_interaction_index(mobius: Mapping[frozenset[int], float], n: int, order: int = 2) -> Coefficients:
    """Shapley interaction index I[S] = sum_{T ⊇ S} a[T] / (|T| - |S| + 1) for |S| = ``order`` (nonzero only)."""
    return _interaction_index(mobius, n, order, lambda extra: 1.0 / (extra + 1))


def banzhaf_interaction_index(mobius: Mapping[frozenset[int], float], n: int, order: int = 2) -> Coefficients:
    """Banzhaf interaction index I[S] = sum_{T ⊇ S} a[T] / 2^{|T| - |S|} for |S| = ``order`` (nonzero only)."""
    return _interaction_index(mobius, n, order, lambda extra: 0.5**extra)


__all__ = [
    "Coefficients",
    "banzhaf_interaction_index",
    "booster_to_fourier",
    "fourier_basis",
    "fourier_game",
    "fourier_to_mobius",
    "mobius_game",
    "mobius_to_banzhaf",
    "mobius_to_shapley",
    "shapley_interaction_index",
    "tree_to_fourier",
]
