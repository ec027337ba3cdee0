"""Representation Misdirection for Unlearning (RMU; Li et al., 2024, "The WMDP Benchmark:
Measuring and Reducing Malicious Use With Unlearning", arXiv 2403.03218).

L = mean ||h_l(x_f) - c*u||^2 + alpha * mean ||h_l(x_r) - h_l^frozen(x_r)||^2

h_l is the output of decoder block ``layer`` at the answer tokens (means over each sample's
tokens, then the batch), u a random unit vector drawn once (uniform in [0, 1)^d, normalised,
as the released code) and scaled by the steering coefficient c, h^frozen the model before
unlearning. Only the MLP down-projections of blocks ``trainable_layers`` (default l-2, l-1, l)
train. Defaults: open-unlearning's TOFU config (l = 7, c = 2, alpha = 1); the WMDP paper used
c = 6.5, alpha = 1200 for Zephyr-7B.

Notes: docs/methods/rmu.md
"""

from __future__ import annotations

from typing import Any

import torch

from trustlit.hparams import NonNegativeFloat, PositiveFloat, check_arguments
from trustlit.llm import hooks
from trustlit.llm.anatomy import decoder_layer, decoder_layers, mlp_down_projection
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.unlearning.base import UnlearningModule
from trustlit.unlearning.losses import rmu_loss


class RMU(UnlearningModule):
    """RMU (see the module docstring).

    Args:
        layer: the block whose output is steered (negative counts from the last block).
        steering_coeff: c, the norm of the control vector.
        retain_weight: alpha.
        trainable_layers: blocks whose MLP down-projection trains; default ``[layer-2, layer-1, layer]``.
        control_seed: seeds the random direction u.
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        layer: int = 7,
        steering_coeff: PositiveFloat = 2.0,
        retain_weight: NonNegativeFloat = 1.0,
        trainable_layers: list[int] | None = None,
        control_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        check_arguments(RMU.__init__, locals())
        lm_spec = lm if not isinstance(lm, dict) else CausalLMSpec(**lm)
        if lm_spec is not None and lm_spec.lora is not None:
            raise ValueError("RMU trains MLP down-projections of chosen layers itself: drop `lora` from the model spec")
        super().__init__(lm, **kwargs)
        decoder_layer(self.model, layer)  # a layer the model lacks is an error naming it
        self.layer = layer % len(decoder_layers(self.model))
        trainable = trainable_layers if trainable_layers is not None else [self.layer - 2, self.layer - 1, self.layer]
        self.model.requires_grad_(False)
        for index in trainable:
            if index < 0 and trainable_layers is None:
                continue  # a low layer l has fewer than two blocks below it
            mlp_down_projection(decoder_layer(self.model, index)).requires_grad_(True)
        hidden_size = self.model.config.hidden_size
        direction = torch.rand(hidden_size, generator=torch.Generator().manual_seed(control_seed))
        self.register_buffer("control_vector", steering_coeff * direction / direction.norm())
        self.use_reference()

    def activations(self, network: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        """Block ``layer``'s output [B, T, D] for ``batch`` under ``network``."""
        with hooks.capture({"h": decoder_layer(network, self.layer)}) as captured:
            network(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return captured["h"]

    def losses(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        forget, retain = batch["forget"], batch["retain"]
        with hooks.capture({"h": decoder_layer(self.reference.network, self.layer)}) as frozen:
            self.reference(input_ids=retain["input_ids"], attention_mask=retain["attention_mask"])
        forget_term, retain_term = rmu_loss(
            self.activations(self.model, forget),
            forget["labels"] != IGNORE_INDEX,
            self.activations(self.model, retain),
            frozen["h"],
            retain["labels"] != IGNORE_INDEX,
            self.control_vector,
            self.hparams.retain_weight,
        )
        loss = forget_term + retain_term
        return {"loss": loss, "forget_mse": forget_term.detach(), "retain_mse": retain_term.detach()}
