"""The math of the sparse autoencoders, as pure functions on tensors (the modules wire them to batches).

- :func:`fvu`, :func:`mean_l0`: the metrics every variant logs;
- :func:`matching_pursuit`: the unrolled MP encoder of MP-SAE (Costa et al. 2025, arXiv 2506.03093);
- :func:`revive_loss`: the dead-atom auxiliary term of MP-SAE's reference code (overcomplete);
- :func:`topk_auxiliary_loss`: AuxK (Gao et al. 2024, arXiv 2406.04093), for TopK and BatchTopK;
- :func:`geometric_median`: Weiszfeld's algorithm, the data-dependent init of ``b_pre``;
- :func:`feature_recovery`: mean over true features of the best cosine to a learned atom.

Notes: docs/methods/sparse_autoencoders.md
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def fvu(x: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """Fraction of variance unexplained: sum_i ||x_i - x_hat_i||^2 / sum_i ||x_i - mean(x)||^2 over a batch [B, D]."""
    total = (x - x.mean(dim=0, keepdim=True)).square().sum()
    return (x - x_hat).square().sum() / total.clamp_min(torch.finfo(x.dtype).tiny)


def fvu_from_sums(error: torch.Tensor, total: torch.Tensor, square: torch.Tensor, count: int) -> torch.Tensor:
    """FVU over many batches from running sums: ``error`` = sum ||x - x_hat||^2, ``total`` = sum x [D],
    ``square`` = sum ||x||^2; the centred sum of squares is ``square - ||total||^2 / count``."""
    centred = square - total.square().sum() / count
    return error / centred.clamp_min(torch.finfo(error.dtype).tiny)


def mean_l0(z: torch.Tensor) -> torch.Tensor:
    """Mean number of non-zero latents per sample of codes ``z`` [B, n_latents]."""
    return (z != 0).sum(dim=-1).float().mean()


def check_k(k: int, n_latents: int, owner: str) -> None:
    """``k`` latents per sample must exist in the dictionary: one line otherwise."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{owner}: k={k!r} is invalid, expected an integer > 0")
    if k > n_latents:
        raise ValueError(
            f"{owner}: k={k} is larger than the dictionary (n_latents={n_latents}), expected k <= {n_latents}"
        )


class MatchingPursuit(NamedTuple):
    """The result of :func:`matching_pursuit` on a batch of B inputs after T steps.

    codes: z [B, n_latents] (sum of the coefficients picked for each atom).
    residual: r_T [B, D].
    atoms: j_t [B, T], the atom picked at each step (meaningless where ``coefficients`` is 0 because stopped).
    coefficients: c_{j_t} [B, T], 0 once a sample has stopped.
    residual_norms: ||r_t||^2 [B, T + 1] for t = 0..T (detached).
    """

    codes: torch.Tensor
    residual: torch.Tensor
    atoms: torch.Tensor
    coefficients: torch.Tensor
    residual_norms: torch.Tensor


def matching_pursuit(
    r0: torch.Tensor,
    dictionary: torch.Tensor,
    k: int,
    residual_threshold: float | None = None,
    gram: bool | None = None,
) -> MatchingPursuit:
    """Unrolled matching pursuit: for t = 1..k, c = D r_{t-1}; j = argmax_j c_j; z_j += c_j; r_t = r_{t-1} - c_j d_j.

    ``r0`` [B, D] is x - b_pre; ``dictionary`` D [n_latents, D] has unit-norm rows d_j. With
    ``residual_threshold`` tau, a sample stops (its codes and residual stop changing) once
    ||r_t||^2 / ||r_0||^2 < tau; the loop ends early when every sample has stopped.

    The argmax is taken on c itself (not |c|, not ReLU(c)), as the issue's formula and overcomplete's
    ``MpSAE`` do. Gradients flow through the coefficients and residuals (the selection is not
    differentiated). ``gram`` computes the correlations incrementally, c_t = c_{t-1} - c_j G[j] with
    G = D D^T (O(n_latents^2) memory, no [B, n_latents, D] work per step); ``None`` picks it when
    B * k > n_latents, where it is the cheaper one.
    """
    batch, n_latents = r0.shape[0], dictionary.shape[0]
    use_gram = batch * k > n_latents if gram is None else gram
    residual = r0
    with torch.no_grad():
        initial = r0.square().sum(dim=-1)
        gram_matrix = dictionary @ dictionary.T if use_gram else None
        correlations = r0 @ dictionary.T if use_gram else None
    active = torch.ones(batch, dtype=torch.bool, device=r0.device)
    if residual_threshold is not None:
        active = initial > 0
    atoms, coefficients, norms = [], [], [initial]
    for _ in range(k):
        with torch.no_grad():
            scores = correlations if use_gram else residual @ dictionary.T
            index = scores.argmax(dim=-1)
        atom = dictionary[index]  # [B, D], differentiable in D
        value = (residual * atom).sum(dim=-1) * active
        residual = residual - value.unsqueeze(-1) * atom
        atoms.append(index)
        coefficients.append(value)
        with torch.no_grad():
            norms.append(residual.square().sum(dim=-1))
            if use_gram:
                correlations = correlations - value.detach().unsqueeze(-1) * gram_matrix[index]
            if residual_threshold is not None:
                active = active & (norms[-1] >= residual_threshold * initial)
                if not active.any():
                    break
    atoms_t, coefficients_t = torch.stack(atoms, dim=1), torch.stack(coefficients, dim=1)
    codes = torch.zeros(batch, n_latents, dtype=r0.dtype, device=r0.device).scatter_add(1, atoms_t, coefficients_t)
    return MatchingPursuit(codes, residual, atoms_t, coefficients_t, torch.stack(norms, dim=1))


