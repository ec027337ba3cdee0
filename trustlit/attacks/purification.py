"""BridgePure: purifying protected (unlearnable) images with a diffusion bridge trained on a little leakage.

Wang, Lu, Gao, Kamath, Yu, "BridgePure: Limited Protection Leakage Can Break Black-Box Data Protection"
(NeurIPS 2025, arXiv 2412.21061; code EhanW/bridge-pure), built on the denoising diffusion bridge model (DDBM,
Zhou et al., ICLR 2024, arXiv 2309.16948; code alexzhou907/DDBM). Images enter and leave in [0, 1]; the bridge
works on x = 2 * image - 1 in [-1, 1], as released.

The VE bridge from x_0 (clean) to x_T (protected), T = sigma_max, a_t = t^2 / T^2:

    x_t = a_t x_T + (1 - a_t) x_0 + t sqrt(1 - a_t) eps,                     eps ~ N(0, I)

Preconditioning (released, with sigma_0 = sigma_T = sigma_data, c = 1, covariance cov_xy):

    A_t    = a_t^2 sigma_T^2 + (1 - a_t)^2 sigma_0^2 + 2 a_t (1 - a_t) cov_xy + t^2 (1 - a_t)
    B_t    = a_t^2 (sigma_T^2 sigma_0^2 - cov_xy^2) + sigma_0^2 t^2 (1 - a_t)
    c_in   = A_t^(-1/2),  c_skip = ((1 - a_t) sigma_0^2 + a_t cov_xy) / A_t,  c_out = sqrt(B_t / A_t)
    c_noise = 250 log t,  D(x_t, t, x_T) = c_skip x_t + c_out F([c_in x_t, x_T], c_noise)

Training (``bridge_karras`` weighting, t ~ U(sigma_min, sigma_max)): L = lambda_t ||D(x_t, t, x_T) - x_0||^2 with
lambda_t = A_t / B_t = 1 / c_out^2. Sampling from x_T: Karras times t_0 = T - 1e-4 > ... > t_{N-1} = sigma_min,
t_N = 0 (rho = 7); each step first (churn s > 0) an Euler-Maruyama step of the bridge SDE from t_i to
t_hat = t_i + s (t_{i+1} - t_i),

    x <- x - 2 (D - x) / t_i * (t_hat - t_i) + sqrt(2 t_i |t_hat - t_i|) z,

then a Heun step of the probability-flow ODE from t_hat to t_{i+1} (Euler on the last step, to t = 0),

    dx/dt = -t [ (D - x) / t^2 - w (x_T - x) / (T^2 - t^2) ],

with D clipped to [-1, 1] and the guidance w (w = 1 is DDBM's ODE; BridgePure's scripts use w = 0.5).
Pre-noise (BridgePure's pre-processing, applied to the protected image of every leaked pair and of every image to
purify): G_beta(x') = sqrt(1 - beta) x' + sqrt(beta) eps, clipped to [-1, 1].

Notes: docs/methods/bridgepure.md
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import nn

from trustlit.hparams import (
    ClosedUnitInterval,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.metrics.images import psnr

Denoiser = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (x_t, t [B], x_T) -> x_0 estimate

SIGMA_MAX, SIGMA_MIN, SIGMA_DATA, RHO = 80.0, 0.002, 0.5, 7.0  # the released VE values (args.sh)
RELEASED_STEPS = 40  # sample_ddbm.sh: N=40 Heun steps
SCHEDULE_EPS = 1e-4  # the first time is sigma_max - 1e-4, so that T^2 - t^2 > 0


def _expand(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-sample tensor [B] broadcast against images [B, C, H, W]."""
    return values.reshape(-1, *([1] * (like.ndim - 1))).to(like)


