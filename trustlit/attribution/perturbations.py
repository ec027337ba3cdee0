"""Perturbations of irregular time series in continuous time (Contimask, Moebus, Braun & Holz, NeurIPS 2025).

Pure, batched functions over the shared batch format: ``times`` [N, L] (ascending over the observed entries),
``channels`` [N, L] (int64 in [0, F)), ``values`` [N, L], ``observed`` [N, L] (bool, False at padding), and a
per-observation mask ``mask`` [N, L] in [0, 1] (1 = keep the observation as it is, 0 = perturb it fully).

- :func:`gaussian_blur`: x'_i = sum_j w_ij x_j / sum_j w_ij over the observations j of the same channel,
  w_ij = exp(-(t_i - t_j)^2 / (2 sigma_i^2)), sigma_i = sigma_max (1 + eps - m_i): m_i = 1 keeps x_i (the kernel
  is a point mass), m_i = 0 averages the channel over a window of width ~sigma_max.
- :func:`fade`: x'_i = m_i x_i + (1 - m_i) mu_i, mu_i the continuous-time moving average of x_i's channel
  (:func:`channel_average`: the mean of the channel's observations within ``window`` of t_i, or over the whole
  series when ``window`` is None, as released).
- :func:`delete`: observations with keep = False become ``observed=False`` ("these observations were never
  made"); not differentiable. :func:`hard_concrete_keep` draws keep from mask logits as the released code does.

Both differentiable perturbations leave padding untouched; batches are validated by
:func:`trustlit.data.timeseries.check_observations`. Notes: docs/methods/contimask.md
"""

from __future__ import annotations

import torch

EPS = 1.0e-7  # released eps: keeps sigma > 0 at m = 1


def check_mask(mask: torch.Tensor, times: torch.Tensor) -> None:
    """One-line ValueError when ``mask`` is not [N, L] like ``times`` or leaves [0, 1]."""
    if mask.shape != times.shape:
        raise ValueError(f"mask: shape {tuple(mask.shape)} is invalid, expected times' {tuple(times.shape)}")
    if (mask < 0).any() or (mask > 1).any() or torch.isnan(mask).any():
        raise ValueError("mask: values outside [0, 1]; pass probabilities (sigmoid of the logits)")


def same_channel(channels: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """[N, L, L] bool: entry (i, j) is True where observation j is real and has observation i's channel."""
    return (channels.unsqueeze(-1) == channels.unsqueeze(-2)) & observed.unsqueeze(-2)


def gaussian_blur(
    times: torch.Tensor,
    channels: torch.Tensor,
    values: torch.Tensor,
    observed: torch.Tensor,
    mask: torch.Tensor,
    sigma_max: float = 2.0,
    eps: float = EPS,
) -> torch.Tensor:
    """Each observation replaced by a Gaussian-kernel average of its channel's observations, kernel width
    sigma_i = sigma_max (1 + eps - m_i) in the unit of ``times`` (released sigma_max = 2 on times in [0, 1]).
    Returns the perturbed values [N, L] (padding unchanged); differentiable in ``mask``."""
    check_mask(mask, times)
    if sigma_max <= 0:
        raise ValueError(f"sigma_max={sigma_max!r} is invalid, expected a number > 0")
    sigma = sigma_max * ((1 + eps) - mask)
    distance = (times.unsqueeze(-1) - times.unsqueeze(-2)) ** 2  # [N, i, j]
    weights = torch.exp(-distance / (2 * sigma.unsqueeze(-1) ** 2)) * same_channel(channels, observed)
    # w_ii = 1 for every observed i, so the normaliser is >= 1 there; the clamp only guards padding rows
    blurred = (weights * values.unsqueeze(-2)).sum(-1) / weights.sum(-1).clamp_min(eps)
    return torch.where(observed, blurred, values)


def channel_average(
    times: torch.Tensor,
    channels: torch.Tensor,
    values: torch.Tensor,
    observed: torch.Tensor,
    window: float | None = None,
) -> torch.Tensor:
    """mu_i: the mean of the observations of channel c_i with |t_j - t_i| <= window / 2 (the whole series when
    ``window`` is None, as released), [N, L]; 0 at padding. Independent of the mask: compute it once."""
    if window is not None and window <= 0:
        raise ValueError(f"window={window!r} is invalid, expected a number > 0 or None (the whole series)")
    weights = same_channel(channels, observed)
    if window is not None:
        weights = weights & ((times.unsqueeze(-1) - times.unsqueeze(-2)).abs() <= window / 2)
    weights = weights.to(values.dtype)
    average = (weights * values.unsqueeze(-2)).sum(-1) / weights.sum(-1).clamp_min(1.0)
    return torch.where(observed, average, torch.zeros_like(values))


def fade(values: torch.Tensor, observed: torch.Tensor, mask: torch.Tensor, average: torch.Tensor) -> torch.Tensor:
    """x'_i = m_i x_i + (1 - m_i) mu_i (``average`` from :func:`channel_average`); padding unchanged.
    ``values``, ``observed`` and ``average`` may be [N, L] or broadcast against a [P, N, L] ``mask``."""
    if (mask < 0).any() or (mask > 1).any() or torch.isnan(mask).any():
        raise ValueError("mask: values outside [0, 1]; pass probabilities (sigmoid of the logits)")
    return torch.where(observed, mask * values + (1 - mask) * average, values)


def delete(values: torch.Tensor, observed: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Observations with ``keep`` False are never made: ``observed`` becomes False there and the value 0, as at
    padding. Returns ``(values, observed)``; not differentiable."""
    if keep.dtype != torch.bool:
        raise ValueError(f"keep: dtype {keep.dtype} is invalid, expected torch.bool")
    kept = observed & keep
    return torch.where(kept, values, torch.zeros_like(values)), kept


def hard_concrete_keep(
    logits: torch.Tensor, temperature: float = 0.8, generator: torch.Generator | None = None
) -> torch.Tensor:
    """keep = sigmoid((l + g) / temperature) > 0.5 with g standard Gumbel noise, as the released Deletion draws it:
    P(keep) = 1 - exp(-exp(l)) (:func:`keep_probability`), whatever the temperature (it shapes only the relaxed
    sample, which gradient-free training does not use)."""
    if temperature <= 0:
        raise ValueError(f"temperature={temperature!r} is invalid, expected a number > 0")
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform + 1e-20) + 1e-20)
    return torch.sigmoid((logits + gumbel) / temperature) > 0.5


def keep_probability(logits: torch.Tensor) -> torch.Tensor:
    """P(keep) of :func:`hard_concrete_keep`: P(g > -l) = 1 - exp(-exp(l)) for standard Gumbel g."""
    return -torch.expm1(-torch.exp(logits))