def revive_loss(
    residual: torch.Tensor,
    dictionary: torch.Tensor,
    codes: torch.Tensor,
    code_threshold: float = 1e-2,
    min_dead: int = 10,
) -> torch.Tensor:
    """The dead-atom term of overcomplete's MP-SAE recipe (docs/saes/mp.md), without its coefficient:

    dead = {j : max_b z_bj < code_threshold} (this batch); when |dead| > min_dead,
    L_revive = -mean_{b, j in dead} <r_b, d_j>, else 0.

    Minimising it pulls the unused atoms towards the residual that the used ones leave (the
    residual is not detached: as in the reference, the term also reaches the used atoms through it).
    """
    dead = (codes.detach().amax(dim=0) < code_threshold).nonzero().squeeze(-1)
    if dead.numel() <= min_dead:
        return residual.new_zeros(())
    return -(residual @ dictionary[dead].T).mean()


def topk_auxiliary_loss(
    residual: torch.Tensor,
    pre_activations: torch.Tensor,
    dictionary: torch.Tensor,
    dead: torch.Tensor,
    k_aux: int,
) -> torch.Tensor:
    """AuxK (Gao et al. 2024, Appendix A.2, in SAELens' form): the residual e = x - x_hat (detached) is
    predicted by the top-``k_aux`` ReLU pre-activations among the ``dead`` atoms (a bool mask
    [n_latents]); L_aux = min(|dead| / k_aux, 1) * mean_b ||e_b - z_aux,b D||^2, 0 without dead atoms."""
    num_dead = int(dead.sum())
    if num_dead == 0:
        return residual.new_zeros(())
    scale = min(num_dead / k_aux, 1.0)
    k_aux = min(k_aux, num_dead)
    masked = torch.where(dead, pre_activations, torch.full_like(pre_activations, -torch.inf))
    values, indices = masked.topk(k_aux, dim=-1)
    predicted = (values.relu().unsqueeze(-1) * dictionary[indices]).sum(dim=1)
    return scale * (residual.detach() - predicted).square().sum(dim=-1).mean()


@torch.no_grad()
def geometric_median(points: torch.Tensor, max_iter: int = 100, tol: float = 1e-5) -> torch.Tensor:
    """The point minimising the sum of Euclidean distances to ``points`` [N, D] (Weiszfeld's iteration)."""
    median = points.mean(dim=0)
    for _ in range(max_iter):
        weights = 1.0 / (points - median).norm(dim=-1).clamp_min(1e-8)
        updated = (weights.unsqueeze(-1) * points).sum(dim=0) / weights.sum()
        if (updated - median).norm() <= tol * median.norm().clamp_min(1.0):
            return updated
        median = updated
    return median


@torch.no_grad()
def feature_recovery(dictionary: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """Mean over the true ``features`` [F, D] of the largest cosine similarity to an atom of ``dictionary`` [n, D]."""
    atoms = torch.nn.functional.normalize(dictionary, dim=-1)
    truth = torch.nn.functional.normalize(features, dim=-1)
    return (truth @ atoms.T).amax(dim=-1).mean()
