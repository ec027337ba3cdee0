"""The update rules of the harmful-fine-tuning defenses, as pure functions on lists of tensors.

A "gradient" here is a list of tensors, one per trainable parameter, in the order of the
parameter list it was taken for; norms are global over the whole list (one norm over every
trainable parameter, as the released code of Panacea, Booster and Vaccine computes it).
The LightningModules in :mod:`trustlit.safety` wire these rules to batches; :class:`PSGLD` is
BDS's posterior sampler for the scheduler.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch

NORM_EPS = 1e-7


def global_norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """||(t_1, ..., t_k)||_2: the Euclidean norm of all tensors concatenated."""
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.float()) for t in tensors]))


def parameter_gradients(loss: torch.Tensor, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """d loss / d params as new tensors (``.grad`` is left alone); zeros for a parameter the loss does not reach."""
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]


def scaled_direction(grads: Sequence[torch.Tensor], radius: float) -> list[torch.Tensor]:
    """radius * g / (||g||_2 + 1e-7), one global norm; new tensors, never views of ``grads``.

    Panacea's eps (radius rho), Booster's simulated step (radius alpha) and Vaccine's
    embedding perturbation (radius rho) are all this direction.
    """
    scale = radius / (global_norm(grads) + NORM_EPS)
    return [g * scale.to(g.dtype) for g in grads]


def panacea_update(
    finetune_grad: Sequence[torch.Tensor],
    harmful_grad: Sequence[torch.Tensor],
    perturbed_harmful_grad: Sequence[torch.Tensor],
    lam: float,
) -> list[torch.Tensor]:
    """Panacea's descent direction G - lambda * (He - Hw).

    G = grad g(w) (fine-tuning loss), Hw = grad h(w) and He = grad h(w + eps) (harmful loss):
    minimising it ascends lambda * (h(w + eps) - h(w)), the harmful loss gained by the
    perturbation, while descending g.
    """
    return [g - lam * (he - hw) for g, hw, he in zip(finetune_grad, harmful_grad, perturbed_harmful_grad, strict=True)]


def booster_update(
    align_grad: Sequence[torch.Tensor],
    harmful_grad: Sequence[torch.Tensor],
    shifted_harmful_grad: Sequence[torch.Tensor],
    lam: float,
) -> list[torch.Tensor]:
    """Booster's direction grad f(w) + lambda * (grad h(w) - grad h(w - alpha * grad h / ||grad h||)).

    The second term is the gradient (first order, the simulated step held fixed) of
    lambda * (h(w) - h(w - alpha * grad h(w) / ||grad h(w)||)): the harmful-loss reduction one
    normalised harmful step would achieve, which Booster attenuates.
    """
    return [f + lam * (hw - hs) for f, hw, hs in zip(align_grad, harmful_grad, shifted_harmful_grad, strict=True)]


def proximal_penalty(params: Sequence[torch.Tensor], anchor: Sequence[torch.Tensor], rho: float) -> torch.Tensor:
    """rho/2 * ||w - w_anchor||^2 (Lisa's proximal term), differentiable in ``params`` only."""
    return 0.5 * rho * sum(((p - a.detach()) ** 2).sum() for p, a in zip(params, anchor, strict=True))


@contextmanager
def perturbed(params: Sequence[torch.Tensor], delta: Sequence[torch.Tensor]) -> Iterator[None]:
    """The parameters moved to w + delta inside; on exit they hold w again, bit for bit.

    The weights are restored from a copy, not by subtracting delta ((w + d) - d is not w in
    floating point), so a step whose optimiser update is zero leaves the model identical.
    """
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, d in zip(params, delta, strict=True):
            p.add_(d)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved, strict=True):
                p.copy_(s)


def schedule_weights(logits: torch.Tensor) -> torch.Tensor:
    """BDS's sample weights w = n * softmax(z): positive, summing to n = len(z); all 1 at z = 0."""
    return logits.numel() * torch.softmax(logits.float(), dim=0)


