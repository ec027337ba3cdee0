"""DP-SGD for any LightningModule, through Opacus: the :class:`DPSGD` callback (a facade) and its parts.

- :mod:`~trustlit.privacy.dpsgd.callback`: the facade, wiring the parts to Lightning's hooks;
- :mod:`~trustlit.privacy.dpsgd.sampling`: Poisson sampling (the replacement training loader);
- :mod:`~trustlit.privacy.dpsgd.optimizer`: clipping, noise, accounting hook, regulariser gradient;
- :mod:`~trustlit.privacy.dpsgd.step`: the manual step (ghost clipping, physical batches);
- :mod:`~trustlit.privacy.dpsgd.accounting`: epsilon spent, noise calibration, resumed budgets;
- :mod:`~trustlit.privacy.dpsgd.checks`: the refused layers and trainer settings.

Notes: docs/methods/dpsgd.md
"""

from trustlit.privacy.dpsgd.callback import DPSGD

__all__ = ["DPSGD"]
