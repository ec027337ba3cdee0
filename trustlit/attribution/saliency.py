"""Saliency baselines and metrics for irregular time series in the shared batch format.

Baselines (each returns a per-observation saliency [B, L] in [0, 1], 0 at padding):

- :func:`dynamask_grid`: Dynamask (Crabbé & van der Schaar, "Explaining Time Series Predictions with Dynamic
  Masks", ICML 2021; JonathanCrabbe/Dynamask) on a regular grid of G time bins x F channels: the mask M [G, F] in
  [0, 1] gives observation i the value of its cell, M[bin(t_i), c_i], and minimises the preservation game
  mean_k (f_k(pi_M(x)) - f_k(x))^2 + lambda_s ||sort(M) - r_a||^2 / (G F) + lambda_t mean |M[g+1] - M[g]|,
  r_a the vector of (1 - a) G F zeros then a G F ones (a = ``keep_ratio``), lambda_s growing geometrically from
  ``size_reg_init`` to ``size_reg_init * size_reg_dilation`` over the epochs, SGD with momentum and M clamped to
  [0, 1] after every step (released defaults: 500 epochs, lr 0.1, momentum 0.9, M_0 = 0.5, a = 0.5,
  lambda_s from 0.5 by a factor 100, lambda_t = 0). pi_M is the continuous-time blur or fade of
  :mod:`trustlit.attribution.perturbations` with Dynamask's sigma_max = 2 time steps, i.e. 2 bin widths.
- :func:`integrated_gradients`: Captum's Integrated Gradients on the observed values (times, channels and
  observation pattern fixed), baseline 0 for every value (the mean of standardised data), 50 steps (Gauss-Legendre,
  Captum's default); saliency |IG| divided by its largest value per instance.
- :func:`occlusion`: Captum's FeatureAblation with one feature per observation: the drop of f when that
  observation alone is deleted (``observed=False``: "never made"); saliency |drop| over its largest value.
  Both explain the probability (``output="probabilities"``) or the logit (``"logits"``: a one-column score) of the
  class the black box predicts for x; so do Dynamask's error and the removal curves.

Metrics against a ground-truth saliency (Dynamask's AUP / AUR: area under precision and recall as a function of
the threshold tau in [0, 1] on the saliency, precision(tau) = |S_tau and T| / |S_tau|, recall(tau) =
|S_tau and T| / |T| with S_tau = {i: s_i >= tau}, by the trapezoidal rule over the distinct scores; AUPRC:
sklearn's average precision), averaged over instances (:func:`saliency_metrics`); removal curves
(:func:`removal_curves`): the predicted class's probability after deleting (deletion curve) or keeping only
(insertion curve) the top fraction q of each instance's observations in saliency order, and ERASER's
(DeYoung et al., ACL 2020) comprehensiveness = mean_q [p(x) - p(x without top q)] and sufficiency =
mean_q [p(x) - p(top q only)] over the bins q in {0.01, 0.05, 0.1, 0.2, 0.5} (:func:`eraser_scores`).

Notes: docs/methods/contimask.md
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch

from trustlit.attribution.perturbations import channel_average, delete, fade, gaussian_blur
from trustlit.data.timeseries import check_observations

Output = Literal["probabilities", "logits"]
BlackBox = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # -> logits [B, C]
ERASER_BINS = (0.01, 0.05, 0.1, 0.2, 0.5)

# --- metrics ------------------------------------------------------------------------------------------------------


def _scores_and_truth(scores: torch.Tensor, truth: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    if scores.shape != truth.shape or scores.dim() != 1:
        raise ValueError(
            f"scores: shape {tuple(scores.shape)} is invalid, expected one dimension like truth's {tuple(truth.shape)}"
        )
    if torch.isnan(scores).any():
        raise ValueError("scores: NaN saliency")
    return scores.detach().cpu().double().numpy(), truth.detach().cpu().bool().numpy()


def precision_recall_by_threshold(
    scores: torch.Tensor, truth: torch.Tensor
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds ascending, precision, recall) at each distinct score tau, S_tau = {s >= tau}."""
    s, t = _scores_and_truth(scores, truth)
    thresholds = np.unique(s)
    selected = s[None, :] >= thresholds[:, None]
    hits = (selected & t[None, :]).sum(1)
    return thresholds, hits / selected.sum(1), hits / max(int(t.sum()), 1)


