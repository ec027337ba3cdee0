"""Contimask: a mask in continuous time explaining a black box on irregular time series.

Moebus, Braun & Holz, "Contimask: Explaining Irregular Time Series via Perturbations in Continuous Time"
(NeurIPS 2025; released code eth-siplab/contimask).

For each explained instance x = {(t_i, c_i, x_i)} a network m_phi: t -> R^F (Fourier features
gamma(t) = [sin(2 pi 2^k t), cos(2 pi 2^k t)]_{k < n_frequencies}, then a ReLU MLP, one output logit per channel)
gives the mask of observation i, m_i = sigmoid(l_phi(t_i)[c_i]). A perturbation pi_m
(:mod:`trustlit.attribution.perturbations`: Gaussian blur, fade to the moving average, deletion) replaces what
the mask does not keep, and phi minimises the preservation game

    L(phi) = delta * mean_k (f_k(pi_m(x)) - f_k(x))^2 + area * A(m) + tv * V(m),

f the black box's class probabilities (``output="probabilities"``) or logits, A(m) = mean over the observation
times t_i of x and the channels k of m(t_i, k), and V(m) = sum over consecutive observation times and channels of
|m(t_{i+1}, k) - m(t_i, k)| divided by F times the number of distinct consecutive times (the released
mean |dm/dt| on the grid of observation times). Blur and fade are differentiable in m and train phi by Adam
(``optimizer="adam"``); deletion removes observation i when a hard-concrete draw of its logit says so
(observed=False, "never made"; K = ``samples`` draws per evaluation, A and V on the hard mask 1[l > 0.5] as
released) and trains phi by NeuroEvolution (PGPE, evotorch, ``optimizer="pgpe"``): ``generations`` *
(1 - ``final_fraction``) generations with ``area``, then the rest with ``area_final``, restarted from the best
solution of the first phase, as released. Defaults are the released rare-feature settings.

One ``training_step`` fits the masks of one batch of instances to the end (manual optimisation, the black box
frozen in eval mode); ``trustlit fit`` with ``max_epochs=1`` explains every instance of the datamodule's training
split once. At the end of the epoch the per-observation saliency (m_i; for deletion the released fitted mask
1[l_i > 0.5]; the logits l_i too) goes to ``<default_root_dir>/<results_file>`` (JSON, atomic); when
the batches carry ``saliency`` (ground truth), AUP, AUR and AUPRC (:mod:`trustlit.attribution.saliency`) are
logged as ``train/aup`` etc. and written with it; a heatmap of the first masks goes to a PNG next to it (and to
W&B with a ``WandbLogger``).

Notes: docs/methods/contimask.md
"""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.fabric.utilities.data import AttributeDict
from torch import nn

