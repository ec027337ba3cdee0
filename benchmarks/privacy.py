"""Privacy benchmarks: accuracy vs epsilon, DP-SGD overhead, a canary-based privacy audit, private distribution
estimation and private vaccination.

    .venv/bin/python benchmarks/privacy.py [--sections accuracy,audit,distribution,...] [--quick] [--output PATH]
    .venv/bin/python -m benchmarks.privacy ...    (the same)

Each section is one function of :data:`SECTIONS` that returns its markdown. The report
(``docs/benchmarks/privacy.md`` by default) holds one delimited block per section: the sections
that ran are rewritten, the others are kept as they were, so every section can be regenerated
alone (``--sections audit``). Every block records its own command, date, machine and versions.

- ``accuracy``: test accuracy vs epsilon of PMSVM (WP, GP, AGP) and the DP one-vs-rest SVM
  baselines on digits, wine and a 20-class Gaussian mixture (``benchmarks/privacy_accuracy.py``).
- ``overhead``: step time of the same model, data and batch with the :class:`~trustlit.privacy.DPSGD`
  callback (``grad_sample_mode`` hooks, functorch, ghost) and without it, for an MLP and a tiny
  transformer on digits. Target: ghost clipping <= 1.5x the step time without DP.
- ``audit``: a black-box, canary-based empirical lower bound on epsilon (Jagielski et al., NeurIPS
  2020; Nasr et al., IEEE S&P 2021). It must stay below the claimed epsilon for DP-SGD and PMSVM-WP
  and exceed it for a deliberately broken mechanism (noise off), which shows that the audit can fail.
  The audit itself (threshold test, Clopper–Pearson bounds, held-out evaluation) is
  :func:`trustlit.audit.run_canary_audit`; this script holds the set-ups (models, data, canaries)
  and the report. Another mechanism joins the audit through :class:`AuditCase` (a
  ``train_and_score(include_canary, seed) -> float`` callable and its claimed epsilon), listed in
  :func:`audit_cases`.
- ``distribution``: E[KL(p || q)] of the private Good-Turing estimator against the DP minimax and DP
  add-constant baselines over n, d, epsilon on power laws, uniform and two token distributions, and the
  canary audit of each private estimator (``benchmarks/privacy_distribution.py``).
- ``vaccination``: DP vaccination on contact networks (PrivateMaxDeg implicit / explicit, the
  spectral-radius variant, non-private greedy): budget used, degree or spectral radius reached, SIR
  outbreak size, run time (``benchmarks/privacy_vaccination.py``).
- ``pmsvm_lambda``: PMSVM's lambda regime: the threshold lambda* above which every margin is violated,
  ||W|| lambda and the weight-perturbation accuracy per lambda (why the lambda search is moot above lambda*).

Adding a section: a function ``(args) -> str`` returning its markdown (a ``## `` title first; the
provenance lines are added under it), one entry in :data:`SECTIONS`, and its options in
:func:`parse_args` if it needs any.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

if not __package__:  # run as benchmarks/privacy.py: import this repository's benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lightning as L
import numpy as np
import opacus
import scipy
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.common import (
    StepTimer,
    bare_trainer,
    provenance,
    quiet,
    read_sections,
    render_report,
    with_provenance,
)
from benchmarks.privacy_accuracy import accuracy_section, regime_section
from benchmarks.privacy_distribution import add_distribution_arguments, distribution_section
from benchmarks.privacy_vaccination import add_vaccination_arguments, vaccination_section
from trustlit.audit import CanaryAudit, run_canary_audit
from trustlit.classifiers import MLPClassifier
from trustlit.data.tabular import TabularDataModule, bound_row_norms
from trustlit.privacy import DPSGD, PerSampleLossModule
from trustlit.privacy.dpsgd.accounting import calibrate_noise, history_epsilon
from trustlit.privacy.mechanisms import add_gaussian_noise, analytic_gaussian_sigma, gaussian_mechanism_epsilon
from trustlit.privacy.svm import crammer_singer_sensitivity, fit_crammer_singer

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = "docs/benchmarks/privacy.md"
SCRIPT = "benchmarks/privacy.py"


# -- common ----------------------------------------------------------------------------------


def section_provenance(args: argparse.Namespace) -> str:
    versions = f"opacus {opacus.__version__}, scipy {scipy.__version__}"
    return provenance(args.command, args.quick, getattr(args, "load_before", None), versions)


def ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f}"


# -- section "overhead": DP-SGD step time ----------------------------------------------------

OVERHEAD_TARGET = 1.5  # ghost clipping step time / step time without DP
OVERHEAD_BATCH = 64
OVERHEAD_MODES: tuple[str, ...] = ("hooks", "functorch", "ghost")


class TinyTransformerClassifier(PerSampleLossModule):
    """A one-block pre-norm transformer over the 8 rows of an 8x8 digit (8 tokens of 8 pixels).

    Built from layers Opacus computes per-sample gradients for (``nn.Linear``, ``nn.Embedding``
    for the positions, ``nn.LayerNorm``); attention is written with ``nn.Linear`` projections and
    ``F.scaled_dot_product_attention`` (no parameters), since Opacus supports ``nn.MultiheadAttention``
    only through its own ``DPMultiheadAttention``. Mean-pooled tokens feed a linear head.
    """

    def __init__(
        self,
        tokens: int = 8,
        token_features: int = 8,
        d_model: int = 64,
        num_heads: int = 4,
        d_ff: int = 128,
        num_classes: int = 10,
        lr: float = 0.05,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Linear(token_features, d_model)
        self.position = nn.Embedding(tokens, d_model)
        self.norm_attention = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm_ff = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.norm_head = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)
        self.register_buffer("positions", torch.arange(tokens), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hp = self.hparams
        batch, head_dim = x.shape[0], hp.d_model // hp.num_heads
        h = self.embed(x.view(batch, hp.tokens, hp.token_features)) + self.position(
            self.positions.expand(batch, -1).contiguous()
        )
        q, k, v = self.qkv(self.norm_attention(h)).view(batch, hp.tokens, 3, hp.num_heads, head_dim).unbind(2)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        h = h + self.out(attended.transpose(1, 2).reshape(batch, hp.tokens, hp.d_model))
        h = h + self.ff(self.norm_ff(h))
        return self.head(self.norm_head(h).mean(dim=1))

    def per_sample_losses(self, batch: Any) -> torch.Tensor:
        x, y = batch[0], batch[1]
        return F.cross_entropy(self(x), y, reduction="none")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


@dataclass(frozen=True)
class OverheadModel:
    name: str
    build: Callable[[], PerSampleLossModule]
    description: str
    in_target: bool = True  # the target names the MLP and the tiny transformer; others are references


OVERHEAD_MODELS = (
    OverheadModel(
        "MLP", lambda: MLPClassifier(hidden_sizes=[64]), "`MLPClassifier(hidden_sizes=[64])` (64-64-10, ReLU)"
    ),
    OverheadModel(
        "tiny transformer",
        TinyTransformerClassifier,
        "`TinyTransformerClassifier` (defined in the script): 8 tokens of 8 pixels, d_model 64, 4 heads, "
        "feed-forward 128, one pre-norm block, mean-pool, linear head",
    ),
    OverheadModel(
        "wide MLP",
        lambda: MLPClassifier(hidden_sizes=[512, 512]),
        "`MLPClassifier(hidden_sizes=[512, 512])`, a reference outside the target: large layers, where per-sample "
        "gradients (batch x parameters) are expensive",
        in_target=False,
    ),
)


@dataclass
class Timings:
    """Timed steps of one (model, variant): per round, and the steps that cross an epoch boundary."""

    rounds: list[list[float]] = field(default_factory=list)
    epoch_ends: list[float] = field(default_factory=list)

    @property
    def all(self) -> list[float]:
        return [t for times in self.rounds for t in times]

    @property
    def median(self) -> float:
        return statistics.median(self.all)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.all)


def time_steps(model: OverheadModel, mode: str | None, warmup: int, steps: int, into: Timings) -> None:
    """Time ``steps`` steps after ``warmup`` of a fresh run (mode None: no DP) into ``into``."""
    torch.manual_seed(0)  # the same initial weights for every variant
    module = model.build()
    data = TabularDataModule("digits", batch_size=OVERHEAD_BATCH)
    timer = StepTimer()  # a step is start to start: data loading and the batch-end hooks included
    callbacks: list[L.Callback] = [timer]
    if mode is not None:
        callbacks.append(DPSGD(noise_multiplier=1.0, max_grad_norm=1.0, grad_sample_mode=mode, poisson_sampling=False))
    budget = {"max_steps": warmup + steps + 1, "max_epochs": -1}  # one more start closes the last step
    bare_trainer(callbacks, **budget).fit(module, datamodule=data)
    times = timer.intervals(warmup, steps, label=f"{model.name}/{mode}")
    into.rounds.append(times)
    # a step whose next step is batch 0 spans the end of an epoch (epoch-end hooks, a new loader iterator)
    into.epoch_ends += [t for t, after in zip(times, timer.batch_indices[warmup + 1 :], strict=True) if after == 0]


def prv_epsilon_seconds(sample_rate: float, steps: int) -> float:
    """Seconds one ``DPSGD(accountant="prv").epsilon`` takes (it is logged at every epoch end)."""
    began = time.perf_counter()
    history_epsilon("prv", [(1.0, sample_rate, steps)], 1e-5)
    return time.perf_counter() - began


def overhead_section(args: argparse.Namespace) -> str:
    variants: list[str | None] = [None, *OVERHEAD_MODES]
    timings = {(m.name, v): Timings() for m in OVERHEAD_MODELS for v in variants}
    for round_ in range(args.rounds):
        order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]  # rotate the order
        for model in OVERHEAD_MODELS:
            for variant in order:
                gc.collect()
                print(f"overhead: round {round_ + 1}/{args.rounds}, {model.name}, {variant or 'no DP'}", flush=True)
                time_steps(model, variant, args.warmup, args.steps, timings[(model.name, variant)])

    rows, verdicts = [], []
    for model in OVERHEAD_MODELS:
        base = timings[(model.name, None)]
        for variant in variants:
            t = timings[(model.name, variant)]
            per_round = [
                statistics.median(r) / statistics.median(b) for r, b in zip(t.rounds, base.rounds, strict=True)
            ]
            ratio = f"{t.median / base.median:.2f}"
            rows.append(
                [
                    model.name,
                    variant or "no DP",
                    ms(t.median),
                    f"**{ratio}**" if variant == "ghost" else ratio,
                    f"{statistics.median(per_round):.2f} ({min(per_round):.2f}–{max(per_round):.2f})"
                    if variant
                    else "—",
                    ms(t.mean),
                    f"{t.mean / base.mean:.2f}",
                    ms(statistics.median(t.epoch_ends)) if t.epoch_ends else "—",
                ]
            )
        ghost = timings[(model.name, "ghost")].median / base.median
        met = ghost <= OVERHEAD_TARGET
        verdicts.append(
            f"- {model.name}{'' if model.in_target else ' (reference, not part of the target)'}: ghost / no DP = "
            f"{ghost:.2f} — **target {'met' if met else 'not met'}** ({'<=' if met else '>'} {OVERHEAD_TARGET})"
        )

    params = {m.name: sum(p.numel() for p in m.build().parameters()) for m in OVERHEAD_MODELS}
    data = TabularDataModule("digits", batch_size=OVERHEAD_BATCH)
    data.setup()
    rows_train = len(data.splits["train"])
    batches = -(-rows_train // OVERHEAD_BATCH)
    epsilon_seconds = prv_epsilon_seconds(1 / batches, batches * 5)
    step_table = table(
        [
            "model",
            "mode",
            "median step",
            "median / no DP",
            "per-round ratio: median (min–max)",
            "mean step",
            "mean / no DP",
            "epoch-end step (median)",
        ],
        ["l", "l", "r", "r", "r", "r", "r", "r"],
        rows,
    )
    nl = "\n"
    return f"""## DP-SGD overhead: step time with and without the `DPSGD` callback

