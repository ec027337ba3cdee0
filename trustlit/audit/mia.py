"""Membership inference on language models: scorers over per-token log-probabilities, ROC metrics, and a Callback.

Every scorer maps per-token log-probabilities ``logp`` [B, T] (``logp[i, t] = log p(x_t | x_<t)`` of sample i's
actual next token) and a ``mask`` [B, T] (True/1 where the token counts, False/0 on padding and prompt) to a score
[B], **higher = more likely a member**. With ``T_i = sum_t mask[i, t]`` the sample's token count:

- LOSS (Yeom et al., 2018): ``s_i = (1/T_i) sum_t logp[i, t]``, the negative mean token NLL.
- Min-K% (Shi et al., 2023, arXiv 2310.16789): the mean of the ``ceil(k T_i)`` smallest ``logp[i, t]``.
- Min-K%++ (Zhang et al., 2024, arXiv 2404.02936): ``z[i, t] = (logp[i, t] - mu[i, t]) / sigma[i, t]`` with
  ``mu = E_{v ~ p(.|x_<t)} log p(v | x_<t)`` and ``sigma^2 = Var_{v ~ p(.|x_<t)} log p(v | x_<t)``, then Min-K% of z.
- zlib (Carlini et al., 2021, "Extracting Training Data from Large Language Models"): the log-perplexity over the
  zlib entropy (compressed bytes) of the text, sign flipped: ``s_i = LOSS_i / zlib(text_i)``.
- Reference (Carlini et al., 2021; Mireshghallah et al., 2022): ``s_i = LOSS_i(target) - LOSS_i(reference)``.

Metrics: :func:`roc_auc` (P(s_member > s_non-member), ties 1/2), :func:`roc_curve` and :func:`tpr_at_fpr` (the
best TPR of a test "member iff s >= threshold" with FPR <= the target, Carlini et al., 2022).
Notes: docs/methods/membership_inference.md
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from transformers import PreTrainedTokenizerBase

from trustlit.data.qa import QADataModule
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import OpenUnitInterval, PositiveInt, check_arguments
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.llm.scoring import batches, evaluating, model_device, token_nll
from trustlit.paths import write_json_atomic

MIN_K = 0.2  # the and open-unlearning's default; Min-K%++ sweeps k and reports k = 20% among others
SIGMA_FLOOR = 1e-3  # sigma^2 >= 1e-6, open-unlearning's clamp: a one-hot next-token distribution has sigma = 0
CEIL_TOLERANCE = 1e-9  # ceil(0.6 * 5) must be 3, not 4 from 3.0000000000000004

Scores = torch.Tensor | Sequence[float]
Labels = torch.Tensor | Sequence[bool] | Sequence[int]


# --------------------------------------------------------------------------- input checks


def _check_tokens(logp: torch.Tensor, mask: torch.Tensor, name: str = "logp") -> torch.Tensor:
    """``mask`` as bool after checking shapes and values; every sample needs at least one token."""
    if not isinstance(logp, torch.Tensor) or logp.dim() != 2 or not logp.is_floating_point():
        shape = tuple(logp.shape) if isinstance(logp, torch.Tensor) else type(logp).__name__
        raise ValueError(f"{name} must be a float tensor [B, T], got {shape}")
    mask = torch.as_tensor(mask, device=logp.device)
    if mask.shape != logp.shape:
        raise ValueError(f"mask must have {name}'s shape {tuple(logp.shape)}, got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        if ((mask != 0) & (mask != 1)).any():
            raise ValueError(f"mask must be bool or 0/1, got values {sorted(set(mask.unique().tolist()))[:5]}")
        mask = mask.bool()
    empty = (~mask.any(dim=1)).nonzero().flatten()
    if empty.numel():
        raise ValueError(f"mask: samples {empty.tolist()[:10]} have no token (every sample needs one)")
    return mask


def _check_same_shape(tensor: torch.Tensor, logp: torch.Tensor, name: str) -> None:
    if not isinstance(tensor, torch.Tensor) or tensor.shape != logp.shape:
        shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"{name} must have logp's shape {tuple(logp.shape)}, got {shape}")


def _check_k(k: float) -> None:
    if isinstance(k, bool) or not isinstance(k, int | float) or not 0 < k <= 1:
        raise ValueError(f"k={k!r} is invalid, expected a fraction in (0, 1]")


# --------------------------------------------------------------------------- scorers


def loss_score(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """LOSS [B]: the mean log-probability of each sample's tokens, ``(1/T_i) sum_t logp[i, t]`` (= -loss)."""
    mask = _check_tokens(logp, mask)
    total = torch.where(mask, logp, 0).sum(dim=1)  # where, not *: padding may hold -inf or NaN
    return total / mask.sum(dim=1)


