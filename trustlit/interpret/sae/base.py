"""The base of every sparse autoencoder: a dictionary of unit-norm atoms, a pre-bias, the loss and the metrics.

x_hat = z D + b_pre, with D [n_latents, d_in] (``.dictionary``, rows d_j, ||d_j|| = 1) and b_pre [d_in];
a variant defines the encoder x -> z [B, n_latents] (:meth:`SparseAutoencoder.encode`) and any
sparsity or auxiliary terms. The loss is L = mean_b ||x_b - x_hat_b||^2 + the variant's terms.

Every variant logs, at ``train/`` (per step) and ``val/`` (per validation epoch):

- ``mse``: mean_b ||x_b - x_hat_b||^2 / d_in (per element);
- ``fvu``: sum_b ||x_b - x_hat_b||^2 / sum_b ||x_b - mean(x)||^2 (at val over the whole validation set);
- ``l0``: the mean number of non-zero latents per token;
- ``dead_fraction``: at train, the share of atoms that have not fired over the last
  ``dead_window_tokens`` training tokens (or over all tokens seen while fewer have been);
  at val, the share that never fires on the validation set.

Training: Adam; after each optimizer step the atoms are renormalised to unit norm, and before it the
gradient component parallel to each atom is removed (it would only change the norm). ``b_pre`` is
initialised from the first training batch (geometric median, as in Gao et al. 2024).

Notes: docs/methods/sparse_autoencoders.md
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal, NamedTuple

import lightning as L
import torch
from torch import nn

from trustlit.hparams import PositiveFloat, PositiveInt, check_arguments, plain_numbers
from trustlit.interpret.sae.metrics import fvu, fvu_from_sums, geometric_median, mean_l0

BPreInit = Literal["geometric_median", "mean", "zeros"]


class SAEOutput(NamedTuple):
    """A training forward: codes z, reconstruction x_hat, and the variant's extra loss terms (added to the MSE)."""

    codes: torch.Tensor
    x_hat: torch.Tensor
    terms: dict[str, torch.Tensor]


def random_unit_rows(rows: int, columns: int, generator: torch.Generator | None = None) -> torch.Tensor:
    return nn.functional.normalize(torch.randn(rows, columns, generator=generator), dim=-1)


def activation_source(datamodule: Any) -> str:
    """Where a data module's activations come from, for error messages: its index file, else its class."""
    path = getattr(datamodule, "path", None)
    if path is None:
        return type(datamodule).__name__
    where = f"{path}/index.json" if not str(path).endswith(".json") else str(path)
    layer, site = getattr(datamodule, "layer", None), getattr(datamodule, "site", None)
    return f"{where} (layer {layer}, site {site})" if layer is not None else where