def weighted_finetune_loss(sample_losses: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(1/B) * sum_i w_i * l_i over a batch: BDS's weighted fine-tuning term.

    For the model step the weights are held fixed (detached); for the scheduler step the losses
    are (the caller passes them detached), so each step moves only its own variables.
    """
    return (weights * sample_losses).mean()


def negative_entropy(weights: torch.Tensor) -> torch.Tensor:
    """sum_i p_i log p_i of the normalised weights p = w / sum(w): 0 when all weight is on one
    sample, -log n when it is spread evenly. Added to BDS's scheduler loss with weight lambda_H, the
    scheduler's minimiser becomes the Gibbs distribution p_i ∝ exp(-l_i / lambda_H)."""
    p = weights / weights.sum()
    return (p * torch.log(p.clamp(min=torch.finfo(p.dtype).tiny))).sum()


def dataset_energy(
    batch_mean_loss: torch.Tensor, params: Sequence[torch.Tensor], dataset_size: int, prior_std: float | None
) -> torch.Tensor:
    """U = N * batch_mean_loss + sum ||phi||^2 / (2 * sigma^2): the negative log-posterior (up to a constant)
    whose gradient is unbiased for the whole dataset's, with a N(0, sigma^2 I) prior on ``params``
    (``prior_std`` None: a flat prior). A batch mean alone gives a sampler's temperature no likelihood
    scale: exp(-mean / T) is the posterior only at T = 1 / N."""
    energy = dataset_size * batch_mean_loss
    if prior_std is not None:
        energy = energy + sum(p.float().pow(2).sum() for p in params) / (2 * prior_std**2)
    return energy


class PSGLD(torch.optim.Optimizer):
    """Preconditioned SGLD (Li, Chen, Carlson & Carin, AAAI 2016) sampling p(theta) ∝ exp(-U(theta) / T).

    ``p.grad`` must hold grad U, the gradient of the energy on the dataset scale (N x the batch-mean
    loss, plus the negative log-prior). Per step, elementwise:

        V <- alpha * V + (1 - alpha) * (grad U / N)^2      (per-sample scale; with a prior, its gradient too)
        G = 1 / (eps + sqrt(V))                              (the RMSprop preconditioner)
        theta <- theta - (lr / 2) * G * grad U + sqrt(lr * G * T) * xi,   xi ~ N(0, I)

    The paper's correction term Gamma (the divergence of G) is dropped, as its experiments drop it:
    G changes slowly for alpha near 1, and the bias it leaves vanishes with lr. T = 0 is the
    deterministic preconditioned descent step (no noise is drawn). Noise comes from torch's global
    generator, so ``seed_everything`` fixes the chain.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        temperature: float,
        dataset_size: int,
        alpha: float = 0.99,
        eps: float = 1e-5,
    ) -> None:
        checks = {
            "lr": (lr, lr > 0, "a number > 0"),
            "temperature": (temperature, temperature >= 0, "a number >= 0"),
            "dataset_size": (dataset_size, dataset_size >= 1, "an integer >= 1"),
            "alpha": (alpha, 0 <= alpha < 1, "a number in [0, 1)"),
            "eps": (eps, eps > 0, "a number > 0"),
        }
        for name, (value, valid, expected) in checks.items():
            if not (valid and math.isfinite(value)):
                raise ValueError(f"PSGLD: {name}={value!r} is invalid, expected {expected}")
        defaults = {"lr": lr, "temperature": temperature, "dataset_size": dataset_size, "alpha": alpha, "eps": eps}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        for group in self.param_groups:
            lr, temperature, alpha = group["lr"], group["temperature"], group["alpha"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.zeros_like(p)
                square_avg = state["square_avg"]
                square_avg.mul_(alpha).addcmul_(p.grad, p.grad, value=(1 - alpha) / group["dataset_size"] ** 2)
                preconditioner = 1.0 / (group["eps"] + square_avg.sqrt())
                p.addcmul_(preconditioner, p.grad, value=-lr / 2)
                if temperature > 0:
                    p.add_(torch.randn_like(p) * (lr * temperature * preconditioner).sqrt())