from trustlit.attribution.perturbations import (
    channel_average,
    delete,
    fade,
    gaussian_blur,
    hard_concrete_keep,
)
from trustlit.attribution.saliency import explained_output, saliency_metrics
from trustlit.data.timeseries import check_observations
from trustlit.hparams import (
    NonNegativeFloat,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.paths import write_json_atomic

Layers = list[tuple[torch.Tensor, torch.Tensor]]  # (weight [N, in, out], bias [N, out]) per linear layer


def fourier_features(times: torch.Tensor, n_frequencies: int) -> torch.Tensor:
    """gamma(t) = [sin(2 pi 2^k t), cos(2 pi 2^k t)] for k < n_frequencies: [..., 2 n_frequencies]."""
    frequencies = 2 * math.pi * 2.0 ** torch.arange(n_frequencies, device=times.device, dtype=times.dtype)
    angles = times.unsqueeze(-1) * frequencies
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def mlp_logits(layers: Layers, features: torch.Tensor) -> torch.Tensor:
    """N independent ReLU MLPs at once: features [N, L, d] -> logits [N, L, F]."""
    hidden = features
    for position, (weight, bias) in enumerate(layers):
        hidden = torch.baddbmm(bias.unsqueeze(1), hidden, weight)
        if position < len(layers) - 1:
            hidden = torch.relu(hidden)
    return hidden


class FourierMaskNetwork(nn.Module):
    """``n_masks`` independent mask networks m_phi (one per explained instance), each the released
    ``MaskFunctionFourier``: gamma(t) -> Linear(2 n_frequencies, hidden) -> ReLU -> Linear(hidden, hidden) -> ReLU
    -> Linear(hidden, n_channels), initialised as ``nn.Linear`` is (U(+-1/sqrt(fan_in)) weights and biases)."""

    def __init__(
        self,
        n_masks: int,
        n_channels: int,
        hidden_dim: int = 16,
        n_frequencies: int = 24,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.n_frequencies = n_frequencies
        widths = [2 * n_frequencies, hidden_dim, hidden_dim, n_channels]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(widths):
            bound = 1 / math.sqrt(fan_in)
            weight = torch.empty(n_masks, fan_in, fan_out).uniform_(-bound, bound, generator=generator)
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(torch.empty(n_masks, fan_out).uniform_(-bound, bound, generator=generator)))

    def layers(self) -> Layers:
        return list(zip(self.weights, self.biases, strict=True))

    def forward(self, times: torch.Tensor) -> torch.Tensor:
        """times [N, L] -> logits [N, L, F]."""
        return mlp_logits(self.layers(), fourier_features(times, self.n_frequencies))

    def flat(self) -> torch.Tensor:
        """The parameters of each network as one vector: [N, D] (the search space of PGPE)."""
        parts = [tensor.detach().flatten(1) for pair in self.layers() for tensor in pair]
        return torch.cat(parts, dim=1)

    def unflatten(self, vectors: torch.Tensor) -> Layers:
        """Vectors [P, D] laid out as :meth:`flat` -> layers with leading dimension P."""
        layers, start = [], 0
        for weight, bias in self.layers():
            shaped = []
            for tensor in (weight, bias):
                size = tensor[0].numel()
                shaped.append(vectors[:, start : start + size].reshape(-1, *tensor.shape[1:]))
                start += size
            layers.append((shaped[0], shaped[1]))
        return layers


def at_observations(grid: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:
    """grid [..., L, F] (a mask or logits at each observation time for every channel) -> [..., L] at the
    observation's own channel."""
    index = channels.clamp(0, grid.shape[-1] - 1).expand(grid.shape[:-1]).unsqueeze(-1)
    return grid.gather(-1, index).squeeze(-1)


def area_and_variation(
    mask: torch.Tensor, times: torch.Tensor, observed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A(m) and V(m) of the module docstring for a mask grid [..., N, L, F] at the observation times [N, L]
    (padding last): each [..., N]."""
    weight = observed.to(mask.dtype)
    channels = mask.shape[-1]
    area = (mask * weight.unsqueeze(-1)).sum((-1, -2)) / (weight.sum(-1) * channels).clamp_min(1)
    pairs = observed[:, 1:] & observed[:, :-1]
    steps = (mask[..., 1:, :] - mask[..., :-1, :]).abs().sum(-1) * pairs
    distinct = (pairs & (times[:, 1:] > times[:, :-1])).sum(-1)
    return area, steps.sum(-1) / (distinct * channels).clamp_min(1)


class Contimask(L.LightningModule):
    """Contimask masks fitted per instance (see the module docstring for the loss and the training).

    Args:
        black_box: the explained model, ``forward(times, channels, values, observed) -> logits [B, C]``; frozen,
            kept in eval mode.
        black_box_checkpoint: a state_dict (or Lightning checkpoint) file loaded into ``black_box``; None explains
            the module as built.
        perturbation: ``blur`` (Gaussian blur), ``fade`` (to the moving average) or ``deletion``.
        optimizer: ``adam`` (blur, fade) or ``pgpe`` (any; the only choice for deletion); None picks ``adam`` for
            blur/fade and ``pgpe`` for deletion.
        n_channels: F, the mask's outputs; None takes the largest channel index of each batch plus one.
        hidden_dim, n_frequencies: the mask network (released rare-feature defaults 16 and 24).
        delta, area, area_final, tv: loss weights (released: 1, 10 * 0.1, 100 * 0.1 in PGPE's last phase, 0.001).
        steps, lr: Adam steps and learning rate (released 2 * 8000 and 0.01).
        generations, final_fraction, popsize, radius_init, center_learning_rate, stdev_learning_rate: PGPE
            (released 2000, 0.3, 100, 3, 0.5, 0.3; symmetric sampling, evotorch's ClipUp).
        samples, temperature: hard-concrete draws per evaluation and their temperature (deletion; released 10, 0.8).
        sigma_max: blur width at m = 0 in the unit of the times (released 2). window: fade's moving-average
            window in that unit (None: the whole series, as released).
        output: what f is: the black box's class ``probabilities`` (softmax) or its ``logits``.
        results_file: JSON written under ``trainer.default_root_dir``; the heatmap PNG goes next to it.
        plot_instances: instances drawn in the heatmap (0: none).
        seed: seeds the networks' initialisation, the draws and PGPE.
    """

    def __init__(
        self,
        black_box: nn.Module,
        black_box_checkpoint: str | None = None,
        perturbation: Literal["blur", "fade", "deletion"] = "blur",
        optimizer: Literal["adam", "pgpe"] | None = None,
        n_channels: PositiveInt | None = None,
        hidden_dim: PositiveInt = 16,
        n_frequencies: PositiveInt = 24,
        delta: NonNegativeFloat = 1.0,
        area: NonNegativeFloat = 1.0,
        area_final: NonNegativeFloat = 10.0,
        tv: NonNegativeFloat = 0.001,
        steps: PositiveInt = 16000,
        lr: PositiveFloat = 0.01,
        generations: PositiveInt = 2000,
        final_fraction: OpenUnitInterval = 0.3,
        popsize: PositiveInt = 100,
        radius_init: PositiveFloat = 3.0,
        center_learning_rate: PositiveFloat = 0.5,
        stdev_learning_rate: PositiveFloat = 0.3,
        samples: PositiveInt = 10,
        temperature: PositiveFloat = 0.8,
        sigma_max: PositiveFloat = 2.0,
        window: PositiveFloat | None = None,
        output: Literal["probabilities", "logits"] = "logits",
        results_file: str = "contimask.json",
        plot_instances: int = 4,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(Contimask.__init__, locals())
        choices = {"perturbation": ("blur", "fade", "deletion"), "optimizer": ("adam", "pgpe", None)}
        choices["output"] = ("probabilities", "logits")
        for key, allowed in choices.items():
            if locals()[key] not in allowed:
                raise ValueError(f"Contimask: {key}={locals()[key]!r} is invalid, expected one of {allowed}")
        optimizer = optimizer or ("pgpe" if perturbation == "deletion" else "adam")
        if perturbation == "deletion" and optimizer == "adam":
            raise ValueError("Contimask: optimizer='adam' is invalid with perturbation='deletion' (not differentiable)")
        if popsize < 2 or popsize % 2:
            raise ValueError(f"Contimask: popsize={popsize!r} is invalid, expected an even integer >= 2 (symmetric)")
        if plot_instances < 0:
            raise ValueError(f"Contimask: plot_instances={plot_instances!r} is invalid, expected an integer >= 0")
        self.save_hyperparameters(ignore=["black_box"])
        self.hparams.optimizer = optimizer
        plain_numbers(self.hparams)
        self.automatic_optimization = False
        self.black_box = repair_hyperparameters(black_box)
        if black_box_checkpoint is not None:
            load_black_box(black_box, black_box_checkpoint)
        self.black_box.requires_grad_(False)
        self.black_box.eval()
        self.explained: list[dict[str, Any]] = []
        self.pgpe_history: list[dict[str, Any]] = []
        self.generator: torch.Generator | None = None
        self.plotted: list[dict[str, torch.Tensor]] = []

    def train(self, mode: bool = True) -> Contimask:
        """Lightning switches the module to training mode: the black box stays in eval mode (no dropout)."""
        super().train(mode)
        self.black_box.eval()
        return self

    def f(
        self, times: torch.Tensor, channels: torch.Tensor, values: torch.Tensor, observed: torch.Tensor
    ) -> torch.Tensor:
        """The explained output: class probabilities or logits [N, C]."""
        return explained_output(self.black_box(times, channels, values, observed), self.hparams.output)

    # --- the loss ---------------------------------------------------------------------------------------------

    def losses(
        self, logits: torch.Tensor, batch: dict[str, torch.Tensor], target: torch.Tensor, area: float
    ) -> torch.Tensor:
        """L(phi) for mask logits [..., N, L, F] (leading dimensions: a PGPE population) of the N instances of
        ``batch`` (which holds ``average`` for fade), ``target`` = f(x) [N, C]: [..., N]."""
        if self.hparams.perturbation == "deletion":
            grid = (logits > 0.5).to(logits.dtype)
            error = self.deletion_error(logits, batch, target)
        else:
            grid = torch.sigmoid(logits)
            error = self.continuous_error(grid, batch, target)
        mass, variation = area_and_variation(grid, batch["times"], batch["observed"])
        return self.hparams.delta * error + area * mass + self.hparams.tv * variation

    def continuous_error(
        self, grid: torch.Tensor, batch: dict[str, torch.Tensor], target: torch.Tensor
    ) -> torch.Tensor:
        """mean_k (f_k(pi_m(x)) - f_k(x))^2 under blur or fade for a mask grid [..., N, L, F]: [..., N]."""
        lead, width = grid.shape[:-3], batch["times"].shape[-1]

        def rows(tensor: torch.Tensor) -> torch.Tensor:  # [N, L] -> [prod(lead) * N, L]
            return tensor.expand(*lead, *tensor.shape).reshape(-1, width)

        times, channels, values, observed = (rows(batch[k]) for k in ("times", "channels", "values", "observed"))
        mask = at_observations(grid, batch["channels"]).reshape(-1, width)
        if self.hparams.perturbation == "blur":
            perturbed = gaussian_blur(times, channels, values, observed, mask, self.hparams.sigma_max)
        else:
            perturbed = fade(values, observed, mask, rows(batch["average"]))
        prediction = self.f(times, channels, perturbed, observed)
        return ((prediction.reshape(*lead, *target.shape) - target) ** 2).mean(-1)

    def deletion_error(
        self, logits: torch.Tensor, batch: dict[str, torch.Tensor], target: torch.Tensor
    ) -> torch.Tensor:
        """The same error averaged over ``samples`` hard-concrete deletions drawn from logits [..., N, L, F]."""
        width = batch["times"].shape[-1]
        observation_logits = at_observations(logits, batch["channels"])
        draws = observation_logits.expand(self.hparams.samples, *observation_logits.shape)
        keep = hard_concrete_keep(draws, self.hparams.temperature, self.generator)
        values, observed = delete(batch["values"], batch["observed"], keep)
        times, channels = (batch[k].expand(keep.shape).reshape(-1, width) for k in ("times", "channels"))
        prediction = self.f(times, channels, values.reshape(-1, width), observed.reshape(-1, width))
        error = ((prediction.reshape(*keep.shape[:-1], -1) - target) ** 2).mean(-1)
        return error.mean(0)

    # --- fitting ------------------------------------------------------------------------------------------------

    def fit_adam(self, network: FourierMaskNetwork, batch: dict[str, torch.Tensor], target: torch.Tensor) -> Layers:
        """``steps`` Adam steps on sum_n L(phi_n) (the networks share nothing, so each gets its own update)."""
        optimizer = torch.optim.Adam(network.parameters(), lr=self.hparams.lr)
        for _ in range(self.hparams.steps):
            loss = self.losses(network(batch["times"]), batch, target, self.hparams.area).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return [(weight.detach(), bias.detach()) for weight, bias in network.layers()]

    def fit_pgpe(self, network: FourierMaskNetwork, batch: dict[str, torch.Tensor], target: torch.Tensor) -> Layers:
        """PGPE per instance in two phases as released (``area``, then ``area_final`` from the first phase's best
        solution); each population is evaluated in one batched black-box call."""
        generations = self.hparams.generations
        final = round(generations * self.hparams.final_fraction)
        schedule = ((generations - final, self.hparams.area), (final, self.hparams.area_final))
        phases = [(count, area) for count, area in schedule if count]
        best = []
        for n in range(batch["times"].shape[0]):
            one = {key: value[n : n + 1] for key, value in batch.items()}
            center = network.flat()[n]
            for count, area in phases:
                center = self.pgpe_phase(network, one, target[n : n + 1], center, count, area, n)
            best.append(center)
        return network.unflatten(torch.stack(best))

    def pgpe_phase(
        self,
        network: FourierMaskNetwork,
        one: dict[str, torch.Tensor],
        target: torch.Tensor,
        center: torch.Tensor,
        generations: int,
        area: float,
        instance: int,
    ) -> torch.Tensor:
        """``generations`` of PGPE from ``center`` on one instance's loss; returns the last population's best."""
        from evotorch import Problem
        from evotorch.algorithms import PGPE

        features = fourier_features(one["times"], self.hparams.n_frequencies)

        def fitness(solutions: torch.Tensor) -> torch.Tensor:
            solutions = solutions.as_subclass(torch.Tensor)  # evotorch's ReadOnlyTensor would spread to the inputs
            logits = mlp_logits(network.unflatten(solutions), features.expand(len(solutions), *features.shape[1:]))
            return self.losses(logits.unsqueeze(1), one, target, area).squeeze(1)

        problem = Problem(
            "min", fitness, solution_length=center.numel(), initial_bounds=(-1.0, 1.0), vectorized=True,
            device=center.device, dtype=center.dtype, seed=self.hparams.seed + instance,
        )  # fmt: skip
        searcher = PGPE(
            problem, popsize=self.hparams.popsize, radius_init=self.hparams.radius_init,
            center_learning_rate=self.hparams.center_learning_rate,
            stdev_learning_rate=self.hparams.stdev_learning_rate, symmetric=True, center_init=center,
        )  # fmt: skip
        with torch.no_grad():
            searcher.run(generations)
        best = float(searcher.status["pop_best_eval"])
        self.pgpe_history.append({"instance": instance, "area": area, "generations": generations, "best": best})
        return searcher.status["pop_best"].values.clone()

    def fit_masks(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, Layers]:
        """Fit the masks of one batch of instances: (logits at the observations [B, L], final loss [B], the
        networks' layers). :meth:`saliency_of` turns the logits into the saliency."""
        times, channels, values, observed = (batch[k] for k in ("times", "channels", "values", "observed"))
        check_observations(times, channels, values, observed)
        width = self.hparams.n_channels or int(channels[observed].max()) + 1
        if int(channels[observed].max()) >= width:
            largest = int(channels[observed].max())
            raise ValueError(f"channels: index {largest} is invalid, expected < n_channels={width}")
        seed = self.hparams.seed + int(batch["index"][0]) if "index" in batch else self.hparams.seed
        self.generator = torch.Generator(device=times.device).manual_seed(seed)
        parts = {"times": times, "channels": channels, "values": values, "observed": observed}
        if self.hparams.perturbation == "fade":
            parts["average"] = channel_average(times, channels, values, observed, self.hparams.window)
        sizes = (len(times), width, self.hparams.hidden_dim, self.hparams.n_frequencies)
        network = FourierMaskNetwork(*sizes, generator=torch.Generator().manual_seed(seed)).to(times.device)
        with torch.no_grad():
            target = self.f(times, channels, values, observed)
        fit = self.fit_adam if self.hparams.optimizer == "adam" else self.fit_pgpe
        layers = fit(network, parts, target)
        with torch.no_grad():
            logits = mlp_logits(layers, fourier_features(times, self.hparams.n_frequencies))
            loss = self.losses(logits, parts, target, self.hparams.area)
        return at_observations(logits, channels), loss, layers

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits, loss, layers = self.fit_masks(batch)
        self.log("train/loss", loss.mean(), batch_size=len(logits))
        self.record(batch, logits, loss, layers)

    # --- results ------------------------------------------------------------------------------------------------

    def saliency_of(self, logits: torch.Tensor) -> torch.Tensor:
        """Per-observation saliency from the mask logits: m = sigmoid(l), or for deletion the released fitted
        mask 1[l > 0.5] (the loss's hard mask; P(keep) = 1 - exp(-exp(l)) is not pushed below 0.5 by anything)."""
        if self.hparams.perturbation == "deletion":
            return (logits > 0.5).to(logits.dtype)
        return torch.sigmoid(logits)

    def record(self, batch: dict[str, torch.Tensor], logits: torch.Tensor, loss: torch.Tensor, layers: Layers) -> None:
        """Keep the explained instances' observed entries, saliency and loss (and masks to plot)."""
        saliency = self.saliency_of(logits)
        for n in range(len(logits)):
            keep = batch["observed"][n]
            row = {key: batch[key][n][keep].cpu() for key in ("times", "channels", "values")}
            row |= {"saliency": saliency[n][keep].cpu(), "logits": logits[n][keep].cpu(), "loss": float(loss[n])}
            if "index" in batch:
                row["index"] = int(batch["index"][n])
            if "label" in batch:
                row["label"] = int(batch["label"][n])
            if "saliency" in batch:
                row["truth"] = batch["saliency"][n][keep].cpu()
            self.explained.append(row)
            if len(self.plotted) < self.hparams.plot_instances:
                self.plotted.append(row | {"layers": [(w[n : n + 1].cpu(), b[n : n + 1].cpu()) for w, b in layers]})

    def on_train_epoch_start(self) -> None:
        self.explained, self.plotted, self.pgpe_history = [], [], []

    def on_train_epoch_end(self) -> None:
        results: dict[str, Any] = {"method": "Contimask", **{k: self.hparams[k] for k in ("perturbation", "optimizer")}}
        if all("truth" in row for row in self.explained) and self.explained:
            metrics = saliency_metrics(
                [row["saliency"] for row in self.explained], [row["truth"] for row in self.explained]
            )
            for name, value in metrics.items():
                self.log(f"train/{name}", value, sync_dist=True)
            results |= metrics
        results["pgpe_history"] = self.pgpe_history
        results["instances"] = [
            {key: value.tolist() if isinstance(value, torch.Tensor) else value for key, value in row.items()}
            for row in self.explained
        ]
        rank = "" if self.trainer.world_size == 1 else f".rank{self.trainer.global_rank}"
        path = Path(self.trainer.default_root_dir) / self.hparams.results_file
        write_json_atomic(path.with_name(path.stem + rank + path.suffix), results)
        if self.plotted and self.trainer.is_global_zero:
            from trustlit.figures import log_to_wandb

            image = self.plot(path.with_name(path.stem + "_masks.png"))
            log_to_wandb(self.trainer, "contimask", images=[image])

    def plot(self, path: Path) -> Path:
        """Heatmaps of m(t, k) on a grid of 200 times for the first instances, the observations on top
        (ringed in white where the ground truth marks them salient)."""
        from trustlit.figures import new_figure, save_png

        figure, axes = new_figure(nrows=len(self.plotted), ncols=1, figsize=(8, 2.6 * len(self.plotted)), squeeze=False)
        for axis, row in zip(axes[:, 0], self.plotted, strict=True):
            low, high = float(row["times"].min()), float(row["times"].max())
            grid = torch.linspace(low, high, 200).unsqueeze(0)
            with torch.no_grad():
                logits = mlp_logits(row["layers"], fourier_features(grid, self.hparams.n_frequencies))[0]
            mask = self.saliency_of(logits)
            extent = (low, high, -0.5, mask.shape[-1] - 0.5)
            image = axis.imshow(mask.T.numpy(), aspect="auto", origin="lower", extent=extent, vmin=0, vmax=1)
            axis.scatter(row["times"], row["channels"], s=3, c="black")
            if "truth" in row:
                salient = row["truth"].bool()
                axis.scatter(
                    row["times"][salient], row["channels"][salient], s=9, facecolors="none", edgecolors="white"
                )
            axis.set_ylabel("channel")
            axis.set_title(f"Contimask ({self.hparams.perturbation}) instance {row.get('index', '?')}", fontsize=9)
            figure.colorbar(image, ax=axis)
        axes[-1, 0].set_xlabel("time")
        return save_png(figure, path)

    def configure_optimizers(self) -> None:
        return None  # each training_step builds and runs the optimiser of its own masks


def repair_hyperparameters(black_box: nn.Module) -> nn.Module:
    """Give a LightningModule black box built by LightningCLI its own hyperparameters back: the CLI's instantiator
    hands every LightningModule it builds the ``model`` entry of the config (Lightning-AI/pytorch-lightning#13181
    is the same leak without the CLI), so the black box receives Contimask's, whose ``black_box.init_args`` are its
    own."""
    leaked = getattr(black_box, "hparams", {}).get("black_box") if isinstance(black_box, L.LightningModule) else None
    if isinstance(leaked, dict) and "init_args" in leaked:
        black_box._hparams = AttributeDict(copy.deepcopy(leaked["init_args"]))
        black_box._hparams_initial = copy.deepcopy(black_box._hparams)
    return black_box


def load_black_box(black_box: nn.Module, checkpoint: str) -> None:
    """Load a state_dict file (or a Lightning checkpoint's ``state_dict``) into ``black_box``."""
    path = Path(checkpoint)
    if not path.is_file():
        raise ValueError(f"black_box_checkpoint={checkpoint!r}: no such file")
    state = torch.load(path, map_location="cpu", weights_only=True)
    black_box.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
