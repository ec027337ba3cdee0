"""BatchTopK SAE (Bussmann, Leask, Nanda, "BatchTopK Sparse Autoencoders", NeurIPS 2024 workshop on
Scientific Methods for Understanding Deep Learning, arXiv 2412.06410).

Training: z = BatchTopK_{kB}(ReLU(h)) over the whole batch [B, n] flattened, h = (x - b_pre) W_enc + b_enc,
so the batch has k * B active latents (k per sample on average, varying from sample to sample).
Inference: a global threshold theta replaces the batch, z = h * 1[h > theta]; theta is estimated
during training as an exponential moving average of the smallest positive activation kept in each
batch, theta <- (1 - lr_theta) theta + lr_theta min_{z_bj > 0} z_bj (lr_theta = 0.01, SAELens'
``topk_threshold_lr``; the authors' code averages the minima of the last batches instead).
AuxK as in :mod:`~trustlit.interpret.sae.topk` (alpha = 1/32).

Notes: docs/methods/batch_topk_sae.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.hparams import OpenUnitInterval, PositiveInt, check_arguments
from trustlit.interpret.sae.topk import TopKSAE


def batch_topk_codes(pre_activations: torch.Tensor, k: int) -> torch.Tensor:
    """The k * B largest entries of ReLU(``pre_activations``) [B, n] over the whole batch, zeros elsewhere."""
    flat = pre_activations.relu().flatten()
    values, indices = flat.topk(min(k * pre_activations.shape[0], flat.numel()))
    return torch.zeros_like(flat).scatter(0, indices, values).view_as(pre_activations)


def threshold_codes(pre_activations: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """JumpReLU with one global threshold: h * 1[h > theta]."""
    return pre_activations * (pre_activations > threshold)


class BatchTopKSAE(TopKSAE):
    """BatchTopK SAE (see the module docstring): TopK's encoder and AuxK, with the batch-wide selection.

    Args:
        d_in: width of the activations.
        n_latents: number of atoms.
        k: mean active latents per sample (k * B per training batch).
        threshold_lr: rate of the moving average that estimates the inference threshold.
        Other arguments: see :class:`~trustlit.interpret.sae.topk.TopKSAE` (``aux_coefficient``, ``k_aux``)
        and :class:`~trustlit.interpret.sae.base.SparseAutoencoder`.
    """

    def __init__(
        self,
        d_in: PositiveInt,
        n_latents: PositiveInt,
        k: PositiveInt = 32,
        threshold_lr: OpenUnitInterval = 0.01,
        **kwargs: Any,
    ) -> None:
        check_arguments(BatchTopKSAE.__init__, locals())
        super().__init__(d_in, n_latents, k, **kwargs)
        self.register_buffer("threshold", torch.zeros(()))
        self.register_buffer("threshold_estimated", torch.tensor(False))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Training mode: BatchTopK over the batch; eval mode: the estimated threshold."""
        pre = self.pre_activations(x)
        return batch_topk_codes(pre, self.k) if self.training else threshold_codes(pre, self.threshold)

    def training_codes(self, pre_activations: torch.Tensor) -> torch.Tensor:
        z = batch_topk_codes(pre_activations, self.k)
        self.update_threshold(z)
        return z

    @torch.no_grad()
    def update_threshold(self, z: torch.Tensor) -> None:
        positive = z[z > 0]
        if positive.numel() == 0:
            return
        smallest = positive.min()
        if not bool(self.threshold_estimated):
            self.threshold.copy_(smallest)
            self.threshold_estimated.fill_(True)
        else:
            self.threshold.lerp_(smallest, self.hparams.threshold_lr)