def aup(scores: torch.Tensor, truth: torch.Tensor) -> float:
    """Area under precision(tau), tau over the distinct scores (trapezoid), as Dynamask reports it."""
    thresholds, precision, _ = precision_recall_by_threshold(scores, truth)
    return float(np.trapezoid(precision, thresholds))


def aur(scores: torch.Tensor, truth: torch.Tensor) -> float:
    """Area under recall(tau), tau over the distinct scores (trapezoid), as Dynamask reports it."""
    thresholds, _, recall = precision_recall_by_threshold(scores, truth)
    return float(np.trapezoid(recall, thresholds))


def auprc(scores: torch.Tensor, truth: torch.Tensor) -> float:
    """sklearn's average precision of ``scores`` against the binary ``truth``."""
    from sklearn.metrics import average_precision_score

    s, t = _scores_and_truth(scores, truth)
    if not t.any():
        raise ValueError("truth: no salient observation, AUPRC is undefined")
    return float(average_precision_score(t, s))


def saliency_metrics(scores: Sequence[torch.Tensor], truths: Sequence[torch.Tensor]) -> dict[str, float]:
    """AUP, AUR and AUPRC averaged over the instances (each a 1-D tensor of its observed entries) that have at
    least one salient observation; ``n_scored`` counts them."""
    if len(scores) != len(truths):
        raise ValueError(f"scores: {len(scores)} instances is invalid, expected one per truth ({len(truths)})")
    rows = [(s, t) for s, t in zip(scores, truths, strict=True) if bool(t.bool().any())]
    if not rows:
        raise ValueError("truths: no instance has a salient observation")
    result = {name: float(np.mean([metric(s, t) for s, t in rows])) for name, metric in
              (("aup", aup), ("aur", aur), ("auprc", auprc))}  # fmt: skip
    return result | {"n_scored": len(rows)}


# --- removal curves -------------------------------------------------------------------------------------------


def explained_output(logits: torch.Tensor, output: Output) -> torch.Tensor:
    """What is explained, from the black box's logits [B, C]: class ``probabilities`` (softmax) or the ``logits``
    themselves (a one-column score: a regression such as the released white boxes)."""
    if output not in ("probabilities", "logits"):
        raise ValueError(f"output={output!r} is invalid, expected 'probabilities' or 'logits'")
    return logits.softmax(-1) if output == "probabilities" else logits


