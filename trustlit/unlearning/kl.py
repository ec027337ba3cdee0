"""KL minimisation (TOFU's ``KL`` baseline, Maini et al., arXiv 2401.06121): gradient ascent on the
forget set while keeping the retain-set predictions close to the model before unlearning.

L = -NLL_forget + KL(pi_ref || pi_theta), the KL of the next-token distributions on the retain
batch, averaged over its answer tokens (``kl_reduction="answer_tokens"``, the default) or over all
B*T positions of the padded batch, question and padding included (``"all_positions"``: TOFU's
``KL`` loss and open-unlearning's ``compute_kl_divergence``, ``F.kl_div(..., reduction="batchmean")``
on the flattened [B*T, V] log-probabilities). It is :class:`~trustlit.unlearning.GradDiff` with
``retain_loss="kl"`` and unit weights.

Notes: docs/methods/kl_minimization.md
"""

from __future__ import annotations

from typing import Any

from trustlit.hparams import NonNegativeFloat
from trustlit.llm.loading import CausalLMSpec
from trustlit.unlearning.grad_diff import GradDiff
from trustlit.unlearning.losses import KLReduction


class KLMinimization(GradDiff):
    """L = -NLL_forget + KL(pi_ref || pi_theta) on the retain batch (see the module docstring).

    Args:
        kl_reduction: ``answer_tokens`` or ``all_positions`` (TOFU's and open-unlearning's).
        Other arguments: see :class:`~trustlit.unlearning.GradDiff`.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        forget_weight: NonNegativeFloat = 1.0,
        retain_weight: NonNegativeFloat = 1.0,
        kl_reduction: KLReduction = "answer_tokens",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            lm,
            forget_weight=forget_weight,
            retain_weight=retain_weight,
            retain_loss="kl",
            kl_reduction=kl_reduction,
            **kwargs,
        )