def bridge_marginal(
    x0: torch.Tensor, xT: torch.Tensor, t: torch.Tensor, sigma_max: float = SIGMA_MAX
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean a_t x_T + (1 - a_t) x_0 and the std t sqrt(1 - a_t) of x_t given (x_0, x_T), a_t = t^2 / T^2."""
    a = _expand(t, x0) ** 2 / sigma_max**2
    return a * xT + (1 - a) * x0, _expand(t, x0) * torch.sqrt((1 - a).clamp_min(0))


def bridge_sample(
    x0: torch.Tensor, xT: torch.Tensor, t: torch.Tensor, noise: torch.Tensor, sigma_max: float = SIGMA_MAX
) -> torch.Tensor:
    """x_t = mean + std * noise (see :func:`bridge_marginal`)."""
    mean, std = bridge_marginal(x0, xT, t, sigma_max)
    return mean + std * noise


def _bridge_terms(
    t: torch.Tensor, sigma_max: float, sigma_data: float, cov_xy: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a_t, A_t, B_t) of the module docstring, sigma_0 = sigma_T = sigma_data."""
    a = t**2 / sigma_max**2
    var = sigma_data**2
    big_a = a**2 * var + (1 - a) ** 2 * var + 2 * a * (1 - a) * cov_xy + t**2 * (1 - a)
    big_b = a**2 * (var * var - cov_xy**2) + var * t**2 * (1 - a)
    return a, big_a, big_b


def bridge_scalings(
    t: torch.Tensor, sigma_max: float = SIGMA_MAX, sigma_data: float = SIGMA_DATA, cov_xy: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The released preconditioning (c_skip, c_out, c_in) at times t (module docstring)."""
    a, big_a, big_b = _bridge_terms(t, sigma_max, sigma_data, cov_xy)
    c_in = big_a.rsqrt()
    c_skip = ((1 - a) * sigma_data**2 + a * cov_xy) / big_a
    return c_skip, torch.sqrt(big_b) * c_in, c_in


def bridge_weighting(
    t: torch.Tensor, sigma_max: float = SIGMA_MAX, sigma_data: float = SIGMA_DATA, cov_xy: float = 0.0
) -> torch.Tensor:
    """The ``bridge_karras`` loss weight lambda_t = A_t / B_t (= 1 / c_out^2)."""
    _, big_a, big_b = _bridge_terms(t, sigma_max, sigma_data, cov_xy)
    return big_a / big_b


def noise_conditioning(t: torch.Tensor) -> torch.Tensor:
    """c_noise = 1000 * 0.25 * log t, the time the released network sees."""
    return 250.0 * torch.log(t + 1e-44)


def karras_times(
    steps: int, sigma_min: float = SIGMA_MIN, sigma_max: float = SIGMA_MAX, rho: float = RHO
) -> torch.Tensor:
    """The ``steps`` Karras times from sigma_max - 1e-4 down to sigma_min (exponent rho), then 0: [steps + 1]."""
    if steps < 2:
        raise ValueError(f"steps={steps} is invalid, expected an integer >= 2 (the released sampler uses 40)")
    top, bottom = (sigma_max - SCHEDULE_EPS) ** (1 / rho), sigma_min ** (1 / rho)
    times = (top + torch.linspace(0, 1, steps, dtype=torch.float64) * (bottom - top)) ** rho
    return torch.cat([times, times.new_zeros(1)])


def ode_drift(
    x: torch.Tensor, t: float, denoised: torch.Tensor, xT: torch.Tensor, sigma_max: float, guidance: float
) -> torch.Tensor:
    """dx/dt of the bridge probability-flow ODE: -t [(D - x) / t^2 - w (x_T - x) / (T^2 - t^2)]."""
    return -t * ((denoised - x) / t**2 - guidance * (xT - x) / (sigma_max**2 - t**2))


def sample_bridge(
    denoiser: Denoiser,
    xT: torch.Tensor,
    *,
    steps: int = RELEASED_STEPS,
    sigma_min: float = SIGMA_MIN,
    sigma_max: float = SIGMA_MAX,
    rho: float = RHO,
    churn_step_ratio: float = 0.33,
    guidance: float = 0.5,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """x_0 from x_T by the released hybrid sampler (module docstring): per step an optional Euler-Maruyama churn
    step of the SDE, then Heun on the ODE; ``denoiser(x_t, t [B], x_T)`` estimates x_0. Output clipped to [-1, 1]."""
    if not 0 <= churn_step_ratio < 1:
        raise ValueError(f"churn_step_ratio={churn_step_ratio} is invalid, expected a number in [0, 1)")
    times = karras_times(steps, sigma_min, sigma_max, rho).tolist()
    ones = xT.new_ones(xT.shape[0])

    def denoise(x: torch.Tensor, t: float) -> torch.Tensor:
        return denoiser(x, t * ones, xT).clamp(-1, 1)

    x = xT
    for t, t_next in itertools.pairwise(times):
        t_hat = t
        if churn_step_ratio > 0:
            t_hat = t + churn_step_ratio * (t_next - t)
            noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
            x = x - 2 * (denoise(x, t) - x) / t * (t_hat - t) + math.sqrt(2 * t * abs(t_hat - t)) * noise
        d = ode_drift(x, t_hat, denoise(x, t_hat), xT, sigma_max, guidance)
        if t_next == 0:
            x = x + d * (t_next - t_hat)
        else:
            x_euler = x + d * (t_next - t_hat)
            d_next = ode_drift(x_euler, t_next, denoise(x_euler, t_next), xT, sigma_max, guidance)
            x = x + (d + d_next) / 2 * (t_next - t_hat)
    return x.clamp(-1, 1)


def pre_noise(x: torch.Tensor, beta: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """G_beta(x) = sqrt(1 - beta) x + sqrt(beta) eps on [-1, 1] images, clipped to [-1, 1]; beta = 0 is identity."""
    if not 0 <= beta < 1:
        raise ValueError(f"pre_noise beta={beta} is invalid, expected a number in [0, 1)")
    if beta == 0:
        return x
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
    return (math.sqrt(1 - beta) * x + math.sqrt(beta) * noise).clamp(-1, 1)


class Purifier(ABC):
    """Maps protected images [N, C, H, W] in [0, 1] to purified images of the same shape and range."""

    channels: int | None = None  # the channel count a trained purifier accepts (None: any)

    def purify(self, images: torch.Tensor) -> torch.Tensor:
        """The purified ``images`` (checked: float [N, C, H, W] in [0, 1])."""
        from trustlit.data.images import check_images

        check_images(images, "images to purify")
        if len(images) == 0:
            raise ValueError("images to purify is empty, expected at least one image")
        if self.channels is not None and images.shape[1] != self.channels:
            raise ValueError(f"images to purify have {images.shape[1]} channels, expected {self.channels}")
        with torch.no_grad():
            return self._purify(images).clamp(0, 1)

    @abstractmethod
    def _purify(self, images: torch.Tensor) -> torch.Tensor:
        """The purification itself, on checked images."""


def build_unet(
    in_channels: int,
    out_channels: int,
    image_size: int,
    block_out_channels: list[int],
    layers_per_block: int,
    dropout: float,
) -> nn.Module:
    """A small diffusers ``UNet2DModel`` built from config (no weights): plain ResNet blocks, no attention."""
    from diffusers import UNet2DModel

    levels = len(block_out_channels)
    if levels < 1 or any(int(width) <= 0 for width in block_out_channels):
        raise ValueError(f"block_out_channels={block_out_channels} is invalid, expected one or more positive widths")
    if image_size % 2 ** (levels - 1):
        raise ValueError(
            f"image_size={image_size} is invalid for {levels} UNet levels, expected a multiple of {2 ** (levels - 1)}"
        )
    return UNet2DModel(
        sample_size=image_size,
        in_channels=in_channels,
        out_channels=out_channels,
        block_out_channels=tuple(int(width) for width in block_out_channels),
        layers_per_block=layers_per_block,
        down_block_types=("DownBlock2D",) * levels,
        up_block_types=("UpBlock2D",) * levels,
        norm_num_groups=math.gcd(8, *(int(width) for width in block_out_channels)),
        dropout=dropout,
    )


def paired_batch(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_0, x_T) = (clean, protected) of a leaked-pairs batch, mapped from [0, 1] to [-1, 1]."""
    return 2 * batch["clean"] - 1, 2 * batch["protected"] - 1


class PairedUNetPurifier(L.LightningModule, Purifier):
    """Shared by :class:`BridgePure` and :class:`SupervisedDenoiser`: the UNet, Adam, an EMA copy of the weights
    (used to purify when ``ema_decay`` > 0), the loss per batch of (clean, protected) pairs, and the test metrics
    (MSE and PSNR of purified vs clean on the test pairs). Subclasses define :meth:`loss` and :meth:`restore`."""

    def setup_unet(self, in_channels: int) -> None:
        hp = self.hparams
        self.channels = int(hp.channels)
        self.unet = build_unet(in_channels, self.channels, hp.image_size, list(hp.block_out_channels),
                               hp.layers_per_block, hp.dropout)  # fmt: skip
        self.ema = None
        if hp.ema_decay > 0:
            from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

            self.ema = AveragedModel(self.unet, multi_avg_fn=get_ema_multi_avg_fn(hp.ema_decay), use_buffers=True)
            self.ema.requires_grad_(False)  # updated by averaging, never by the optimiser

    @property
    def network(self) -> nn.Module:
        """The weights that purify: the EMA copy when kept, else the trained UNet."""
        return self.unet if self.ema is None else self.ema.module

    @abstractmethod
    def loss(self, x0: torch.Tensor, xT: torch.Tensor) -> torch.Tensor:
        """The training loss of one batch of pairs on [-1, 1]."""

    @abstractmethod
    def restore(self, xT: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Purified images on [-1, 1] from protected ones on [-1, 1]."""

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(*paired_batch(batch))
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["clean"].shape[0])
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.ema is not None:
            self.ema.update_parameters(self.unet)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", self.loss(*paired_batch(batch)), batch_size=batch["clean"].shape[0])

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        purified = self.purify(batch["protected"])
        size = batch["clean"].shape[0]
        self.log("test/mse", (purified - batch["clean"]).pow(2).mean(), batch_size=size)
        self.log("test/psnr", psnr(purified, batch["clean"]).mean(), batch_size=size)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.unet.parameters(), lr=self.hparams.lr, weight_decay=0.0)

    def _purify(self, images: torch.Tensor) -> torch.Tensor:
        was_training = self.training
        self.eval()
        generator = torch.Generator(device=self.device).manual_seed(int(self.hparams.seed))
        size = int(self.hparams.purify_batch_size)
        try:
            parts = [self.restore(2 * part.to(self.device) - 1, generator) for part in images.split(size)]
        finally:
            self.train(was_training)
        return (torch.cat(parts).to(images) + 1) / 2


class BridgePure(PairedUNetPurifier):
    """BridgePure (see the module docstring): a VE DDBM from clean x_0 to protected x_T trained on leaked pairs,
    purifying by the released Heun sampler with churn.

    Args:
        channels, image_size: of the images (Fashion-MNIST: 1, 28).
        block_out_channels, layers_per_block, dropout: the UNet (released: ADM with 192 channels, 3 blocks per
            level, attention at 32/16/8, dropout 0.1; here a small attention-free diffusers UNet).
        lr: Adam learning rate (released 1e-4, no weight decay).
        ema_decay: EMA of the weights used to purify (released 0.9999 over 100k steps; 0 keeps none).
        sigma_max, sigma_min, sigma_data, cov_xy: the VE bridge (released 80, 0.002, 0.5, 0).
        beta: pre-noise G_beta on the protected images (released 0 or 0.02).
        steps, churn_step_ratio, guidance, rho: the sampler (released 40, s in {0.33, 0.8}, w = 0.5, rho = 7).
        purify_batch_size: images per sampler call; seed: seeds pre-noise and churn noise when purifying.
    """

    def __init__(
        self,
        channels: PositiveInt = 1,
        image_size: PositiveInt = 28,
        block_out_channels: list[int] = [32, 64],  # noqa: B006 (jsonargparse reads the default)
        layers_per_block: PositiveInt = 1,
        dropout: ClosedUnitInterval = 0.1,
        lr: PositiveFloat = 1e-4,
        ema_decay: ClosedUnitInterval = 0.9999,
        sigma_max: PositiveFloat = SIGMA_MAX,
        sigma_min: PositiveFloat = SIGMA_MIN,
        sigma_data: PositiveFloat = SIGMA_DATA,
        cov_xy: NonNegativeFloat = 0.0,
        beta: ClosedUnitInterval = 0.0,
        steps: PositiveInt = RELEASED_STEPS,
        churn_step_ratio: ClosedUnitInterval = 0.33,
        guidance: NonNegativeFloat = 0.5,
        rho: PositiveFloat = RHO,
        purify_batch_size: PositiveInt = 256,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(BridgePure.__init__, locals())
        for key, value, ok, valid in (
            ("beta", beta, beta < 1, "a number in [0, 1)"),
            ("churn_step_ratio", churn_step_ratio, churn_step_ratio < 1, "a number in [0, 1)"),
            (
                "sigma_min",
                sigma_min,
                sigma_min < sigma_max - SCHEDULE_EPS,
                f"a number below sigma_max - {SCHEDULE_EPS}",
            ),
            ("steps", steps, steps >= 2, "an integer >= 2"),
        ):
            if not ok:
                raise ValueError(f"BridgePure: {key}={value!r} is invalid, expected {valid}")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.setup_unet(in_channels=2 * int(channels))  # [c_in x_t, x_T] concatenated (condition_mode=concat)

    def denoise(
        self, x_t: torch.Tensor, t: torch.Tensor, xT: torch.Tensor, network: nn.Module | None = None
    ) -> torch.Tensor:
        """D(x_t, t, x_T) = c_skip x_t + c_out F([c_in x_t, x_T], c_noise)."""
        hp = self.hparams
        c_skip, c_out, c_in = (_expand(c, x_t) for c in bridge_scalings(t, hp.sigma_max, hp.sigma_data, hp.cov_xy))
        network = self.unet if network is None else network
        output = network(torch.cat([c_in * x_t, xT], dim=1), noise_conditioning(t)).sample
        return c_skip * x_t + c_out * output

    def loss(self, x0: torch.Tensor, xT: torch.Tensor) -> torch.Tensor:
        hp = self.hparams
        xT = pre_noise(xT, hp.beta)
        t = torch.rand(x0.shape[0], device=x0.device) * (hp.sigma_max - hp.sigma_min) + hp.sigma_min
        x_t = bridge_sample(x0, xT, t, torch.randn_like(x0), hp.sigma_max)
        error = (self.denoise(x_t, t, xT) - x0).pow(2).flatten(1).mean(1)
        return (bridge_weighting(t, hp.sigma_max, hp.sigma_data, hp.cov_xy) * error).mean()

    def restore(self, xT: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        hp = self.hparams
        xT = pre_noise(xT, hp.beta, generator)

        def denoiser(x_t: torch.Tensor, t: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
            return self.denoise(x_t, t, end, self.network)

        sampler = {key: hp[key] for key in ("steps", "sigma_min", "sigma_max", "rho", "churn_step_ratio", "guidance")}
        return sample_bridge(denoiser, xT, **sampler, generator=generator)


class SupervisedDenoiser(PairedUNetPurifier):
    """The plain-regression peer of :class:`BridgePure`: the same UNet, trained on the same leaked pairs to map a
    protected image to its clean one in one pass, x_0_hat = x_T + F(x_T, 0), minimising ||x_0_hat - x_0||^2.

    Args: as :class:`BridgePure` (UNet, optimiser, EMA, ``purify_batch_size``, ``seed``); no bridge or sampler.
    """

    def __init__(
        self,
        channels: PositiveInt = 1,
        image_size: PositiveInt = 28,
        block_out_channels: list[int] = [32, 64],  # noqa: B006 (jsonargparse reads the default)
        layers_per_block: PositiveInt = 1,
        dropout: ClosedUnitInterval = 0.1,
        lr: PositiveFloat = 1e-4,
        ema_decay: ClosedUnitInterval = 0.9999,
        purify_batch_size: PositiveInt = 256,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(SupervisedDenoiser.__init__, locals())
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.setup_unet(in_channels=int(channels))

    def predict_clean(self, xT: torch.Tensor, network: nn.Module | None = None) -> torch.Tensor:
        """x_T + F(x_T, 0): the residual makes the identity the starting point."""
        network = self.unet if network is None else network
        return xT + network(xT, torch.zeros(xT.shape[0], device=xT.device)).sample

    def loss(self, x0: torch.Tensor, xT: torch.Tensor) -> torch.Tensor:
        return (self.predict_clean(xT) - x0).pow(2).mean()

    def restore(self, xT: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.predict_clean(xT, self.network)