class SparseAutoencoder(L.LightningModule, ABC):
    """Base of the SAE variants (see the module docstring). Subclasses implement :meth:`encode` and
    :meth:`training_forward`.

    Args:
        d_in: width of the activations.
        n_latents: number of atoms.
        lr: Adam learning rate (SAELens' default 3e-4).
        betas: Adam's (beta1, beta2) (SAELens' default (0.9, 0.999)).
        b_pre_init: ``geometric_median`` or ``mean`` of the first training batch, or ``zeros``.
        dead_window_tokens: an atom is dead when unused over this many training tokens (Gao et al. 2024: 10M).
        seed: seeds the initial dictionary.
    """

    def __init__(
        self,
        d_in: PositiveInt,
        n_latents: PositiveInt,
        lr: PositiveFloat = 3e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        b_pre_init: BPreInit = "geometric_median",
        dead_window_tokens: PositiveInt = 10_000_000,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_arguments(SparseAutoencoder.__init__, locals())
        if b_pre_init not in ("geometric_median", "mean", "zeros"):
            raise ValueError(
                f"{type(self).__name__}: b_pre_init={b_pre_init!r} is invalid, expected geometric_median, mean or zeros"
            )
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.hparams["betas"] = [float(beta) for beta in betas]  # a list: hparams.yaml stays plain YAML
        self.d_in, self.n_latents = int(d_in), int(n_latents)
        self.W_dec = nn.Parameter(random_unit_rows(self.n_latents, self.d_in, torch.Generator().manual_seed(seed)))
        self.b_pre = nn.Parameter(torch.zeros(self.d_in))
        self.register_buffer("tokens_since_fired", torch.zeros(self.n_latents, dtype=torch.long))
        self.register_buffer("tokens_seen", torch.zeros((), dtype=torch.long))
        self.register_buffer("b_pre_initialised", torch.tensor(b_pre_init == "zeros"))
        self._val_sums: dict[str, Any] = {}

    # --- the dictionary -------------------------------------------------------------------------

    @property
    def dictionary(self) -> torch.Tensor:
        """D [n_latents, d_in], unit-norm atoms (the decoder's parameter itself)."""
        return self.W_dec

    @dictionary.setter
    def dictionary(self, value: torch.Tensor) -> None:
        value = torch.as_tensor(value, dtype=self.W_dec.dtype)
        if tuple(value.shape) != (self.n_latents, self.d_in):
            raise ValueError(
                f"{type(self).__name__}: a dictionary of shape {list(value.shape)} was assigned, "
                f"expected [n_latents, d_in] = [{self.n_latents}, {self.d_in}]"
            )
        norms = value.norm(dim=-1)
        if not bool((norms > 0).all()):
            raise ValueError(f"{type(self).__name__}: the assigned dictionary has zero atoms (rows {zero_rows(norms)})")
        with torch.no_grad():
            self.W_dec.copy_(value / norms.unsqueeze(-1))

    @torch.no_grad()
    def normalize_dictionary(self) -> None:
        self.W_dec.div_(self.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12))

    # --- encoder and decoder --------------------------------------------------------------------

    @abstractmethod
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Codes z [B, n_latents] of activations x [B, d_in] (inference: BatchTopK uses its threshold)."""

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """x_hat = z D + b_pre."""
        return z @ self.W_dec + self.b_pre

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    @abstractmethod
    def training_forward(self, x: torch.Tensor) -> SAEOutput:
        """The training-time encoding of a batch, its reconstruction and the variant's loss terms."""

    # --- checks ---------------------------------------------------------------------------------

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        width = getattr(datamodule, "hidden_size", None)
        if width is not None and int(width) != self.d_in:
            raise ValueError(
                f"{activation_source(datamodule)}: activations of width {int(width)}, but "
                f"{type(self).__name__} has d_in={self.d_in}: set model.init_args.d_in={int(width)}"
            )

    def activations(self, batch: dict[str, torch.Tensor] | torch.Tensor) -> torch.Tensor:
        x = batch["activations"] if isinstance(batch, dict) else batch
        if x.ndim != 2 or x.shape[-1] != self.d_in:
            raise ValueError(
                f"{type(self).__name__}: a batch of activations of shape {list(x.shape)}, "
                f"expected [B, d_in={self.d_in}]"
            )
        return x

    # --- training -------------------------------------------------------------------------------

    @torch.no_grad()
    def initialise_b_pre(self, x: torch.Tensor) -> None:
        if bool(self.b_pre_initialised):
            return
        self.b_pre.copy_(geometric_median(x) if self.hparams.b_pre_init == "geometric_median" else x.mean(dim=0))
        self.b_pre_initialised.fill_(True)

    @torch.no_grad()
    def track_firing(self, z: torch.Tensor) -> torch.Tensor:
        """Update the tokens-since-fired counters with codes z; return the dead mask [n_latents]."""
        fired = (z != 0).any(dim=0)
        self.tokens_since_fired.add_(z.shape[0]).masked_fill_(fired, 0)
        self.tokens_seen.add_(z.shape[0])
        return self.dead_mask()

    def dead_mask(self) -> torch.Tensor:
        window = torch.clamp(self.tokens_seen, max=self.hparams.dead_window_tokens)
        return (self.tokens_since_fired >= window) & (self.tokens_seen > 0)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x = self.activations(batch)
        self.initialise_b_pre(x)
        codes, x_hat, terms = self.training_forward(x)
        squared = (x - x_hat).square().sum(dim=-1).mean()
        loss = squared + sum(terms.values(), torch.zeros((), device=x.device))
        dead = self.track_firing(codes)
        logs = {
            "loss": loss.detach(),
            "mse": squared.detach() / self.d_in,
            "fvu": fvu(x, x_hat.detach()),
            "l0": mean_l0(codes.detach()),
            "dead_fraction": dead.float().mean(),
            **{name: term.detach() for name, term in terms.items()},
        }
        self.log_dict({f"train/{name}": value for name, value in logs.items()}, prog_bar=False)
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # the part of the gradient along each atom only changes its norm, which the renormalisation undoes
        grad = self.W_dec.grad
        if grad is not None:
            with torch.no_grad():
                grad.sub_((grad * self.W_dec).sum(dim=-1, keepdim=True) * self.W_dec)

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        self.normalize_dictionary()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, betas=tuple(self.hparams.betas))

    # --- validation -----------------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        self._val_sums = {"error": 0.0, "total": 0.0, "square": 0.0, "count": 0, "l0": 0.0, "fired": None}

    @torch.no_grad()
    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        x = self.activations(batch)
        z = self.encode(x)
        x_hat = self.decode(z)
        sums = self._val_sums
        sums["error"] = sums["error"] + (x - x_hat).square().sum()
        sums["total"] = sums["total"] + x.sum(dim=0)
        sums["square"] = sums["square"] + x.square().sum()
        sums["count"] += x.shape[0]
        sums["l0"] = sums["l0"] + (z != 0).sum()
        fired = (z != 0).any(dim=0)
        sums["fired"] = fired if sums["fired"] is None else sums["fired"] | fired

    def on_validation_epoch_end(self) -> None:
        sums = self._val_sums
        if not sums or sums["count"] == 0:
            return
        count = sums["count"]
        self.log_dict(
            {
                "val/mse": sums["error"] / (count * self.d_in),
                "val/fvu": fvu_from_sums(sums["error"], sums["total"], sums["square"], count),
                "val/l0": sums["l0"].float() / count,
                "val/dead_fraction": (~sums["fired"]).float().mean(),
            }
        )


class LinearEncoderSAE(SparseAutoencoder):
    """An SAE with a linear encoder: pre-activations h = (x - b_pre) W_enc + b_enc, W_enc [d_in, n_latents]
    initialised to D^T and b_enc to 0 (Gao et al. 2024); the variant's activation maps h to z."""

    def __init__(self, d_in: PositiveInt, n_latents: PositiveInt, **kwargs: Any) -> None:
        super().__init__(d_in, n_latents, **kwargs)
        self.W_enc = nn.Parameter(self.W_dec.detach().T.clone())
        self.b_enc = nn.Parameter(torch.zeros(self.n_latents))

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.b_pre) @ self.W_enc + self.b_enc


def zero_rows(norms: torch.Tensor) -> list[int]:
    return (norms == 0).nonzero().flatten().tolist()[:10]
