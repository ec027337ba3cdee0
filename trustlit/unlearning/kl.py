"""KL minimisation (TOFU's ``KL`` baseline, Maini et al., arXiv 2401.06121): gradient ascent on the
forget set while keeping the retain-set predictions close to the model before unlearning.

L = -NLL_forget + KL(pi_ref || pi_theta), the KL of the next-token distributions averaged over
the retain answer tokens. It is :class:`~trustlit.unlearning.GradDiff` with ``retain_loss="kl"``
and unit weights.

Notes: docs/methods/kl_minimization.md
"""

from __future__ import annotations

from typing import Any

from trustlit.hparams import NonNegativeFloat
from trustlit.llm.loading import CausalLMSpec
from trustlit.unlearning.grad_diff import GradDiff


class KLMinimization(GradDiff):
    """L = -NLL_forget + KL(pi_ref || pi_theta) on retain tokens (see the module docstring)."""

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        forget_weight: NonNegativeFloat = 1.0,
        retain_weight: NonNegativeFloat = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(lm, forget_weight=forget_weight, retain_weight=retain_weight, retain_loss="kl", **kwargs)