def predicted_output(
    black_box: BlackBox, batch: dict[str, torch.Tensor], output: Output = "probabilities"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the class the black box predicts for each instance [B], its explained output [B])."""
    with torch.no_grad():
        logits = black_box(batch["times"], batch["channels"], batch["values"], batch["observed"])
    label = logits.argmax(-1)
    return label, explained_output(logits, output).gather(-1, label.unsqueeze(-1)).squeeze(-1)


def top_fraction(scores: torch.Tensor, observed: torch.Tensor, fraction: float) -> torch.Tensor:
    """[B, L] bool: the round(fraction * n_b) observed entries of each row with the largest scores (ties by
    position)."""
    count = torch.round(fraction * observed.sum(-1)).long()
    ranked = torch.where(observed, scores, torch.full_like(scores, -torch.inf))
    order = ranked.argsort(dim=-1, descending=True, stable=True)
    rank = order.argsort(dim=-1)
    return (rank < count.unsqueeze(-1)) & observed


def removal_curves(
    black_box: BlackBox,
    batch: dict[str, torch.Tensor],
    scores: torch.Tensor,
    fractions: Sequence[float] = ERASER_BINS,
    output: Output = "probabilities",
) -> dict[str, torch.Tensor]:
    """Probability of the originally predicted class after deleting (``deletion`` [B, Q]) or keeping only
    (``insertion`` [B, Q]) the top fraction q of each row's observations by ``scores`` [B, L]; ``full`` [B] is
    p(x). Deleted observations become ``observed=False``."""
    times, channels, values, observed = (batch[k] for k in ("times", "channels", "values", "observed"))
    check_observations(times, channels, values, observed)
    if scores.shape != times.shape:
        raise ValueError(f"scores: shape {tuple(scores.shape)} is invalid, expected times' {tuple(times.shape)}")
    if any(not 0 <= q <= 1 for q in fractions):
        raise ValueError(f"fractions={list(fractions)!r} is invalid, expected numbers in [0, 1]")
    label, full = predicted_output(black_box, batch, output)
    curves: dict[str, list[torch.Tensor]] = {"deletion": [], "insertion": []}
    with torch.no_grad():
        for q in fractions:
            top = top_fraction(scores, observed, q)
            for name, keep in (("deletion", ~top), ("insertion", top)):
                kept_values, kept = delete(values, observed, keep)
                explained = explained_output(black_box(times, channels, kept_values, kept), output)
                curves[name].append(explained.gather(-1, label.unsqueeze(-1)).squeeze(-1))
    return {"full": full, **{name: torch.stack(parts, dim=-1) for name, parts in curves.items()}}


def eraser_scores(curves: dict[str, torch.Tensor]) -> dict[str, float]:
    """ERASER comprehensiveness and sufficiency (mean over bins and instances) from :func:`removal_curves` run at
    the ERASER bins."""
    full = curves["full"].unsqueeze(-1)
    return {
        "comprehensiveness": float((full - curves["deletion"]).mean()),
        "sufficiency": float((full - curves["insertion"]).mean()),
    }


# --- baselines ------------------------------------------------------------------------------------------------


def _unpack(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    times, channels, values, observed = (batch[k] for k in ("times", "channels", "values", "observed"))
    check_observations(times, channels, values, observed)
    return times, channels, values, observed


def _normalised(attribution: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """|attribution| / its largest value per row, 0 at padding (rows of zeros stay zero)."""
    magnitude = torch.where(observed, attribution.abs(), torch.zeros_like(attribution))
    return magnitude / magnitude.amax(-1, keepdim=True).clamp_min(1e-12)


def integrated_gradients(
    black_box: BlackBox, batch: dict[str, torch.Tensor], n_steps: int = 50, output: Output = "probabilities"
) -> torch.Tensor:
    """Captum's Integrated Gradients of the predicted class's probability with respect to the observed values,
    baseline 0; saliency [B, L] (see the module docstring)."""
    from captum.attr import IntegratedGradients

    times, channels, values, observed = _unpack(batch)
    label, _ = predicted_output(black_box, batch, output)

    def probability(
        values: torch.Tensor, times: torch.Tensor, channels: torch.Tensor, observed: torch.Tensor
    ) -> torch.Tensor:
        explained = explained_output(black_box(times, channels, values * observed, observed), output)
        return explained + 0 * values.sum(-1, keepdim=True)  # a graph even when f ignores the values (IG = 0)

    attribution = IntegratedGradients(probability).attribute(
        values, baselines=torch.zeros_like(values), target=label, n_steps=n_steps,
        additional_forward_args=(times, channels, observed),
    )  # fmt: skip
    return _normalised(attribution.detach(), observed)


def occlusion(
    black_box: BlackBox, batch: dict[str, torch.Tensor], per_eval: int = 32, output: Output = "probabilities"
) -> torch.Tensor:
    """Captum's FeatureAblation over one 'keep' input per observation (1 = made, ablated to 0 = never made):
    the drop of the predicted class's probability; saliency [B, L]. ``per_eval`` ablations share a forward."""
    from captum.attr import FeatureAblation

    times, channels, values, observed = _unpack(batch)
    label, _ = predicted_output(black_box, batch, output)

    def repeats(tensor: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:  # Captum stacks per_eval ablations
        return tensor.repeat(len(keep) // len(tensor), 1)

    def probability(keep: torch.Tensor) -> torch.Tensor:
        kept_values, kept = delete(repeats(values, keep), repeats(observed, keep), keep > 0.5)
        return explained_output(black_box(repeats(times, keep), repeats(channels, keep), kept_values, kept), output)

    with torch.no_grad():
        attribution = FeatureAblation(probability).attribute(
            torch.ones_like(values), baselines=0.0, target=label, perturbations_per_eval=per_eval
        )
    return _normalised(attribution, observed)


def time_bins(times: torch.Tensor, observed: torch.Tensor, n_bins: int) -> torch.Tensor:
    """The grid cell of each observation: G equal bins spanning each row's observed time range, [B, L] int64."""
    low = torch.where(observed, times, torch.full_like(times, torch.inf)).amin(-1, keepdim=True)
    high = torch.where(observed, times, torch.full_like(times, -torch.inf)).amax(-1, keepdim=True)
    span = (high - low).clamp_min(1e-12)
    return ((times - low) / span * n_bins).floor().clamp(0, n_bins - 1).long()


def dynamask_grid(
    black_box: BlackBox,
    batch: dict[str, torch.Tensor],
    n_bins: int = 100,
    n_channels: int | None = None,
    perturbation: str = "blur",
    n_epochs: int = 500,
    keep_ratio: float = 0.5,
    initial_mask: float = 0.5,
    size_reg_init: float = 0.5,
    size_reg_dilation: float = 100.0,
    time_reg: float = 0.0,
    lr: float = 0.1,
    momentum: float = 0.9,
    output: Output = "probabilities",
) -> torch.Tensor:
    """Dynamask's preservation mask on G = ``n_bins`` time bins x F channels, mapped to observations; the
    saliency [B, L] is each observation's cell value (see the module docstring for the loss and the defaults)."""
    if perturbation not in ("blur", "fade"):
        raise ValueError(f"perturbation={perturbation!r} is invalid, expected 'blur' or 'fade'")
    if not 0 < keep_ratio < 1:
        raise ValueError(f"keep_ratio={keep_ratio!r} is invalid, expected a number in (0, 1)")
    if n_bins < 2 or n_epochs < 1:
        raise ValueError(f"n_bins={n_bins!r}, n_epochs={n_epochs!r} are invalid, expected n_bins >= 2, n_epochs >= 1")
    times, channels, values, observed = _unpack(batch)
    width = n_channels or int(channels[observed].max()) + 1
    cell = time_bins(times, observed, n_bins) * width + channels.clamp(0, width - 1)
    with torch.no_grad():
        target = explained_output(black_box(times, channels, values, observed), output)
    average = channel_average(times, channels, values, observed) if perturbation == "fade" else None
    span = torch.where(observed, times, torch.full_like(times, -torch.inf)).amax(-1, keepdim=True) - torch.where(
        observed, times, torch.full_like(times, torch.inf)
    ).amin(-1, keepdim=True)
    sigma_max = 2 * span / n_bins  # Dynamask's sigma_max = 2 time steps [B, 1]
    cells = n_bins * width
    reference = torch.cat([torch.zeros(cells - round(keep_ratio * cells)), torch.ones(round(keep_ratio * cells))])
    reference = reference.to(values)
    grid = torch.full((len(times), cells), initial_mask, device=values.device, requires_grad=True)
    optimizer = torch.optim.SGD([grid], lr=lr, momentum=momentum)
    factor, growth = size_reg_init, size_reg_dilation ** (1 / n_epochs)
    for _ in range(n_epochs):
        mask = grid.gather(-1, cell)
        if average is None:
            perturbed = _blur_per_row(times, channels, values, observed, mask, sigma_max)
        else:
            perturbed = fade(values, observed, mask, average)
        error = ((explained_output(black_box(times, channels, perturbed, observed), output) - target) ** 2).mean(-1)
        size = ((grid.sort(-1).values - reference) ** 2).mean(-1)
        steps = grid.view(len(times), n_bins, width)
        variation = (steps[:, 1:] - steps[:, :-1]).abs().mean((-1, -2))
        loss = (error + factor * size + time_reg * variation).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            grid.clamp_(0, 1)
        factor *= growth
    return torch.where(observed, grid.detach().gather(-1, cell), torch.zeros_like(values))


def _blur_per_row(
    times: torch.Tensor,
    channels: torch.Tensor,
    values: torch.Tensor,
    observed: torch.Tensor,
    mask: torch.Tensor,
    sigma_max: torch.Tensor,
) -> torch.Tensor:
    """:func:`gaussian_blur` with a per-row sigma_max [B, 1] (times rescaled by it, sigma_max 1)."""
    scaled = times / sigma_max.clamp_min(1e-12)
    return gaussian_blur(scaled, channels, values, observed, mask, sigma_max=1.0)
