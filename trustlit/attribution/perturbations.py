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


def channel_slots(channels: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """[N, F, S] int64: row n's observations of channel f in their order in the row (ascending time), padded with
    L (one past the last position); S is the largest count of one channel in one row. Grouping by channel makes
    the pairwise kernels cost sum_f n_f^2 instead of L^2."""
    rows, length = channels.shape
    width = int(channels[observed].max()) + 1 if observed.any() else 1
    onehot = torch.nn.functional.one_hot(channels.clamp(0, width - 1), width) * observed.unsqueeze(-1)
    rank = (onehot.cumsum(1) - 1).gather(-1, channels.clamp(0, width - 1).unsqueeze(-1)).squeeze(-1)
    slots = max(int(onehot.sum(1).max()), 1)
    target = torch.where(observed, channels.clamp(0, width - 1) * slots + rank, width * slots)  # spare last cell
    flat = torch.full((rows, width * slots + 1), length, dtype=torch.long, device=channels.device)
    positions = torch.arange(length, device=channels.device).expand(rows, length)
    flat = flat.scatter(1, target, positions)
    return flat[:, :-1].reshape(rows, width, slots)


def grouped(tensor: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """[N, L] -> [N, F, S] by :func:`channel_slots` (0 in the empty slots)."""
    padded = torch.cat([tensor, torch.zeros_like(tensor[:, :1])], dim=1)
    return padded.gather(1, slots.flatten(1)).view(slots.shape)


def ungrouped(tensor: torch.Tensor, slots: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[N, F, S] -> [N, L] back to the observations' positions (``like`` where no slot points)."""
    padded = torch.cat([like, torch.zeros_like(like[:, :1])], dim=1)
    return padded.scatter(1, slots.flatten(1), tensor.flatten(1))[:, :-1]


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
    slots = channel_slots(channels, observed)
    valid = slots < times.shape[1]
    t, x = grouped(times, slots), grouped(values, slots)
    sigma = sigma_max * ((1 + eps) - grouped(mask, slots))
    distance = (t.unsqueeze(-1) - t.unsqueeze(-2)) ** 2  # [N, F, i, j]
    weights = torch.exp(-distance / (2 * sigma.unsqueeze(-1) ** 2)) * valid.unsqueeze(-2)
    # w_ii = 1 for every observed i, so the normaliser is >= 1 there; the clamp only guards empty slots
    blurred = (weights * x.unsqueeze(-2)).sum(-1) / weights.sum(-1).clamp_min(eps)
    return torch.where(observed, ungrouped(blurred, slots, values), values)


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
    slots = channel_slots(channels, observed)
    valid = slots < times.shape[1]
    t, x = grouped(times, slots), grouped(values, slots)
    weights = valid.unsqueeze(-2).expand(*valid.shape, valid.shape[-1])
    if window is not None:
        weights = weights & ((t.unsqueeze(-1) - t.unsqueeze(-2)).abs() <= window / 2)
    weights = weights.to(values.dtype)
    average = (weights * x.unsqueeze(-2)).sum(-1) / weights.sum(-1).clamp_min(1.0)
    return torch.where(observed, ungrouped(average, slots, values), torch.zeros_like(values))


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