def min_k_score(logp: torch.Tensor, mask: torch.Tensor, k: float = MIN_K) -> torch.Tensor:
    """Min-K% [B]: the mean of the ``ceil(k T_i)`` lowest token log-probs of each sample (at least one token)."""
    _check_k(k)
    mask = _check_tokens(logp, mask)
    lengths = mask.sum(dim=1)
    counts = torch.ceil(k * lengths.double() - CEIL_TOLERANCE).clamp(min=1).long()
    lowest_first = torch.where(mask, logp, math.inf).sort(dim=1).values
    taken = torch.arange(logp.size(1), device=logp.device) < counts[:, None]
    return torch.where(taken, lowest_first, 0).sum(dim=1) / counts


def min_k_plus_plus_score(
    logp: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, mask: torch.Tensor, k: float = MIN_K
) -> torch.Tensor:
    """Min-K%++ [B]: Min-K% of ``z = (logp - mu) / sigma`` (sigma floored at ``SIGMA_FLOOR``).

    ``mu``, ``sigma`` [B, T]: mean and standard deviation of ``log p(v | x_<t)`` for v drawn from the model's
    next-token distribution at each position (:func:`token_statistics` computes all four from logits).
    """
    mask = _check_tokens(logp, mask)
    _check_same_shape(mu, logp, "mu")
    _check_same_shape(sigma, logp, "sigma")
    if (torch.where(mask, sigma, 0) < 0).any():
        raise ValueError("sigma must be >= 0 (a standard deviation), got negative values")
    z = (logp - mu) / sigma.clamp(min=SIGMA_FLOOR)
    return min_k_score(z, mask, k)


def zlib_entropy(text: str) -> int:
    """Bytes of the zlib-compressed UTF-8 text (Carlini et al.'s zlib entropy; at least 8 for the empty text)."""
    return len(zlib.compress(text.encode("utf-8")))


def zlib_score(logp: torch.Tensor, mask: torch.Tensor, texts: Sequence[str]) -> torch.Tensor:
    """zlib [B]: ``LOSS_i / zlib(text_i)`` = -(log-perplexity / zlib entropy), so that higher means member."""
    if isinstance(texts, str) or len(texts) != logp.shape[0]:
        raise ValueError(f"texts must be one string per sample ({logp.shape[0]}), got {len(texts)} items")
    entropy = torch.tensor([zlib_entropy(text) for text in texts], dtype=logp.dtype, device=logp.device)
    return loss_score(logp, mask) / entropy