Same model (same initial weights), data and batches with the `DPSGD` callback and without it.

- Data: `TabularDataModule("digits")` (train split: {rows_train} rows, 64 standardized pixels, 10 classes),
  batch size {OVERHEAD_BATCH}: an epoch is {batches} batches, the last of {rows_train - (batches - 1) * OVERHEAD_BATCH}.
- Models: {"; ".join(f"**{m.name}**: {m.description} ({params[m.name]:,} parameters)" for m in OVERHEAD_MODELS)}.
  All are `PerSampleLossModule`s (ghost clipping needs one), trained with SGD.
- DP: `DPSGD(noise_multiplier=1.0, max_grad_norm=1.0, grad_sample_mode=MODE, poisson_sampling=False)`:
  fixed-size batches, so the baseline and every mode process exactly the same batches; default (PRV) accountant.
- Step time: the difference between consecutive `on_train_batch_start` timestamps (data loading, forward,
  backward, per-sample gradients or norms, clipping, noise, the optimizer step, Lightning's hooks). Every run
  trains a fresh model for {args.warmup + args.steps + 1} steps, drops the first {args.warmup} and times the
  next {args.steps}. {args.rounds} round(s); in every round each model runs its four variants one after the other
  (the order rotates between rounds). Medians and means pool all rounds ({args.rounds * args.steps} steps per
  variant). The median leaves out the epoch boundaries and the short last batch; the mean includes them.
- `torch.set_num_threads({args.threads})`: one intra-op thread keeps the compute time repeatable on a shared
  2-core machine, so that the differences are the variants', not the scheduler's.

### Step time (ms)

{step_table}

Target: ghost clipping <= {OVERHEAD_TARGET}x the median step without DP, for the MLP and the tiny transformer.

{nl.join(verdicts)}

### Interpretation

{overhead_interpretation(timings, params, epsilon_seconds, batches)}
"""


def overhead_interpretation(
    timings: dict[tuple[str, str | None], Timings], params: dict[str, int], epsilon_seconds: float, batches: int
) -> str:
    ratios = {
        m.name: {mode: timings[(m.name, mode)].median / timings[(m.name, None)].median for mode in OVERHEAD_MODES}
        for m in OVERHEAD_MODELS
    }
    text = [
        "; ".join(
            f"{m.name} ({params[m.name]:,} parameters, {ms(timings[(m.name, None)].median)} ms per step without DP): "
            f"hooks {r['hooks']:.2f}x, functorch {r['functorch']:.2f}x, ghost {r['ghost']:.2f}x"
            for m, r in zip(OVERHEAD_MODELS, ratios.values(), strict=True)
        )
        + "."
    ]
    wide = [m for m in OVERHEAD_MODELS if not m.in_target]
    text.append(
        "Ghost clipping never materialises per-sample gradients (batch x parameters): a first backward pass "
        "computes per-sample gradient norms from each layer's activations and output gradients, a second one "
        "backpropagates the loss reweighted by the clipping coefficients. Hooks and functorch instead build every "
        "per-sample gradient, then clip and sum them. "
        + (
            f"That is why ghost clipping wins by far on the {wide[0].name} ({ratios[wide[0].name]['ghost']:.2f}x "
            f"against {ratios[wide[0].name]['hooks']:.2f}x for hooks): its per-sample gradients are "
            f"{OVERHEAD_BATCH} x {params[wide[0].name]:,} floats per step. "
            if wide
            else ""
        )
        + "On the MLP and the tiny transformer the layers are small, per-sample gradients are cheap, and the "
        "ratios mostly reflect fixed per-step costs: Opacus's hooks and optimizer wrapper, noise generation, the "
        "accountant's step hook and, for ghost clipping, Lightning's manual-optimisation path."
    )
    text.append(
        f"The {OVERHEAD_TARGET}x target is out of reach for ghost clipping as implemented (by Opacus, which `DPSGD` "
        "uses): two backward passes per step cost about (forward + 2 x backward) / (forward + backward) ~ 5/3 of "
        "the compute of a plain step when backward ~ 2 x forward, before any bookkeeping. Only fixed costs shared "
        "by both sides (data loading, Lightning's loop) pull the ratio below that. Reaching 1.5x would need a "
        "single-backward method (book-keeping ghost clipping, Bu et al. 2023) or a model whose step is dominated "
        "by something other than the backward pass."
    )
    first = OVERHEAD_MODELS[0]
    epoch = batches * timings[(first.name, "ghost")].median
    text.append(
        f"Epoch ends: `DPSGD` logs `dp/epsilon` at every epoch end, and one PRV epsilon computation takes "
        f"{1000 * epsilon_seconds:.0f} ms here (measured for {batches * 5} steps at q = 1/{batches}), as long as "
        f"{epsilon_seconds / epoch:.1f} epochs of the {first.name} with ghost clipping ({batches} steps, "
        f"{1000 * epoch:.0f} ms): hence the epoch-end column and the gap between the mean and median ratios. It "
        "does not enter the medians, but it does enter wall-clock training time."
    )
    return "\n\n".join(text)


# -- section "audit": canary-based lower bound on epsilon -------------------------------------

AUDIT_DELTA = 1e-5
AUDIT_CONFIDENCE = 0.95


@dataclass
class AuditCase:
    """A mechanism to audit: train once with or without the canary, return the canary's score.

    ``train_and_score(include_canary, seed)`` trains one model (seeded by ``seed``) on the audit's
    data, with the canary when ``include_canary``, and returns a score that is higher when the
    canary is a member (e.g. minus the canary's loss). ``expect`` is ``"below"`` for a mechanism
    that claims (``claimed_epsilon``, ``delta``)-DP (the audit's bound must stay below the claim)
    and ``"above"`` for a deliberately broken one (the bound must exceed the claim). ``details``
    (optional) is read after the runs, for the table (e.g. the models' test accuracy). ``best_shift``
    (optional): the largest separation, in standard deviations, that any test on the output can reach,
    where the analysis gives it (mu of a Gaussian-DP mechanism), to compare with the score's.
    """

    name: str
    claimed_epsilon: float
    delta: float
    train_and_score: Callable[[bool, int], float]
    expect: Literal["below", "above"]
    details: Callable[[], str] | None = None
    best_shift: float | None = None


@dataclass
class AuditResult:
    """One audited mechanism: its case, the audit's scores and bounds (:class:`~trustlit.audit.CanaryAudit`)."""

    case: AuditCase
    audit: CanaryAudit
    details: str = ""

    @property
    def passed(self) -> bool:
        below = self.audit.epsilon_lb < self.case.claimed_epsilon
        return below if self.case.expect == "below" else not below


def run_audit(case: AuditCase, runs: int, alpha: float = 1 - AUDIT_CONFIDENCE) -> AuditResult:
    """The canary audit of ``case`` over ``runs`` trainings per side (:func:`~trustlit.audit.run_canary_audit`)."""

    def progress(done: int) -> None:
        if done % max(1, runs // 4) == 0:
            print(f"audit: {case.name}: {done}/{runs} runs per side", flush=True)

    audit = run_canary_audit(case.train_and_score, runs, case.delta, alpha, on_progress=progress)
    return AuditResult(case, audit, case.details() if case.details else "")


class BatchedTensorDataset(TensorDataset):
    """A TensorDataset that fetches a whole batch by indexing (``Dataset.__getitems__``).

    With :func:`batched_collate` the full-batch loader costs one indexing per step instead of
    fetching and collating ~1,400 rows one by one, which would dominate the short audit runs.
    """

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return tuple(t[index] for t in self.tensors)


def batched_collate(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return batch


class FullBatchData(L.LightningDataModule):
    """One batch per epoch holding the whole dataset: sample rate q = 1."""

    def __init__(self, dataset: TensorDataset) -> None:
        super().__init__()
        self.dataset = dataset

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=len(self.dataset), collate_fn=batched_collate)


@dataclass
class AuditSetup:
    """The audit's data, canary and DP-SGD hyperparameters (shared by the DP-SGD cases)."""

    steps: int
    lr: float = 2.0
    max_grad_norm: float = 1.0
    canary_label: int = 0

    def __post_init__(self) -> None:
        data = TabularDataModule("digits", val_fraction=0.0, test_fraction=0.2)
        data.setup()
        x, y, _ = data.splits["train"].tensors
        self.x_test, self.y_test, _ = data.splits["test"].tensors
        # ClipBKD-style canary (Jagielski et al. 2020): the direction of least variance of the training
        # inputs (here a direction the training data do not span at all: pixels that are 0 in every
        # training image), at the median norm of a training row, with a fixed label. No training example's
        # gradient moves the weights along it, so only the canary's clipped gradient and the noise do.
        _, vectors = torch.linalg.eigh(x.T.double() @ x.double())
        direction = vectors[:, 0].float()
        self.canary_x = direction * x.norm(dim=1).median()
        self.canary_y = torch.tensor([self.canary_label])
        self.span_residual = float((x @ direction).abs().max())  # 0 if no training row has a component along it
        self.n = len(y)
        self.without = BatchedTensorDataset(x, y, torch.arange(len(y)))
        self.with_canary = BatchedTensorDataset(
            torch.cat([x, self.canary_x[None]]), torch.cat([y, self.canary_y]), torch.arange(len(y) + 1)
        )


@dataclass
class DPSGDCanaryRun:
    """``train_and_score`` for DP-SGD: logistic regression on digits, full batch, fixed initial weights.

    The initial weights are the same in every run (a public, data-independent choice the DP
    guarantee covers for every value): the only randomness is the mechanism's own (the noise),
    which gives the audit its best chance. Score: minus the canary's cross-entropy loss.
    """

    setup: AuditSetup
    noise_multiplier: float
    accuracies: list[float] = field(default_factory=list)

    def __call__(self, include_canary: bool, seed: int) -> float:
        s = self.setup
        torch.manual_seed(0)
        module = MLPClassifier(hidden_sizes=[], lr=s.lr)  # multinomial logistic regression
        torch.manual_seed(seed)  # the noise of this run
        # RDP for the logged epsilon only (cheaper per epoch); the claimed epsilon is PRV's, see audit_cases
        callback = DPSGD(noise_multiplier=self.noise_multiplier, max_grad_norm=s.max_grad_norm, accountant="rdp")
        bare_trainer([callback], max_steps=s.steps, max_epochs=-1).fit(
            module, datamodule=FullBatchData(s.with_canary if include_canary else s.without)
        )
        with torch.no_grad():
            loss = F.cross_entropy(module(s.canary_x[None]), s.canary_y)
            if not include_canary:
                self.accuracies.append(float((module(s.x_test).argmax(dim=1) == s.y_test).float().mean()))
        return -float(loss)

    def details(self) -> str:
        return f"{statistics.fmean(self.accuracies):.3f}"


@dataclass
class WeightPerturbationCanaryRun:
    """``train_and_score`` for PMSVM-WP on the digits rows of :class:`AuditSetup`, normalised to ||x|| = 1.

    The released model is W(D) + N(0, σ² I) with W(D) the exact Crammer–Singer solution
    (:func:`~trustlit.privacy.svm.fit_crammer_singer`, as :func:`~trustlit.privacy.svm.release_crammer_singer`
    computes it): W(D) does not depend on the run, so it is solved once per side and each run draws only the
    noise, which is the same distribution at a fraction of the cost. Score: the projection of the released
    weights on W(D) − W(D'), the most powerful test between the two Gaussians (white-box, as an auditor who
    knows both datasets may use).
    """

    setup: AuditSetup
    epsilon: float
    lam: float = 0.01

    def __post_init__(self) -> None:
        s = self.setup
        x_out = bound_row_norms(s.without.tensors[0].double().numpy(), "normalize")
        x_in = np.concatenate([x_out, bound_row_norms(s.canary_x[None].double().numpy(), "normalize")])
        y_out = s.without.tensors[1].numpy()
        y_in = np.concatenate([y_out, s.canary_y.numpy()])
        self.weights = {
            True: fit_crammer_singer(x_in, y_in, 10, self.lam),
            False: fit_crammer_singer(x_out, y_out, 10, self.lam),
        }
        # each side calibrated as release_crammer_singer does: Δ = 2√2/(nλ) with its own n
        self.sensitivity = {
            side: crammer_singer_sensitivity(len(y_in) if side else len(y_out), self.lam) for side in (True, False)
        }
        self.sigma = {
            side: analytic_gaussian_sigma(self.epsilon, AUDIT_DELTA, d) for side, d in self.sensitivity.items()
        }
        self.direction = self.weights[True] - self.weights[False]
        self.shift = float(np.linalg.norm(self.direction)) / self.sigma[False]

    def __call__(self, include_canary: bool, seed: int) -> float:
        noise = np.random.default_rng(seed)
        released = add_gaussian_noise(self.weights[include_canary], self.sigma[include_canary], noise)
        return float(np.sum(released * self.direction))

    def details(self) -> str:
        return f"‖ΔW‖/Δ = {float(np.linalg.norm(self.direction)) / self.sensitivity[False]:.2f}"


def audit_cases(args: argparse.Namespace) -> tuple[list[AuditCase], list[str]]:
    """The audited mechanisms and the report's description of their set-up (one item per mechanism family).

    Another mechanism (e.g. PMSVM-WP from trustlit/privacy/pmsvm.py) joins by appending its
    :class:`AuditCase` (its own ``train_and_score``, data and canary) and a description.
    """
    setup = AuditSetup(steps=args.audit_steps)
    cases, notes = [], []
    claims: dict[float, float] = {}
    for target in args.audit_epsilons:
        with np.errstate(divide="ignore"):  # q = 1: Opacus's PRV evaluates log(1 - q) in a branch it then discards
            sigma = calibrate_noise(target, AUDIT_DELTA, 1.0, setup.steps, "prv")
        claims[target] = history_epsilon("prv", [(sigma, 1.0, setup.steps)], AUDIT_DELTA)
        run = DPSGDCanaryRun(setup, sigma)
        mu = math.sqrt(setup.steps) / sigma
        name = f"DP-SGD, σ = {sigma:.2f}"
        cases.append(AuditCase(name, claims[target], AUDIT_DELTA, run, "below", run.details, best_shift=mu))
        notes.append(
            f"σ = {sigma:.3f} for target ε = {target:g}: PRV reports ε = {claims[target]:.3f}, the exact ε of this "
            f"Gaussian mechanism (q = 1, μ = sqrt(T)/σ = {math.sqrt(setup.steps) / sigma:.3f}) is "
            f"{gaussian_mechanism_epsilon(AUDIT_DELTA, sigma / math.sqrt(setup.steps), 1.0):.3f}"
        )
    broken = DPSGDCanaryRun(setup, 0.0)
    claim = claims[args.audit_epsilons[0]]
    cases.append(AuditCase("broken: DP-SGD, σ = 0 (noise off)", claim, AUDIT_DELTA, broken, "above", broken.details))
    wp = WeightPerturbationCanaryRun(setup, args.audit_epsilons[0])
    cases.append(AuditCase(f"PMSVM-WP, λ = {wp.lam}", wp.epsilon, AUDIT_DELTA, wp, "below", wp.details, wp.shift))
    wp_setup = (
        f"PMSVM-WP: the exact Crammer–Singer SVM (λ = {wp.lam}) on the same digits train split with every row "
        "(the canary's too) normalised to ||x|| = 1, released with N(0, σ² I), σ the analytic Gaussian σ for "
        f"(ε = {wp.epsilon:g}, δ = {AUDIT_DELTA:g}) and Δ = 2√2/(nλ) (σ = {wp.sigma[False]:.4f}). The exact solution "
        "is computed once per side and each run draws only the noise (the same output distribution). Score: "
        "the released weights projected on W(D) − W(D'), the most powerful test between the two output "
        f"distributions (white-box); their separation is {wp.shift:.2f} standard deviations."
    )
    dpsgd_setup = (
        "DP-SGD: logistic regression (`MLPClassifier(hidden_sizes=[])`, 650 parameters, the same initial weights "
        "in every run) trained by the `DPSGD` callback under a plain Lightning Trainer (no logger, checkpoints or "
        f"progress bar) for T = {setup.steps} full-batch steps (Poisson sampling at q = 1: every example is in every "
        f"step), SGD lr {setup.lr}, max_grad_norm C = {setup.max_grad_norm}, on the digits train split ({setup.n} "
        "rows, 64 standardized pixels, 10 classes). Canary: the training inputs' direction of least variance "
        f"(largest |projection| of a training row on it: {setup.span_residual:.1e}, i.e. outside their span), "
        f"scaled to the median row norm ({float(setup.canary_x.norm()):.2f}), label {setup.canary_label}; score: "
        "minus the canary's cross-entropy loss under the trained model (black box). Noise: "
        + "; ".join(notes)
        + ". The broken mechanism is the same pipeline with `noise_multiplier=0`; its claimed ε is the first "
        f"DP-SGD row's ({claim:.3f}). As in Opacus, the summed clipped gradient is divided by the expected batch "
        f"size q·|D| ({setup.n} without the canary, {setup.n + 1} with it): the accounting treats |D| as public; "
        "the 0.07 % difference in the update's scale is far below the noise."
    )
    return cases, [dpsgd_setup, wp_setup]


def table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    """A markdown table; ``align`` holds ``l`` or ``r`` per column."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def audit_section(args: argparse.Namespace) -> str:
    cases, setups = audit_cases(args)
    results = [run_audit(case, args.audit_runs) for case in cases]
    main_rows, detail_rows, verdicts = [], [], []
    for r in results:
        e_in, e_out = r.audit.evaluation
        wanted = "below" if r.case.expect == "below" else "above"
        main_rows.append(
            [
                r.case.name,
                f"{r.case.claimed_epsilon:.3f}",
                f"**{r.audit.epsilon_lb:.3f}**",
                f"{r.audit.ceiling:.3f}",
                f"{wanted} the claim",
                "met" if r.passed else "**not met**",
            ]
        )
        detail_rows.append(
            [
                r.case.name,
                r.audit.test.describe(),
                f"{r.audit.test.hits(e_in)}/{len(e_in)}",
                f"{r.audit.test.hits(e_out)}/{len(e_out)}",
                f"{r.audit.epsilon_lb_optimistic:.3f}",
                f"{r.audit.scores_in.mean():.4f} ± {r.audit.scores_in.std():.4f}",
                f"{r.audit.scores_out.mean():.4f} ± {r.audit.scores_out.std():.4f}",
                shift(r),
                f"{r.case.best_shift:.2f}" if r.case.best_shift is not None else "—",
                r.details or "—",
                f"{r.audit.seconds:.0f}",
            ]
        )
        relation = "<" if r.audit.epsilon_lb < r.case.claimed_epsilon else ">="
        verdicts.append(
            f"- {r.case.name}: ε_lb = {r.audit.epsilon_lb:.3f} {relation} claimed {r.case.claimed_epsilon:.3f}, "
            f"must be {wanted}: **target {'met' if r.passed else 'not met'}**"
        )
    results_table = table(
        ["mechanism", "claimed ε", f"ε_lb ({AUDIT_CONFIDENCE:.0%})", "ceiling", "ε_lb must be", "target"],
        ["l", "r", "r", "r", "l", "l"],
        main_rows,
    )
    details_table = table(
        [
            "mechanism",
            "test (chosen on the selection half)",
            "hits with canary (eval)",
            "hits without (eval)",
            "best on all runs",
            "score with canary (mean ± sd)",
            "score without",
            "shift / sd",
            "μ",
            "test acc.",
            "seconds",
        ],
        ["l", "l", "r", "r", "r", "r", "r", "r", "r", "r", "r"],
        detail_rows,
    )
    half = args.audit_runs // 2
    one_sided = 1 - (1 - AUDIT_CONFIDENCE) / 2
    return f"""## Privacy audit: empirical lower bound on epsilon from a canary

A black-box membership test on one canary example (Jagielski et al., "Auditing Differentially Private
Machine Learning: How Private is Private SGD?", NeurIPS 2020; Nasr et al., "Adversary Instantiation:
Lower Bounds for Differentially Private Machine Learning", IEEE S&P 2021). A mechanism that is
(ε, δ)-DP satisfies, for every test E on its output and neighbouring datasets D (with the canary) and
D' (without), P_D(E) <= e^ε P_D'(E) + δ and P_D'(E) <= e^ε P_D(E) + δ. Training {args.audit_runs} models on D
and {args.audit_runs} on D' estimates both probabilities, and

    ε_lb = log((TPR_lb - δ) / FPR_ub)   or, for the reverse pair,   log((1 - FPR_lb - δ) / (1 - TPR_ub))

is a lower bound on the true ε at {AUDIT_CONFIDENCE:.0%} confidence (δ = {AUDIT_DELTA:g}).

{nl_join(f"- Setup, {text}" for text in setups)}
- Test selection (held out): the threshold, its direction (score >= t or < t) and which of the two
  inequalities to use are chosen on the first half of the runs of each side ({half} + {half}), as the choice
  with the largest bound there; ε_lb is that single test evaluated on the other half. The two rates get
  one-sided Clopper–Pearson bounds at {one_sided:.1%} each (`scipy.stats.beta`), so ε_lb is a valid bound
  with probability >= {AUDIT_CONFIDENCE:.0%}.
- "ceiling": the largest ε_lb the evaluation half can give (perfect separation): no audit of this size can
  show more, so it cannot refute a claim above it.

### Results

{results_table}

{nl_join(verdicts)}

### Details

{details_table}

"hits": runs of the evaluation half in which the test's event occurred. "best on all runs": the test is chosen
on all runs and bounded on the same runs: optimistic (fitted to the data it is evaluated on), for reference
only, not a valid bound. Score: minus the canary's loss. "shift / sd": (mean with - mean without) / pooled
standard deviation of the score; "μ": the largest such shift any test on the trained model can have (DP-SGD
at q = 1 is a Gaussian mechanism with μ = sqrt(T)/σ). Test accuracy: mean over the runs without the canary
(digits test split, 360 rows). "seconds": wall time of the {2 * args.audit_runs} trainings of the row.

### Interpretation

{audit_interpretation(results)}
"""


def shift_value(result: AuditResult) -> float:
    """The score's separation between the two sides, in pooled standard deviations."""
    sd = math.sqrt((result.audit.scores_in.var() + result.audit.scores_out.var()) / 2)
    difference = float(result.audit.scores_in.mean() - result.audit.scores_out.mean())
    if sd > 0:
        return difference / sd
    return math.copysign(math.inf, difference) if difference else 0.0


def shift(result: AuditResult) -> str:
    value = shift_value(result)
    return f"{value:.2f}" if math.isfinite(value) else ("∞" if value > 0 else "-∞")


def nl_join(lines: Iterable[str]) -> str:
    return "\n".join(lines)


def audit_interpretation(results: list[AuditResult]) -> str:
    dp = [r for r in results if r.case.expect == "below"]
    broken = [r for r in results if r.case.expect == "above"]
    text = []
    if dp:
        summary = "; ".join(
            f"claimed ε {r.case.claimed_epsilon:.2f}: ε_lb {r.audit.epsilon_lb:.2f}, score shift {shift(r)} sd"
            + (f" (μ = {r.case.best_shift:.2f})" if r.case.best_shift is not None else "")
            for r in dp
        )
        if all(r.passed for r in dp):
            verdict = (
                "Every bound stays below its claim, as it must when the callback clips and adds the noise the "
                "accountant assumes."
            )
        else:
            verdict = (
                "A bound at or above its claim means the mechanism leaks more than it claims (or, with probability "
                "up to 5 %, a statistical fluke): investigate before trusting the claim."
            )
        near = all(
            r.case.best_shift is None or shift_value(r) >= 0.7 * r.case.best_shift for r in dp
        )  # the score is (nearly) as informative as any test on the output can be
        strength = (
            "The canary's loss separates the runs with and without it by close to μ standard deviations, the most "
            "any test on the trained model can achieve for this Gaussian mechanism: the canary and the score are "
            "about as strong as the setting allows, and the audit does see the canary through the noise. "
            if near
            else "The canary's loss separates the runs by clearly less than μ standard deviations: a stronger "
            "canary or score would tighten the audit. "
        )
        text.append(
            f"DP-SGD ({summary}). {verdict} {strength}The remaining gap between ε_lb and the claim is statistical: "
            "the claim is about likelihood ratios down to tail events of probability ~δ, and a few hundred runs "
            "bound rates only to within a few percent (see the ceiling), so a black-box audit of this size can only "
            "certify a fraction of the claimed ε."
        )
    for r in broken:
        lb, claim = r.audit.epsilon_lb, r.case.claimed_epsilon
        if r.passed:
            text.append(
                f"{r.case.name}: ε_lb {lb:.2f} exceeds the claimed {claim:.2f}: the audit rejects the claim, so it "
                "can fail. Without noise, training from fixed initial weights with q = 1 is deterministic: every run "
                "with the canary gives one score and every run without gives another, the runs separate perfectly "
                "and ε_lb reaches the ceiling set by the number of runs. The true ε is infinite; an audit shows at "
                "most its ceiling, which is enough to refute this claim."
            )
        else:
            text.append(
                f"{r.case.name}: ε_lb {lb:.2f} does not exceed the claimed {claim:.2f} (ceiling "
                f"{r.audit.ceiling:.2f}): with this few runs the audit cannot refute the claim even for a mechanism "
                "without noise. Raise --audit-runs until the ceiling is above the claim."
            )
    return "\n\n".join(text)


# -- the report ------------------------------------------------------------------------------


# Sections in report order: name -> function(args) returning the section's markdown, starting with its
# "## " title; main() inserts the provenance lines (command, date, machine, load, versions) under the title.
# To add one, add its entry here (and its options to parse_args if it needs any).
SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {
    "accuracy": lambda args: accuracy_section(quick=args.quick),
    "overhead": overhead_section,
    "audit": audit_section,
    "distribution": distribution_section,
    "vaccination": vaccination_section,
    "pmsvm_lambda": lambda args: regime_section(),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated, from {', '.join(SECTIONS)} (default: all)"
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (fewer steps and runs)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="markdown report (relative: to the repo)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    overhead = parser.add_argument_group("overhead")
    overhead.add_argument("--steps", type=int, help="timed steps per run (>= 30; default 60, quick 30)")
    overhead.add_argument("--warmup", type=int, help="steps dropped at the start of a run (default 10, quick 5)")
    overhead.add_argument("--rounds", type=int, help="rounds over all variants (default 5, quick 1)")
    audit = parser.add_argument_group("audit")
    audit.add_argument(
        "--audit-runs", type=int, help="trainings per side, with and without the canary (default 400, quick 100)"
    )
    audit.add_argument("--audit-steps", type=int, default=10, help="DP-SGD steps per training (default 10)")
    audit.add_argument(
        "--audit-epsilons",
        type=lambda s: [float(v) for v in s.split(",")],
        default=[2.0, 8.0],
        help="target epsilons of the audited DP-SGD rows; the first is the broken row's claim (default 2,8)",
    )
    add_distribution_arguments(parser)
    add_vaccination_arguments(parser)
    args = parser.parse_args(argv)
    presets = {"steps": (60, 30), "warmup": (10, 5), "rounds": (5, 1), "audit_runs": (400, 100)}
    for key, (full, quick) in presets.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown or not args.sections:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    if args.steps < 30 or args.warmup < 1 or args.rounds < 1 or args.audit_runs < 20 or args.audit_steps < 1:
        parser.error("need --steps >= 30, --warmup, --rounds, --audit-steps >= 1 and --audit-runs >= 20")
    args.command = shlex.join([".venv/bin/python", SCRIPT, *(sys.argv[1:] if argv is None else argv)])
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    quiet()
    torch.set_num_threads(args.threads)
    output = Path(args.output)
    output = output if output.is_absolute() else REPO_ROOT / output
    sections = read_sections(output)
    start = time.perf_counter()
    for name in args.sections:
        args.load_before = os.getloadavg()[0]
        began = time.perf_counter()
        sections[name] = with_provenance(SECTIONS[name](args), section_provenance(args))
        print(f"{name}: {time.perf_counter() - began:.0f} s", flush=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_report("Privacy benchmarks", SCRIPT, list(SECTIONS), sections), encoding="utf-8")
    for name in args.sections:
        print(sections[name])
    print(f"written to {output} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
