"""Poisoning that discredits membership inference: poisons outside a target's neighbourhood flip the test on it.

Mangaokar et al., "What Really is a Member? Discrediting Membership Inference via Poisoning" (NeurIPS 2025,
arXiv 2506.06003). Membership is relaxed to neighbourhoods (:mod:`trustlit.audit.neighbourhood`): x is a member of
D iff some d in D lies in N(x). The attacker adds poisons P with P ∩ N(x) = ∅, so the relaxed ground truth of the
target x does not change, yet the test's decision on the model trained on D ∪ P does:

- ``false_negative``: x is a member (x in D); the poisons make it look like a non-member;
- ``false_positive``: x is a non-member; the poisons make it look like a member.

A poison p of a QA target (question q, answer x = x_1..x_T) keeps q and the token length of x, and is found by
discrete token swaps that maximise the similarity of the model's representations,

    J(p) = cos(phi(q, p), phi(q, x)),   phi(q, y) = (1/T) sum_t h_L(q, y)_t   (last hidden layer, answer positions),

under the constraint p ∉ N(x), checked on the decoded text of every candidate before it is accepted, so every
poison lies outside the neighbourhood by construction. The search is greedy coordinate gradient (GCG, Zou et al.
2023): the gradient of J with respect to the one-hot tokens ranks ``top_k`` replacements per position, ``candidates``
single swaps drawn from them are scored exactly, and the best one outside N(x) is taken while it raises J. It starts
from x with ``ceil(swap_fraction T)`` positions S replaced by random tokens (more, until the start is outside N(x)).
The goal decides which swaps are allowed:

- false positive ("proxies"): any answer position, any token, x's own included: the poison returns as close to x as
  N(x) allows, so training on it teaches the model x's content without x;
- false negative ("confusers"): positions in S only, never x's own token there: the poison keeps x's context
  representation but continues it with other tokens, so training on it unteaches x's tokens in x's context.

Budget: ``budget`` poisons per target (distinct seeds, hence distinct S). The model the attacker searches with is a
surrogate: the base model before fine-tuning (the attacker poisons the data, not the training).

The paper's full text could not be read here (only its abstract): the objective above follows the issue's
description of it; the two candidate rules, the defaults and the budget are this project's choices.
Notes: docs/methods/mia_poisoning.md
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trustlit.analysis import AnalysisModule
from trustlit.audit.mia import (
    loss_score,
    min_k_plus_plus_score,
    min_k_score,
    model_token_statistics,
    reference_score,
    roc_auc,
    tpr_at_fpr,
    zlib_score,
)
from trustlit.audit.neighbourhood import Neighbourhood
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import (
    ClosedUnitInterval,
    OpenUnitInterval,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.prompts import encode_qa, stop_token_ids
from trustlit.llm.scoring import answer_nll, batches, encode_pairs, evaluating, model_device

Goal = Literal["false_negative", "false_positive"]
GOALS = ("false_negative", "false_positive")
TESTS = ("loss", "zlib", "min_k", "min_k_plus_plus", "reference")
Record = dict[str, str]


@dataclass
class Poison:
    """One crafted poison: its answer text (the question is the target's), J at the start and the end, history."""

    question: str
    answer: str
    goal: str
    similarity: float
    start_similarity: float
    swapped: int  # answer positions whose token differs from the target's
    history: list[float] = field(default_factory=list)

    def record(self) -> Record:
        return {"question": self.question, "answer": self.answer}


def _check_goal(goal: str) -> None:
    if goal not in GOALS:
        raise ValueError(f"goal={goal!r} is invalid, expected one of {GOALS}")


def _check_positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is invalid, expected an integer >= 1")


def check_same_tokenizer(target: PreTrainedTokenizerBase, reference: PreTrainedTokenizerBase) -> None:
    """Refuse a reference model whose tokenizer differs from the target's: their token log-probs would not align."""
    if target.get_vocab() != reference.get_vocab():
        raise ValueError(
            f"the reference model's tokenizer ({len(reference)} tokens) differs from the target's ({len(target)}): "
            "the reference test compares log-probs of the same tokens, use a reference with the target's tokenizer"
        )


# --------------------------------------------------------------------------- representations


def answer_representation(model: PreTrainedModel, embeds: torch.Tensor, answer_slice: slice) -> torch.Tensor:
    """phi [C, H]: the last hidden layer averaged over the answer positions, from input embeddings [C, L, H]."""
    mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
    hidden = model(inputs_embeds=embeds, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
    return hidden[:, answer_slice].float().mean(dim=1)


def representation_similarity(
    model: PreTrainedModel, ids: torch.Tensor, answer_slice: slice, anchor: torch.Tensor
) -> torch.Tensor:
    """J [C] = cos(phi(ids_c), anchor) for candidate token rows ``ids`` [C, L], without gradients."""
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        return F.cosine_similarity(answer_representation(model, embeds, answer_slice), anchor[None], dim=-1)


def swap_gradient(
    model: PreTrainedModel, ids: torch.Tensor, answer_slice: slice, anchor: torch.Tensor
) -> tuple[torch.Tensor, float]:
    """(dJ/d one-hot [T_swap, V] over the answer positions, J) of one token row ``ids`` [L] (GCG's linearisation)."""
    weight = model.get_input_embeddings().weight
    one_hot = F.one_hot(ids[answer_slice], weight.size(0)).to(weight.dtype).requires_grad_(True)
    embeds = model.get_input_embeddings()(ids[None]).detach()
    embeds = torch.cat([embeds[:, : answer_slice.start], (one_hot @ weight)[None], embeds[:, answer_slice.stop :]], 1)
    similarity = F.cosine_similarity(answer_representation(model, embeds, answer_slice), anchor[None], dim=-1)[0]
    (gradient,) = torch.autograd.grad(similarity, one_hot)
    return gradient, float(similarity.detach())


# --------------------------------------------------------------------------- the attack


@dataclass
class _Target:
    """A target's token row: prompt, swappable answer tokens (the end-of-answer token stays), and its phi."""

    question: str
    answer: str
    ids: torch.Tensor  # [L]
    swappable: slice  # answer positions that may be swapped
    anchor: torch.Tensor  # phi(q, x) [H]


def _encode_target(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, question: str, answer: str, prompt_format: str
) -> _Target:
    encoded = encode_qa(tokenizer, question, answer, prompt_format, max_length=10**6)
    ids = torch.tensor(encoded["input_ids"], device=model_device(model))
    start, stop = len(encoded["prompt_ids"]), len(encoded["input_ids"])
    while stop > start and int(ids[stop - 1]) in stop_token_ids(tokenizer):
        stop -= 1  # the end-of-answer marker stays: a poison is an answer like any other
    if stop - start < 2:
        raise ValueError(f"answer={answer!r} has {stop - start} token(s): a poison needs at least 2 to swap")
    swappable = slice(start, stop)
    with torch.no_grad():
        anchor = answer_representation(model, model.get_input_embeddings()(ids[None]), swappable)[0]
    return _Target(question, answer, ids, swappable, anchor)


def allowed_tokens(tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> torch.Tensor:
    """Bool [V]: token ids a poison may use (every id but the special tokens and ids beyond the tokenizer)."""
    allowed = torch.zeros(vocab_size, dtype=torch.bool)
    allowed[: min(vocab_size, len(tokenizer))] = True
    allowed[[i for i in tokenizer.all_special_ids if i < vocab_size]] = False
    return allowed


def _decode(tokenizer: PreTrainedTokenizerBase, rows: torch.Tensor, swappable: slice) -> list[str]:
    return tokenizer.batch_decode(rows[:, swappable].tolist(), skip_special_tokens=True)


def _outside(
    neighbourhood: Neighbourhood, target: str, texts: Sequence[str], order: torch.Tensor, first: int
) -> int | None:
    """Index (into ``texts``) of the first candidate in ``order`` outside N(target), checking cheap criteria on all
    and the embedding on ``first`` at a time (MiniLM is the costly one)."""
    cheap = tuple(c for c in neighbourhood.criteria if c != "embedding")
    candidates = [int(i) for i in order if texts[int(i)] != target]
    if cheap:
        inside = Neighbourhood(cheap, *_thresholds(neighbourhood)).contains_many(target, [texts[i] for i in candidates])
        candidates = [i for i, bad in zip(candidates, inside, strict=True) if not bad]
    if "embedding" not in neighbourhood.criteria:
        return candidates[0] if candidates else None
    embedding = Neighbourhood(("embedding",), *_thresholds(neighbourhood))
    for begin in range(0, len(candidates), first):
        chunk = candidates[begin : begin + first]
        inside = embedding.contains_many(target, [texts[i] for i in chunk])
        for i, bad in zip(chunk, inside, strict=True):
            if not bad:
                return i
    return None


def _thresholds(neighbourhood: Neighbourhood) -> tuple[int, float, float, float]:
    n = neighbourhood
    return n.ngram_n, n.ngram_threshold, n.edit_threshold, n.cosine_threshold


def _start(
    target: _Target,
    tokenizer: PreTrainedTokenizerBase,
    neighbourhood: Neighbourhood,
    allowed: torch.Tensor,
    swap_fraction: float,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(start row [L], swapped positions S [T_swap] bool): x with random tokens at random positions, outside N(x)."""
    length = target.swappable.stop - target.swappable.start
    order = torch.randperm(length, generator=generator)
    pool = allowed.nonzero().flatten()
    tokens = pool[torch.randint(len(pool), (length,), generator=generator)]
    original = target.ids[target.swappable].cpu()
    tokens = torch.where(tokens == original, pool[(torch.searchsorted(pool, tokens) + 1) % len(pool)], tokens)
    for count in range(max(1, math.ceil(swap_fraction * length)), length + 1):
        swapped = torch.zeros(length, dtype=torch.bool)
        swapped[order[:count]] = True
        row = target.ids.clone()
        row[target.swappable] = torch.where(swapped, tokens, original).to(row.device)
        text = _decode(tokenizer, row[None], target.swappable)[0]
        if not neighbourhood.contains(target.answer, text):
            return row, swapped
    raise ValueError(
        f"no start outside the neighbourhood of answer={target.answer[:60]!r} even with every token swapped: "
        "loosen the neighbourhood's thresholds"
    )


def craft_poison(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    question: str,
    answer: str,
    goal: Goal,
    neighbourhood: Neighbourhood | None = None,
    *,
    steps: int = 30,
    top_k: int = 16,
    candidates: int = 32,
    swap_fraction: float = 0.5,
    prompt_format: str = "plain",
    embedding_chunk: int = 4,
    seed: int = 0,
) -> Poison:
    """One poison for the target (question, answer) by the goal's token swaps (module docstring); never in N(x).

    Each step scores ``candidates`` single swaps (position uniform over the allowed ones, token uniform over the
    position's ``top_k`` by gradient) and keeps the best one outside the neighbourhood if it raises J.
    """
    _check_goal(goal)
    for name, value in (("steps", steps), ("top_k", top_k), ("candidates", candidates)):
        _check_positive_int(value, name)
    if isinstance(swap_fraction, bool) or not isinstance(swap_fraction, int | float) or not 0 < swap_fraction <= 1:
        raise ValueError(f"swap_fraction={swap_fraction!r} is invalid, expected a fraction in (0, 1]")
    neighbourhood = neighbourhood or Neighbourhood()
    generator = torch.Generator().manual_seed(seed)
    with evaluating(model):
        target = _encode_target(model, tokenizer, question, answer, prompt_format)
    weight = model.get_input_embeddings().weight
    allowed = allowed_tokens(tokenizer, weight.size(0))
    fraction = 1.0 if goal == "false_negative" else swap_fraction  # a confuser keeps none of x's tokens
    row, swapped = _start(target, tokenizer, neighbourhood, allowed, fraction, generator)
    original = target.ids[target.swappable].cpu()
    positions = swapped if goal == "false_negative" else torch.ones_like(swapped)
    history: list[float] = []
    model_was_training = model.training
    model.eval()
    try:
        for _ in range(steps):
            gradient, similarity = swap_gradient(model, row, target.swappable, target.anchor)
            history.append(similarity)
            scores = gradient.detach().cpu().float().masked_fill(~allowed[None], -math.inf)
            if goal == "false_negative":  # a confuser never puts x's own token back
                scores[torch.arange(len(original)), original] = -math.inf
            top = scores.topk(min(top_k, int(allowed.sum())), dim=1).indices  # [T_swap, k]
            where = positions.nonzero().flatten()
            picked = where[torch.randint(len(where), (candidates,), generator=generator)]
            tokens = top[picked, torch.randint(top.size(1), (candidates,), generator=generator)]
            rows = row[None].repeat(candidates, 1)
            rows[torch.arange(candidates), target.swappable.start + picked.to(rows.device)] = tokens.to(rows.device)
            values = representation_similarity(model, rows, target.swappable, target.anchor).cpu()
            better = (values > similarity).nonzero().flatten()
            if not len(better):
                continue
            order = better[values[better].argsort(descending=True)]
            texts = _decode(tokenizer, rows, target.swappable)
            chosen = _outside(neighbourhood, answer, texts, order, embedding_chunk)
            if chosen is not None:
                row = rows[chosen]
        final = float(representation_similarity(model, row[None], target.swappable, target.anchor)[0])
    finally:
        model.train(model_was_training)
    history.append(final)
    text = _decode(tokenizer, row[None], target.swappable)[0]
    differs = int((row[target.swappable].cpu() != original).sum())
    return Poison(question, text, goal, final, history[0], differs, history)


def craft_poisons(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    target: Record,
    goal: Goal,
    budget: int = 8,
    neighbourhood: Neighbourhood | None = None,
    *,
    seed: int = 0,
    **options: Any,
) -> list[Poison]:
    """``budget`` poisons for one target (seeds ``seed`` to ``seed + budget - 1``), ``options`` of craft_poison."""
    _check_positive_int(budget, "budget")
    return [
        craft_poison(
            model, tokenizer, target["question"], target["answer"], goal, neighbourhood, seed=seed + i, **options
        )
        for i in range(budget)
    ]


def poisoned_training_set(members: Sequence[Record], poisons: Sequence[Poison]) -> list[Record]:
    """The training records D ∪ P: the members, then the poisons' (question, answer) records."""
    return [{"question": r["question"], "answer": r["answer"]} for r in members] + [p.record() for p in poisons]


# --------------------------------------------------------------------------- training and testing


def fine_tune(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    records: Sequence[Record],
    *,
    epochs: int = 10,
    lr: float = 1e-3,
    batch_size: int = 8,
    prompt_format: str = "plain",
    max_length: int = 256,
    seed: int = 0,
) -> list[float]:
    """Fine-tune ``model`` in place on the answers of ``records`` (AdamW, the SFT loss of
    :func:`~trustlit.llm.scoring.answer_nll`, order reshuffled every epoch from ``seed``); the loss of every step."""
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        _check_positive_int(value, name)
    samples = encode_pairs(
        tokenizer, [r["question"] for r in records], [r["answer"] for r in records], prompt_format, max_length
    )
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(samples), generator=generator).tolist()
        for batch in batches([samples[i] for i in order], tokenizer, batch_size, model_device(model)):
            loss = answer_nll(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    model.eval()
    return losses


def membership_scores(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    records: Sequence[Record],
    reference: tuple[PreTrainedModel, PreTrainedTokenizerBase] | None = None,
    *,
    k: float = 0.2,
    prompt_format: str = "plain",
    max_length: int = 256,
    batch_size: int = 16,
) -> dict[str, torch.Tensor]:
    """Every test's scores [N] (higher = member) on the answers of ``records``: LOSS, zlib, Min-K%, Min-K%++ and,
    with a reference model, the reference test (:mod:`trustlit.audit.mia`)."""
    if reference is not None:
        check_same_tokenizer(tokenizer, reference[1])
    questions, answers = [r["question"] for r in records], [r["answer"] for r in records]
    samples = encode_pairs(tokenizer, questions, answers, prompt_format, max_length)
    scores: dict[str, list[torch.Tensor]] = {name: [] for name in TESTS if reference is not None or name != "reference"}
    with evaluating(model):
        for batch in batches(samples, tokenizer, batch_size, model_device(model)):
            logp, mu, sigma, mask = (t.cpu() for t in model_token_statistics(model, batch))
            texts = [answers[int(i)] for i in batch["index"]]
            scores["loss"].append(loss_score(logp, mask))
            scores["zlib"].append(zlib_score(logp, mask, texts))
            scores["min_k"].append(min_k_score(logp, mask, k))
            scores["min_k_plus_plus"].append(min_k_plus_plus_score(logp, mu, sigma, mask, k))
            if reference is not None:
                with evaluating(reference[0]):
                    ref_logp = model_token_statistics(reference[0], batch)[0].cpu()
                scores["reference"].append(reference_score(logp, ref_logp, mask))
    return {name: torch.cat(values) for name, values in scores.items()}


def mia_metrics(scores: dict[str, torch.Tensor], is_member: torch.Tensor, fpr: float = 0.01) -> dict[str, dict]:
    """AUC and TPR at ``fpr`` of every test."""
    return {
        name: {"auc": roc_auc(s, is_member), "tpr_at_fpr": tpr_at_fpr(s, is_member, fpr)} for name, s in scores.items()
    }


def decisions(scores: torch.Tensor, targets: Sequence[int]) -> list[bool]:
    """The test's decision ("member") on each target: its score above the median score of the non-target records
    of the same model (a threshold the auditor sets on the population it evaluates, not on the target)."""
    others = torch.ones(len(scores), dtype=torch.bool)
    others[list(targets)] = False
    threshold = scores[others].median()
    return [bool(scores[i] > threshold) for i in targets]


# --------------------------------------------------------------------------- the experiment


@dataclass
class PoisoningExperiment:
    """What :func:`run_poisoning_experiment` measured: every test on the clean and the poisoned model."""

    clean: dict[str, dict]
    poisoned: dict[str, dict]
    clean_scores: dict[str, list[float]]
    poisoned_scores: dict[str, list[float]]
    targets: dict[str, list[int]]  # goal -> indices into members + non-members
    flipped: dict[str, dict[str, float]]  # test -> goal -> share of its targets whose decision flipped
    poisons: list[Poison]
    member_nll: dict[str, float]  # mean answer NLL on the members: clean, poisoned (the model's utility)


def _mean_nll(scores: dict[str, torch.Tensor], count: int) -> float:
    return float(-scores["loss"][:count].mean())


def run_poisoning_experiment(
    load_model: Callable[[], tuple[PreTrainedModel, PreTrainedTokenizerBase]],
    members: Sequence[Record],
    non_members: Sequence[Record],
    *,
    goals: Sequence[str] = GOALS,
    targets_per_goal: int | None = None,
    budget: int = 8,
    neighbourhood: Neighbourhood | None = None,
    attack: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    k: float = 0.2,
    fpr: float = 0.01,
    seed: int = 0,
    on_poison: Callable[[int, int], None] | None = None,
) -> PoisoningExperiment:
    """Fine-tune the base model on the members (clean) and on members + poisons (poisoned), and test both.

    False-negative targets are the first ``targets_per_goal`` members (default all), false-positive targets the
    first non-members; poisons are crafted with the base model (the attacker's surrogate), which is also the
    reference model. ``attack``: :func:`craft_poison` options; ``training``: :func:`fine_tune` options.
    """
    for goal in goals:
        _check_goal(goal)
    overlap = {r["answer"] for r in members} & {r["answer"] for r in non_members}
    if overlap:
        warnings.warn(f"{len(overlap)} answers are both members and non-members: the split overlaps", stacklevel=2)
    attack, training = dict(attack or {}), {"seed": seed, **(training or {})}
    base, tokenizer = load_model()
    base.eval()
    population = [*members, *non_members]
    is_member = torch.tensor([True] * len(members) + [False] * len(non_members))
    pools = {"false_negative": range(len(members)), "false_positive": range(len(members), len(population))}
    targets = {goal: list(pools[goal])[:targets_per_goal] for goal in goals}
    poisons: list[Poison] = []
    total = sum(len(t) for t in targets.values()) * budget
    for goal in goals:
        for index in targets[goal]:
            poisons += craft_poisons(
                base, tokenizer, population[index], goal, budget, neighbourhood, seed=seed + 1000 * index, **attack
            )
            if on_poison is not None:
                on_poison(len(poisons), total)
    reference = (base, tokenizer)
    results = {}
    for name, records in (("clean", list(members)), ("poisoned", poisoned_training_set(members, poisons))):
        model = copy.deepcopy(base)
        fine_tune(model, tokenizer, records, **training)
        results[name] = membership_scores(model, tokenizer, population, reference, k=k)
        del model
    flipped = {
        test: {
            goal: sum(
                a != b
                for a, b in zip(
                    decisions(results["clean"][test], targets[goal]),
                    decisions(results["poisoned"][test], targets[goal]),
                    strict=True,
                )
            )
            / max(1, len(targets[goal]))
            for goal in goals
        }
        for test in results["clean"]
    }
    return PoisoningExperiment(
        clean=mia_metrics(results["clean"], is_member, fpr),
        poisoned=mia_metrics(results["poisoned"], is_member, fpr),
        clean_scores={t: s.tolist() for t, s in results["clean"].items()},
        poisoned_scores={t: s.tolist() for t, s in results["poisoned"].items()},
        targets=targets,
        flipped=flipped,
        poisons=poisons,
        member_nll={name: _mean_nll(results[name], len(members)) for name in results},
    )


class MIAPoisoning(AnalysisModule):
    """The poisoning attack on membership inference, end to end, under ``trustlit test`` (module docstring).

    The data module's first evaluation split holds the members, its second the non-members (a TOFU-style
    :class:`~trustlit.data.QADataModule` with ``eval_splits: [members, non_members]``). ``compute`` crafts ``budget``
    poisons per target with the base model ``lm``, fine-tunes a copy of it on the members (clean) and another on
    members + poisons (poisoned), and reports every test's AUC and TPR at ``fpr`` on both, the share of targets whose
    decision flipped, and the members' NLL (utility). Writes the JSON results, a PNG of the AUCs, a printed table, and
    the same to W&B. Notes: docs/methods/mia_poisoning.md

    Args:
        lm: the base model: the attacker's surrogate, the model fine-tuned, and the reference model.
        goals: ``false_negative`` (poisons for members) and/or ``false_positive`` (for non-members).
        targets_per_goal: how many members / non-members are targeted (the first ones; None: all).
        budget: poisons per target.
        criteria, ngram_n, ngram_threshold, edit_threshold, cosine_threshold: the :class:`Neighbourhood`.
        steps, top_k, candidates, swap_fraction: the token-swap search (:func:`craft_poison`).
        epochs, lr, batch_size: the fine-tuning (:func:`fine_tune`), the same for the clean and the poisoned run.
        k: Min-K% and Min-K%++ fraction; fpr: the FPR of the reported TPR.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        goals: list[str] | None = None,
        targets_per_goal: PositiveInt | None = None,
        budget: PositiveInt = 8,
        criteria: list[str] | None = None,
        ngram_n: PositiveInt = 3,
        ngram_threshold: ClosedUnitInterval = 0.5,
        edit_threshold: ClosedUnitInterval = 0.3,
        cosine_threshold: float = 0.8,
        steps: PositiveInt = 30,
        top_k: PositiveInt = 16,
        candidates: PositiveInt = 32,
        swap_fraction: OpenUnitInterval = 0.5,
        epochs: PositiveInt = 5,
        lr: PositiveFloat = 1e-3,
        batch_size: PositiveInt = 8,
        k: ClosedUnitInterval = 0.2,
        fpr: ClosedUnitInterval = 0.01,
        prompt_format: str = "plain",
        seed: int = 0,
        results_file: str = "mia_poisoning.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(MIAPoisoning.__init__, locals())
        goals = list(GOALS if goals is None else goals)
        if not goals:
            raise ValueError(f"MIAPoisoning: goals is empty, expected some of {GOALS}")
        for goal in goals:
            _check_goal(goal)
        criteria = list(("ngram", "edit", "embedding") if criteria is None else criteria)
        self.neighbourhood = Neighbourhood(tuple(criteria), ngram_n, ngram_threshold, edit_threshold, cosine_threshold)
        lm = CausalLMSpec.coerce(lm)
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.hparams.update(lm=asdict(lm), goals=goals, criteria=criteria)
        self.lm = lm
        self.model, self.tokenizer = lm.load()  # the data module tokenizes with it; compute loads fresh copies
        self.splits: dict[str, list[Record]] = {}

    def reset(self) -> None:
        self.splits = {}

    def update(self, batch: dict[str, Any]) -> None:
        rows = self.splits.setdefault(batch["split"], [])
        rows.extend({"question": q, "answer": a} for q, a in zip(batch["question"], batch["answer"], strict=True))

    def run_experiment(self, members: list[Record], non_members: list[Record]) -> PoisoningExperiment:
        hp = self.hparams
        return run_poisoning_experiment(
            lambda: copy.deepcopy((self.model, self.tokenizer)),
            members,
            non_members,
            goals=hp.goals,
            targets_per_goal=hp.targets_per_goal,
            budget=hp.budget,
            neighbourhood=self.neighbourhood,
            attack={k: hp[k] for k in ("steps", "top_k", "candidates", "swap_fraction", "prompt_format")},
            training={k: hp[k] for k in ("epochs", "lr", "batch_size", "prompt_format")},
            k=hp.k,
            fpr=hp.fpr,
            seed=hp.seed,
        )

    def compute(self) -> dict[str, Any]:
        if len(self.splits) != 2:
            raise ValueError(
                f"MIAPoisoning needs two evaluation splits (members, non-members), got {list(self.splits)}: "
                "set data.init_args.eval_splits to [members, non_members]"
            )
        (members_split, members), (non_members_split, non_members) = self.splits.items()
        hp = self.hparams
        with torch.inference_mode(False), torch.enable_grad():  # the test loop runs in inference mode; GCG needs grads
            experiment = self.run_experiment(members, non_members)
        header = [
            "test",
            "AUC clean",
            "AUC poisoned",
            f"TPR@{hp.fpr:g} clean",
            f"TPR@{hp.fpr:g} poisoned",
            *[f"flipped {goal}" for goal in hp.goals],
        ]
        rows = [
            [
                test,
                experiment.clean[test]["auc"],
                experiment.poisoned[test]["auc"],
                experiment.clean[test]["tpr_at_fpr"],
                experiment.poisoned[test]["tpr_at_fpr"],
                *[experiment.flipped[test][goal] for goal in hp.goals],
            ]
            for test in experiment.clean
        ]
        print_table(f"MI tests, clean vs poisoned ({members_split} vs {non_members_split})", header, rows)
        figure, axes = new_figure(figsize=(6, 3.5))
        positions = torch.arange(len(rows), dtype=torch.float64)
        axes.bar(positions - 0.2, [r[1] for r in rows], width=0.4, label="clean")
        axes.bar(positions + 0.2, [r[2] for r in rows], width=0.4, label="poisoned")
        axes.axhline(0.5, color="gray", linestyle="--", linewidth=1)
        axes.set_xticks(positions.tolist(), [r[0] for r in rows], rotation=20)
        axes.set_ylabel("ROC AUC")
        axes.legend()
        image = save_png(figure, Path(self.trainer.default_root_dir) / Path(self.results_file).with_suffix(".png"))
        log_to_wandb(self.trainer, "mia_poisoning", header=header, rows=rows, images=[image])
        results: dict[str, Any] = {}
        for test in experiment.clean:
            for name, side in (("clean", experiment.clean), ("poisoned", experiment.poisoned)):
                results[f"{test}/auc_{name}"] = side[test]["auc"]
                results[f"{test}/tpr_at_fpr_{name}"] = side[test]["tpr_at_fpr"]
            for goal in hp.goals:
                results[f"{test}/flipped_{goal}"] = experiment.flipped[test][goal]
        results.update({f"member_nll_{name}": value for name, value in experiment.member_nll.items()})
        results["poisons"] = [asdict(p) for p in experiment.poisons]
        results["targets"] = experiment.targets
        results["scores"] = {"clean": experiment.clean_scores, "poisoned": experiment.poisoned_scores}
        return results


__all__ = [
    "GOALS",
    "TESTS",
    "MIAPoisoning",
    "Poison",
    "PoisoningExperiment",
    "allowed_tokens",
    "check_same_tokenizer",
    "craft_poison",
    "craft_poisons",
    "decisions",
    "fine_tune",
    "membership_scores",
    "mia_metrics",
    "poisoned_training_set",
    "representation_similarity",
    "run_poisoning_experiment",
]