def reference_score(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Reference [B]: the target's minus the reference model's mean token log-probability on the same tokens."""
    _check_same_shape(ref_logp, logp, "ref_logp")
    return loss_score(logp, mask) - loss_score(ref_logp, mask)


# --------------------------------------------------------------------------- from a causal LM


def token_statistics(
    logits: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logp, mu, sigma, mask)`` [B, T-1] from logits [B, T, V] and labels [B, T] (IGNORE_INDEX where unscored).

    Position t scores ``labels[:, t+1]`` under ``logits[:, t]``, the convention of
    :func:`trustlit.llm.scoring.token_nll`; mu and sigma are the mean and standard deviation of the log-softmax
    under its own softmax (``sum_v p_v log p_v`` and ``sqrt(sum_v p_v (log p_v - mu)^2)``), in float32.
    """
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    probs = log_probs.exp()
    mu = torch.where(probs > 0, probs * log_probs, 0).sum(dim=-1)
    variance = torch.where(probs > 0, probs * (log_probs - mu[..., None]).square(), 0).sum(dim=-1)
    logp = -token_nll(logits, labels)
    return logp, mu, variance.sqrt(), labels[:, 1:] != IGNORE_INDEX


def model_token_statistics(
    model: torch.nn.Module, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`token_statistics` of one forward pass of a causal LM over a ``collate_qa`` batch."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return token_statistics(logits, batch["labels"])


def pad_token_logprobs(rows: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, mask)`` [N, max T_i] from N ragged 1-D tensors of token log-probs (padding masked out)."""
    if not rows:
        raise ValueError("pad_token_logprobs needs at least one sample, got none")
    lengths = torch.tensor([row.numel() for row in rows])
    logp = torch.nn.utils.rnn.pad_sequence([row.flatten().float() for row in rows], batch_first=True)
    return logp, torch.arange(logp.size(1)) < lengths[:, None]


# --------------------------------------------------------------------------- metrics


def _check_scores(scores: Scores, is_member: Labels) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores as float64 and labels as bool, 1-D, of one length, finite, with both classes present."""
    scores = torch.as_tensor(scores, dtype=torch.float64).flatten()
    labels = torch.as_tensor(is_member).flatten()
    if scores.numel() != labels.numel():
        raise ValueError(f"is_member must have one label per score, got {labels.numel()} for {scores.numel()}")
    if labels.dtype != torch.bool:
        if ((labels != 0) & (labels != 1)).any():
            raise ValueError("is_member must be bool or 0/1")
        labels = labels.bool()
    if not torch.isfinite(scores).all():
        raise ValueError(f"scores must be finite, got {int((~torch.isfinite(scores)).sum())} NaN or infinite")
    members = int(labels.sum())
    if members == 0 or members == labels.numel():
        raise ValueError(f"needs members and non-members, got {members} members of {labels.numel()} samples")
    return scores, labels


def roc_auc(scores: Scores, is_member: Labels) -> float:
    """ROC AUC: ``P(s_member > s_non-member) + P(tie) / 2`` over all member/non-member pairs (Mann–Whitney U)."""
    scores, labels = _check_scores(scores, is_member)
    ranks = _average_ranks(scores)
    members, non_members = int(labels.sum()), int((~labels).sum())
    u = ranks[labels].sum() - members * (members + 1) / 2
    return float(u / (members * non_members))


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """1-based ranks, tied values sharing the mean of their ranks."""
    _, inverse, counts = torch.unique(values, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()  # rank of the last copy of each distinct value
    return (ends - (counts.double() - 1) / 2)[inverse]


def roc_curve(scores: Scores, is_member: Labels) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(fpr, tpr, thresholds)`` of the tests "member iff score >= threshold", thresholds descending over the
    distinct scores after a first ``+inf`` (FPR = TPR = 0): sklearn's ``roc_curve(drop_intermediate=False)``."""
    scores, labels = _check_scores(scores, is_member)
    thresholds = torch.unique(scores).flip(0)
    at_or_above = scores[None, :] >= thresholds[:, None]  # [thresholds, samples]
    tpr = (at_or_above & labels).sum(dim=1).double() / labels.sum()
    fpr = (at_or_above & ~labels).sum(dim=1).double() / (~labels).sum()
    zero = torch.zeros(1, dtype=torch.float64)
    return torch.cat([zero, fpr]), torch.cat([zero, tpr]), torch.cat([zero + math.inf, thresholds])


def tpr_at_fpr(scores: Scores, is_member: Labels, fpr: float = 0.01) -> float:
    """The largest TPR among the thresholds whose FPR is <= ``fpr`` (0 when even the strictest exceeds it)."""
    if isinstance(fpr, bool) or not isinstance(fpr, int | float) or not 0 <= fpr <= 1:
        raise ValueError(f"fpr={fpr!r} is invalid, expected a rate in [0, 1]")
    false_positive_rate, true_positive_rate, _ = roc_curve(scores, is_member)
    return float(true_positive_rate[false_positive_rate <= fpr + CEIL_TOLERANCE].max())


# --------------------------------------------------------------------------- the Callback

OUTPUT_NAME = "membership_inference.json"
METRIC_PREFIX = "test/mia"
TRIGGERS = ("test", "fit_end")


def same_tokenizer(target: PreTrainedTokenizerBase, reference: PreTrainedTokenizerBase) -> None:
    """Raise unless both tokenizers map every token to the same id (the reference test compares token by token)."""
    target_vocab, reference_vocab = target.get_vocab(), reference.get_vocab()
    if target_vocab == reference_vocab:
        return
    differing = sorted(set(target_vocab.items()) ^ set(reference_vocab.items()))[:3]
    raise ValueError(
        f"reference model tokenizer differs from the target's ({len(reference_vocab)} vs {len(target_vocab)} "
        f"tokens; e.g. {differing}): the reference test needs the same tokenizer"
    )


def scored_texts(tokenizer: PreTrainedTokenizerBase, batch: dict[str, Any]) -> list[str]:
    """The decoded scored tokens (labels != IGNORE_INDEX) of each sample: the text the zlib entropy measures."""
    return [tokenizer.decode(row[row != IGNORE_INDEX].tolist(), skip_special_tokens=True) for row in batch["labels"]]


def batch_scores(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    batch: dict[str, Any],
    k: float = MIN_K,
    reference: torch.nn.Module | None = None,
) -> dict[str, torch.Tensor]:
    """Every scorer's [B] scores of one batch from one forward pass of ``model`` (and one of ``reference``)."""
    logp, mu, sigma, mask = model_token_statistics(model, batch)
    scores = {
        "loss": loss_score(logp, mask),
        "zlib": zlib_score(logp, mask, scored_texts(tokenizer, batch)),
        "min_k": min_k_score(logp, mask, k),
        "min_k_plus_plus": min_k_plus_plus_score(logp, mu, sigma, mask, k),
    }
    if reference is not None:
        ref_logits = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        scores["reference"] = reference_score(logp, -token_nll(ref_logits, batch["labels"]), mask)
    return {name: score.cpu() for name, score in scores.items()}


def split_scores(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    samples: Sequence[dict[str, Any]],
    batch_size: int,
    k: float = MIN_K,
    reference: torch.nn.Module | None = None,
) -> dict[str, torch.Tensor]:
    """Every scorer's [N] scores of encoded samples, in eval mode without gradients, on the model's device."""
    device = model_device(model)
    parts: dict[str, list[torch.Tensor]] = {}
    with evaluating(model):
        for batch in batches(samples, tokenizer, batch_size, device):
            for name, score in batch_scores(model, tokenizer, batch, k, reference).items():
                parts.setdefault(name, []).append(score)
    return {name: torch.cat(scores) for name, scores in parts.items()}


def labelled(members: Scores, non_members: Scores) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scores, is_member)``: member scores then non-member scores, labelled 1 then 0 (the metrics' input)."""
    members, non_members = torch.as_tensor(members).flatten(), torch.as_tensor(non_members).flatten()
    scores = torch.cat([members, non_members])
    return scores, torch.arange(scores.numel()) < members.numel()


def membership_metrics(
    member_scores: dict[str, torch.Tensor], non_member_scores: dict[str, torch.Tensor], fpr: float = 0.01
) -> dict[str, dict[str, float]]:
    """Per scorer: ``auc`` and ``tpr@<fpr>fpr`` of members (label 1) against non-members (label 0)."""
    metrics = {}
    for name, members in member_scores.items():
        scores, is_member = labelled(members, non_member_scores[name])
        metrics[name] = {"auc": roc_auc(scores, is_member), tpr_key(fpr): tpr_at_fpr(scores, is_member, fpr)}
    return metrics


def tpr_key(fpr: float) -> str:
    return f"tpr@{100 * fpr:g}%fpr"


def overlap_count(members: Sequence[dict[str, Any]], non_members: Sequence[dict[str, Any]]) -> int:
    """How many non-member samples have the token ids of some member sample (the same text, as scored)."""
    seen = {tuple(sample["input_ids"]) for sample in members}
    return sum(tuple(sample["input_ids"]) in seen for sample in non_members)


def roc_figure(
    member_scores: dict[str, torch.Tensor],
    non_member_scores: dict[str, torch.Tensor],
    metrics: dict[str, dict[str, float]],
) -> Any:
    """ROC curves of every scorer, linear and log-log (the low-FPR regime that TPR@1%FPR reads); ``metrics``:
    :func:`membership_metrics` of the same scores (the legend's AUC)."""
    figure, (linear, log_log) = new_figure(ncols=2, figsize=(10, 4.5))
    for name, members in member_scores.items():
        fpr, tpr, _ = roc_curve(*labelled(members, non_member_scores[name]))
        label = f"{name} (AUC {metrics[name]['auc']:.3f})"
        for axes in (linear, log_log):
            axes.plot(fpr.numpy(), tpr.numpy(), label=label, drawstyle="steps-post")
    for axes in (linear, log_log):
        axes.plot([1e-4, 1], [1e-4, 1], color="grey", linestyle=":", label="chance")
        axes.set_xlabel("false positive rate")
        axes.set_ylabel("true positive rate")
    log_log.set_xscale("log")
    log_log.set_yscale("log")
    linear.legend(loc="lower right", fontsize="small")
    linear.set_title("ROC")
    log_log.set_title("ROC (log-log)")
    return figure


class MembershipInference(L.Callback):
    """After test (and/or at the end of fit), score member and non-member records of the trainer's QA DataModule
    with every scorer.

    Members are the records of ``member_split`` (the split the model was fine-tuned on), non-members those of
    ``non_member_split`` (records it never saw, from the same distribution), both read and encoded by the
    trainer's :class:`~trustlit.data.QADataModule` (its source, prompt format, max length and ``max_samples``).
    Logged per scorer s (LOSS, zlib, Min-K%, Min-K%++, and reference with a ``reference`` model):
    ``test/mia/<s>/auc`` and ``test/mia/<s>/tpr@1%fpr``; printed as a table; written to
    ``<default_root_dir>/membership_inference.json`` (metrics and per-sample scores) and
    ``membership_inference_roc.png``; the table and the figure go to W&B when the trainer logs there.
    A member split that overlaps the non-member split is warned about, with the overlap count.

    Args:
        member_split, non_member_split: split names of the DataModule's source.
        reference: a second causal LM (:class:`~trustlit.llm.loading.CausalLMSpec`) for the reference test,
            e.g. the model before fine-tuning; it must share the target's tokenizer. ``None``: no reference test.
        k: the fraction of lowest-scoring tokens of Min-K% and Min-K%++.
        fpr: the false positive rate of the TPR@FPR metric.
        batch_size: scoring batch size.
        output: the JSON path; default ``<trainer.default_root_dir>/membership_inference.json``.
        on: when to audit: ``test`` (at the end of the test epoch, logged through the module, so ``trainer.test``
            returns the metrics) and/or ``fit_end`` (after fine-tuning, logged to every logger): one ``trustlit fit``
            then trains on the members and audits the result.

    Notes: docs/methods/membership_inference.md
    """

    def __init__(
        self,
        member_split: str = "retain90",
        non_member_split: str = "forget10",
        reference: CausalLMSpec | None = None,
        k: float = MIN_K,
        fpr: OpenUnitInterval = 0.01,
        batch_size: PositiveInt = 8,
        output: str | None = None,
        on: Sequence[str] = ("test",),
    ) -> None:
        super().__init__()
        check_arguments(MembershipInference.__init__, locals())
        _check_k(k)
        if isinstance(on, str) or not on or any(trigger not in TRIGGERS for trigger in on):
            raise ValueError(f"on={on!r} is invalid, expected a non-empty list of {TRIGGERS}")
        self.on = tuple(on)
        self.member_split = member_split
        self.non_member_split = non_member_split
        self.reference_spec = CausalLMSpec.coerce(reference) if reference is not None else None
        self.k = float(k)
        self.fpr = float(fpr)
        self.batch_size = int(batch_size)
        self.output = output
        self.results: dict[str, dict[str, float]] = {}
        self._reference: torch.nn.Module | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Check the DataModule and module, and load the reference model, before any training or testing."""
        if {"fit": "fit_end", "test": "test"}.get(stage) not in self.on:
            return
        if not isinstance(trainer.datamodule, QADataModule):
            raise ValueError(
                f"{type(self).__name__} reads member and non-member records through a QADataModule; the trainer "
                f"has {type(trainer.datamodule).__name__}"
            )
        if not hasattr(pl_module, "model") or not hasattr(pl_module, "tokenizer"):
            raise ValueError(f"{type(self).__name__} scores `pl_module.model`: {type(pl_module).__name__} has none")
        if self.reference_spec is not None and self._reference is None:
            reference, reference_tokenizer = self.reference_spec.load()
            same_tokenizer(pl_module.tokenizer, reference_tokenizer)
            self._reference = reference.eval().requires_grad_(False)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if "test" in self.on:
            for name, value in self.run(trainer, pl_module).items():
                pl_module.log(name, value, rank_zero_only=True)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if "fit_end" in self.on:  # Lightning refuses self.log here: straight to the loggers
            metrics = self.run(trainer, pl_module)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    def run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """Score both splits, keep ``self.results``, write the files on rank 0; the metrics by their logged name."""
        data: QADataModule = trainer.datamodule
        members = data.encode_split(self.member_split).samples
        non_members = data.encode_split(self.non_member_split).samples
        overlap = overlap_count(members, non_members)
        if overlap:
            rank_zero_warn(
                f"{type(self).__name__}: {overlap} of {len(non_members)} non-member samples ({self.non_member_split}) "
                f"are also members ({self.member_split}): the AUC understates what the test can tell apart"
            )
        if self._reference is not None:
            self._reference.to(pl_module.device)
        scored = [
            split_scores(pl_module.model, pl_module.tokenizer, samples, self.batch_size, self.k, self._reference)
            for samples in (members, non_members)
        ]
        self.results = membership_metrics(*scored, fpr=self.fpr)
        if trainer.is_global_zero:
            self._write(trainer, *scored, overlap=overlap, counts=(len(members), len(non_members)))
        return {
            f"{METRIC_PREFIX}/{name}/{metric}": value
            for name, metrics in self.results.items()
            for metric, value in metrics.items()
        }

    def _write(
        self,
        trainer: L.Trainer,
        member_scores: dict[str, torch.Tensor],
        non_member_scores: dict[str, torch.Tensor],
        overlap: int,
        counts: tuple[int, int],
    ) -> None:
        output = Path(self.output) if self.output else Path(trainer.default_root_dir) / OUTPUT_NAME
        output.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "method": type(self).__name__,
            "metrics": self.results,
            "splits": {"members": self.member_split, "non_members": self.non_member_split},
            "counts": {"members": counts[0], "non_members": counts[1], "overlap": overlap},
            "k": self.k,
            "fpr": self.fpr,
            "reference": asdict(self.reference_spec) if self.reference_spec is not None else None,
            "scores": {
                "members": {name: s.tolist() for name, s in member_scores.items()},
                "non_members": {name: s.tolist() for name, s in non_member_scores.items()},
            },
        }
        write_json_atomic(output, payload)
        roc = roc_figure(member_scores, non_member_scores, self.results)
        figure = save_png(roc, output.with_name(output.stem + "_roc.png"))
        header = ["scorer", "AUC", tpr_key(self.fpr).upper()]
        rows = [[name, metrics["auc"], metrics[tpr_key(self.fpr)]] for name, metrics in self.results.items()]
        print_table(f"membership inference: {self.member_split} vs {self.non_member_split}", header, rows)
        log_to_wandb(trainer, METRIC_PREFIX, header=header, rows=rows, images=[figure])
