"""PoisonM: dataset poisoning that discredits membership-inference tests under relaxed membership.

Mangaokar et al., "What Really is a Member? Discrediting Membership Inference via Poisoning" (NeurIPS 2025,
arXiv 2506.06003). Membership is neighbourhood-based (:mod:`trustlit.audit.neighbourhood`): x ∈ N_r D iff some
d ∈ D lies in N_r(x). The adversary *substitutes* training points (Definition 4.2) without changing the target's
label, so the test's prediction flips while the ground truth does not (Section 5, Algorithm 1, Appendix C):

- false negative, member x_t: its neighbour in D (x_t itself, budget b1 = 1) is replaced by a *poisoned
  neighbour*, an auxiliary non-neighbour x_sample moved just inside N(x_t): n-gram, the shortest-in-characters
  k-gram of x_t injected at a random index; embedding, token swaps maximising ``cos(E(p), E(x_t))`` until >= c;
  edit distance, random character insertions / deletions / substitutions kept when they lower the distance,
  until <= l; exact match, none exists. x_t stays a member, but the model never sees it.
- false positive, non-member x_t: b2 = 10 background points (non-neighbours) are replaced by *poisoned
  non-neighbours*, each from x_sample = x_t by greedy coordinate swaps: a uniformly random answer position i gets
  the token minimising

      L(p) = -cos(f(p), f(x_t)) + lambda * m(p, x_t),

  with f the last-layer activations of the model to be fine-tuned (here: the answer positions' hidden states,
  concatenated) and m the neighbourhood's measure (n-gram: lambda = 0; embedding: ``cos(E(p), E(x_t))``,
  lambda = 1.5; edit: ``-lev / (|p| + |x_t|)``, lambda = 1.5), repeated *while p ∈ N(x_t)* (exact match: one
  swap). Every poison is checked outside N(x_t) on its decoded text, so it lies outside by construction.

Theorem 5.1: ``Adv(T) + Adv_robust(T) <= delta*``, with ``Adv = E[T | member] - E[T | non-member]`` (Lemma 3.5,
Youden's J integrated over the threshold) on the clean and on the poisoned model, and delta* the expected mapping
error ``|T(x_t; L(D_poisoned)) - T(x_t; L(D_ideal))|``, D_ideal holding x_sample where D_poisoned holds the poison.

Ours (the paper leaves them open): candidate tokens are the ``top_k`` of the GCG gradient (Zou et al. 2023) of the
activation cosine, not the whole vocabulary; the poisons of a QA record keep its question (x_t's for poisoned
non-neighbours, the auxiliary record's for poisoned neighbours); lambda's sign follows the prose (penalise
embedding similarity, reward edit distance) where Table 1 and Appendix C disagree. Notes: docs/methods/mia_poisoning.md
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trustlit.analysis import AnalysisModule
from trustlit.audit.mia import roc_auc, split_scores, tpr_at_fpr
from trustlit.audit.neighbourhood import KINDS, Neighbourhood, edit_distance, embedding_cosine
from trustlit.figures import log_to_wandb, new_figure, print_table, save_png
from trustlit.hparams import (
    ClosedUnitInterval,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.prompts import encode_qa, stop_token_ids
from trustlit.llm.scoring import answer_nll, batches, encode_pairs, evaluating, model_device

Record = dict[str, str]
LAMBDA = {"ngram": 0.0, "embedding": 1.5, "edit": 1.5, "exact": 0.0}  # Appendix C
NON_NEIGHBOUR_BUDGET = 10  # b2, Section 6.1
RUNS = ("clean", "poisoned", "ideal")


@dataclass
class Poison:
    """One poison: the record trained on, the target it serves, and its search (activation cosine, swaps)."""

    question: str
    answer: str
    target: str  # the target's answer text
    kind: str  # "neighbour" (false negative) or "non_neighbour" (false positive)
    similarity: float = float("nan")  # cos(f(p), f(x_t)) at the end (non-neighbours)
    steps: int = 0
    history: list[float] = field(default_factory=list)

    def record(self) -> Record:
        return {"question": self.question, "answer": self.answer}


def _check_positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is invalid, expected an integer >= 1")


# --------------------------------------------------------------------------- activations f(x)


def answer_activations(model: PreTrainedModel, embeds: torch.Tensor, answer: slice) -> torch.Tensor:
    """f [C, T*H]: the last hidden layer at the answer positions, concatenated, from input embeddings [C, L, H]."""
    mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
    hidden = model(inputs_embeds=embeds, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
    return hidden[:, answer].float().flatten(1)


def activation_cosine(model: PreTrainedModel, ids: torch.Tensor, answer: slice, anchor: torch.Tensor) -> torch.Tensor:
    """``cos(f(ids_c), anchor)`` [C] for token rows ``ids`` [C, L], without gradients."""
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        return F.cosine_similarity(answer_activations(model, embeds, answer), anchor[None], dim=-1)


def swap_gradient(model: PreTrainedModel, ids: torch.Tensor, answer: slice, anchor: torch.Tensor) -> torch.Tensor:
    """d cos(f, anchor) / d one-hot [T, V] over the answer positions of one row ``ids`` [L] (GCG's linearisation)."""
    weight = model.get_input_embeddings().weight
    one_hot = F.one_hot(ids[answer], weight.size(0)).to(weight.dtype).requires_grad_(True)
    embeds = model.get_input_embeddings()(ids[None]).detach()
    embeds = torch.cat([embeds[:, : answer.start], (one_hot @ weight)[None], embeds[:, answer.stop :]], 1)
    similarity = F.cosine_similarity(answer_activations(model, embeds, answer), anchor[None], dim=-1)[0]
    (gradient,) = torch.autograd.grad(similarity, one_hot)
    return gradient


def allowed_tokens(tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> torch.Tensor:
    """Bool [V]: token ids a poison may use (every id but the special tokens and ids beyond the tokenizer)."""
    allowed = torch.zeros(vocab_size, dtype=torch.bool)
    allowed[: min(vocab_size, len(tokenizer))] = True
    allowed[[i for i in tokenizer.all_special_ids if i < vocab_size]] = False
    return allowed


def _answer_row(
    tokenizer: PreTrainedTokenizerBase, question: str, answer: str, prompt_format: str, device: torch.device
) -> tuple[torch.Tensor, slice]:
    """(token row [L], the answer's positions without its end-of-answer token)."""
    encoded = encode_qa(tokenizer, question, answer, prompt_format, max_length=10**6)
    ids = torch.tensor(encoded["input_ids"], device=device)
    start, stop = len(encoded["prompt_ids"]), len(encoded["input_ids"])
    while stop > start and int(ids[stop - 1]) in stop_token_ids(tokenizer):
        stop -= 1
    if stop <= start:
        raise ValueError(f"answer={answer!r} has no tokens to swap")
    return ids, slice(start, stop)


# --------------------------------------------------------------------------- poisoned non-neighbours (false positives)


def _penalty(neighbourhood: Neighbourhood, target: str, texts: list[str]) -> torch.Tensor:
    """m(p, x_t) of Appendix C per candidate: the neighbourhood's own measure, signed to grow towards x_t (embedding
    cosine, minus the edit distance); zeros where lambda = 0 (n-gram, exact)."""
    if LAMBDA[neighbourhood.kind] == 0:
        return torch.zeros(len(texts))
    sign = -1.0 if neighbourhood.kind == "edit" else 1.0
    return sign * torch.from_numpy(neighbourhood.measures(target, texts)).float()


def poison_non_neighbour(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    question: str,
    answer: str,
    neighbourhood: Neighbourhood | None = None,
    *,
    top_k: int | None = 64,
    max_steps: int = 200,
    prompt_format: str = "plain",
    seed: int = 0,
) -> Poison:
    """A poisoned non-neighbour of the target (question, answer): Algorithm 1 from x_sample = x_t (module docstring).

    ``top_k``: candidate tokens per swap, the best by the GCG gradient (None: every allowed token). Raises when
    ``max_steps`` swaps leave the poison inside N(x_t): a returned poison is never a neighbour.
    """
    neighbourhood = neighbourhood or Neighbourhood()
    _check_positive_int(max_steps, "max_steps")
    if top_k is not None:
        _check_positive_int(top_k, "top_k")
    rng = random.Random(seed)
    weight = model.get_input_embeddings().weight
    allowed = allowed_tokens(tokenizer, weight.size(0))
    pool = allowed.nonzero().flatten()
    history: list[float] = []
    with evaluating(model):
        row, span = _answer_row(tokenizer, question, answer, prompt_format, weight.device)
        with torch.no_grad():
            anchor = answer_activations(model, model.get_input_embeddings()(row[None]), span)[0]
        text = answer
        for step in range(1, max_steps + 1):
            position = span.start + rng.randrange(span.stop - span.start)
            current = int(row[position])
            if top_k is None:
                tokens = pool[pool != current]
            else:
                with torch.enable_grad():
                    gradient = swap_gradient(model, row, span, anchor)[position - span.start].cpu().float()
                gradient = gradient.masked_fill(~allowed, -float("inf"))
                gradient[current] = -float("inf")
                tokens = gradient.topk(min(top_k, int(allowed.sum()) - 1)).indices
            rows = row[None].repeat(len(tokens), 1)
            rows[:, position] = tokens.to(rows.device)
            similarity = activation_cosine(model, rows, span, anchor).cpu()
            texts = tokenizer.batch_decode(rows[:, span].tolist(), skip_special_tokens=True)
            loss = -similarity + LAMBDA[neighbourhood.kind] * _penalty(neighbourhood, answer, texts)
            best = int(loss.argmin())
            row, text = rows[best], texts[best]
            history.append(float(similarity[best]))
            if not neighbourhood.contains(answer, text):
                return Poison(question, text, answer, "non_neighbour", history[-1], step, history)
    raise ValueError(
        f"no poisoned non-neighbour of answer={answer[:60]!r} within max_steps={max_steps} swaps: raise max_steps"
    )


# --------------------------------------------------------------------------- poisoned neighbours (false negatives)


def _inject_ngram(neighbourhood: Neighbourhood, target: str, start: str, rng: random.Random) -> str:
    """The shortest-in-characters k-gram of the target injected into ``start`` at a random token index."""
    tokens = neighbourhood.tokens(target)
    grams = [tokens[i : i + neighbourhood.k] for i in range(len(tokens) - neighbourhood.k + 1)]
    if not grams:
        raise ValueError(f"answer={target[:60]!r} has fewer than k={neighbourhood.k} tokens: no n-gram neighbour")
    tokenizer = neighbourhood.tokenizer

    def text(seq: list[Any]) -> str:
        return " ".join(seq) if tokenizer is None else tokenizer.decode(seq, skip_special_tokens=True)

    gram = min(grams, key=lambda g: len(text(g)))
    base = neighbourhood.tokens(start)
    indices = list(range(len(base) + 1))
    rng.shuffle(indices)
    for index in indices:  # a subword tokenizer may merge across the seam: try the next index
        candidate = text(base[:index] + gram + base[index:])
        if neighbourhood.contains(target, candidate):
            return candidate
    raise ValueError(f"injecting a {neighbourhood.k}-gram of answer={target[:60]!r} never made a neighbour")


def _embedding_neighbour(
    neighbourhood: Neighbourhood,
    tokenizer: PreTrainedTokenizerBase,
    target: str,
    start: str,
    rng: random.Random,
    max_steps: int,
    candidates: int,
) -> str:
    """Token swaps maximising ``cos(E(p), E(x_t))`` until >= c; candidates: the target's tokens and random ones."""
    ids = list(tokenizer(start, add_special_tokens=False)["input_ids"])
    own = sorted(set(tokenizer(target, add_special_tokens=False)["input_ids"]))
    pool = allowed_tokens(tokenizer, len(tokenizer)).nonzero().flatten().tolist()
    for _ in range(max_steps):
        position = rng.randrange(len(ids))
        tokens = own + rng.sample(pool, min(candidates, len(pool)))
        rows = [[*ids[:position], t, *ids[position + 1 :]] for t in tokens]
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
        cosines = embedding_cosine(target, texts)
        best = int(cosines.argmax())
        ids[position] = tokens[best]
        if cosines[best] >= neighbourhood.cosine:
            return texts[best]
    raise ValueError(f"no embedding neighbour of answer={target[:60]!r} within max_steps={max_steps}: raise it")


def _edit_neighbour(neighbourhood: Neighbourhood, target: str, start: str, rng: random.Random, max_steps: int) -> str:
    """Random character edits (characters drawn from the target) kept when they lower the distance, until <= l."""
    text, distance = start, edit_distance(target, start)
    for _ in range(max_steps):
        if distance <= neighbourhood.edit:
            return text
        i, char, op = rng.randrange(len(text) + 1), rng.choice(target), rng.choice(("insert", "delete", "substitute"))
        if op == "insert":
            mutated = text[:i] + char + text[i:]
        elif i < len(text):
            mutated = text[:i] + ("" if op == "delete" else char) + text[i + 1 :]
        else:
            continue
        if (value := edit_distance(target, mutated)) < distance:
            text, distance = mutated, value
    if distance <= neighbourhood.edit:
        return text
    raise ValueError(f"no edit-distance neighbour of answer={target[:60]!r} within max_steps={max_steps}: raise it")


def poison_neighbour(
    target: str,
    auxiliary: Record,
    neighbourhood: Neighbourhood | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    *,
    max_steps: int = 300,
    candidates: int = 32,
    seed: int = 0,
) -> Poison:
    """A poisoned neighbour of ``target`` from an auxiliary non-neighbour record (Appendix C; module docstring).

    ``tokenizer``: the model's, for the embedding neighbourhood's token swaps.
    """
    neighbourhood = neighbourhood or Neighbourhood()
    if neighbourhood.contains(target, auxiliary["answer"]):
        raise ValueError(f"auxiliary answer {auxiliary['answer'][:60]!r} is already a neighbour of the target")
    rng = random.Random(seed)
    if neighbourhood.kind == "exact":
        raise ValueError("kind='exact' has no poisoned neighbours: its neighbourhood is the target alone")
    if neighbourhood.kind == "ngram":
        text = _inject_ngram(neighbourhood, target, auxiliary["answer"], rng)
    elif neighbourhood.kind == "embedding":
        if tokenizer is None:
            raise ValueError("kind='embedding' needs the model's tokenizer for its token swaps")
        text = _embedding_neighbour(neighbourhood, tokenizer, target, auxiliary["answer"], rng, max_steps, candidates)
    else:
        text = _edit_neighbour(neighbourhood, target, auxiliary["answer"], rng, max_steps)
    return Poison(auxiliary["question"], text, target, "neighbour")


# --------------------------------------------------------------------------- the poisoned dataset


@dataclass
class PoisonedData:
    """The clean, poisoned and ideal (delta* = 0) training sets of one experiment and what was targeted.

    Population: members then non-members. ``false_negatives`` / ``false_positives``: population indices targeted.
    """

    clean: list[Record]
    poisoned: list[Record]
    ideal: list[Record]
    poisons: list[Poison]
    false_negatives: list[int]
    false_positives: list[int]
    skipped: dict[str, str]  # target answer -> why it got no poison


def qa_records(rows: Sequence[Record]) -> list[Record]:
    """The rows' question and answer only (the fields a fine-tune and a neighbourhood read)."""
    return [{"question": r["question"], "answer": r["answer"]} for r in rows]


def clean_set(background: Sequence[Record], members: Sequence[Record]) -> list[Record]:
    """D = background + members (Section 6.1), the clean training set that :func:`build_poisoned_data` poisons."""
    return qa_records(background) + qa_records(members)


def build_poisoned_data(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    background: Sequence[Record],
    members: Sequence[Record],
    non_members: Sequence[Record],
    auxiliary: Sequence[Record],
    neighbourhood: Neighbourhood | None = None,
    *,
    non_neighbour_budget: int = NON_NEIGHBOUR_BUDGET,
    false_negatives: bool = True,
    false_positives: bool = True,
    attack: dict[str, Any] | None = None,
    seed: int = 0,
) -> PoisonedData:
    """Section 6.1's single poisoned dataset: D = background + members; every member's record becomes a poisoned
    neighbour (b1 = 1, from the next auxiliary non-neighbour), and for every non-member (by the neighbourhood) b2
    background records become poisoned non-neighbours. The ideal set holds x_sample instead of each poison
    (the auxiliary record; x_t itself). ``attack``: :func:`poison_non_neighbour` options."""
    neighbourhood = neighbourhood or Neighbourhood()
    _check_positive_int(non_neighbour_budget, "non_neighbour_budget")
    clean = clean_set(background, members)
    background, members, non_members = qa_records(background), qa_records(members), qa_records(non_members)
    poisoned, ideal = list(clean), list(clean)
    poisons: list[Poison] = []
    skipped: dict[str, str] = {}
    fn_targets: list[int] = []
    if false_negatives:
        spare = qa_records(auxiliary)
        for index, member in enumerate(members):
            source = next((a for a in spare if not neighbourhood.contains(member["answer"], a["answer"])), None)
            try:
                if source is None:
                    raise ValueError("no auxiliary non-neighbour left")
                poison = poison_neighbour(member["answer"], source, neighbourhood, tokenizer, seed=seed + index)
            except ValueError as error:
                skipped[member["answer"]] = str(error)
                continue
            spare.remove(source)
            slot = len(background) + index
            poisoned[slot], ideal[slot] = poison.record(), source
            poisons.append(poison)
            fn_targets.append(index)
    fp_targets: list[int] = []
    if false_positives:
        labels = neighbourhood.members([r["answer"] for r in non_members], [r["answer"] for r in clean])
        slots = iter(range(len(background)))  # background slots: non-neighbours of every non-member target
        for index, target in enumerate(non_members):
            if labels[index]:
                continue  # a training text is its neighbour: a member, not a false-positive target
            chosen = [next(slots, None) for _ in range(non_neighbour_budget)]
            if None in chosen:
                raise ValueError(
                    f"background has {len(background)} records, too few for {non_neighbour_budget} poisons per "
                    "non-member: give more background or a smaller non_neighbour_budget"
                )
            for b, slot in enumerate(chosen):
                poison = poison_non_neighbour(
                    model, tokenizer, target["question"], target["answer"], neighbourhood,
                    seed=seed + 1000 * index + b, **(attack or {}),
                )  # fmt: skip
                poisoned[slot], ideal[slot] = poison.record(), target
                poisons.append(poison)
            fp_targets.append(len(members) + index)
    return PoisonedData(clean, poisoned, ideal, poisons, fn_targets, fp_targets, skipped)


# --------------------------------------------------------------------------- training, testing, the trade-off


def fine_tune(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    records: Sequence[Record],
    *,
    epochs: int = 1,
    lr: float = 1e-3,
    batch_size: int = 16,
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
    reference: PreTrainedModel | None = None,
    *,
    k: float = 0.2,
    prompt_format: str = "plain",
    max_length: int = 256,
    batch_size: int = 16,
) -> dict[str, torch.Tensor]:
    """Every :mod:`trustlit.audit.mia` test's scores [N] (higher = member) on the answers of ``records``."""
    samples = encode_pairs(
        tokenizer, [r["question"] for r in records], [r["answer"] for r in records], prompt_format, max_length
    )
    return split_scores(model, tokenizer, samples, batch_size, k, reference)


def advantage(scores: torch.Tensor, is_member: torch.Tensor) -> float:
    """Lemma 3.5: ``E[T | member] - E[T | non-member]``, Youden's J integrated over the threshold."""
    scores, is_member = torch.as_tensor(scores, dtype=torch.float64), torch.as_tensor(is_member, dtype=torch.bool)
    return float(scores[is_member].mean() - scores[~is_member].mean())


def mapping_error(poisoned: torch.Tensor, ideal: torch.Tensor, targets: Sequence[int]) -> float:
    """delta: mean ``|T(x_t; poisoned model) - T(x_t; ideal model)|`` over the targets (0 without targets)."""
    if not targets:
        return 0.0
    index = torch.tensor(list(targets))
    return float((torch.as_tensor(poisoned)[index] - torch.as_tensor(ideal)[index]).abs().mean())


def decisions(scores: torch.Tensor, targets: Sequence[int]) -> list[bool]:
    """The test's decision ("member") on each target: its score above the median score of the non-target records
    of the same model (a threshold the auditor sets on the population it evaluates, not on the target)."""
    others = torch.ones(len(scores), dtype=torch.bool)
    others[list(targets)] = False
    threshold = scores[others].median()
    return [bool(scores[i] > threshold) for i in targets]


def evaluate_runs(
    scores: dict[str, dict[str, torch.Tensor]],
    labels: dict[str, torch.Tensor],
    data: PoisonedData,
    fpr: float = 0.01,
) -> dict[str, dict[str, float]]:
    """Per test: AUC and TPR@fpr clean / poisoned (each with its own training set's labels), the advantages,
    the mapping errors on the false-negative and false-positive targets, and Theorem 5.1's two sides."""
    metrics = {}
    for test in scores["clean"]:
        clean, poisoned = scores["clean"][test], scores["poisoned"][test]
        row = {
            "auc_clean": roc_auc(clean, labels["clean"]),
            "auc_poisoned": roc_auc(poisoned, labels["poisoned"]),
            "tpr_clean": tpr_at_fpr(clean, labels["clean"], fpr),
            "tpr_poisoned": tpr_at_fpr(poisoned, labels["poisoned"], fpr),
            "advantage_clean": advantage(clean, labels["clean"]),
            "advantage_poisoned": advantage(poisoned, labels["poisoned"]),
        }
        if "ideal" in scores:
            row["delta_fn"] = mapping_error(poisoned, scores["ideal"][test], data.false_negatives)
            row["delta_fp"] = mapping_error(poisoned, scores["ideal"][test], data.false_positives)
            row["delta"] = row["delta_fn"] + row["delta_fp"]
        row["advantage_sum"] = row["advantage_clean"] + row["advantage_poisoned"]
        metrics[test] = row
    return metrics


def run_poisoning_experiment(
    base: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    background: Sequence[Record],
    members: Sequence[Record],
    non_members: Sequence[Record],
    auxiliary: Sequence[Record],
    neighbourhood: Neighbourhood | None = None,
    *,
    non_neighbour_budget: int = NON_NEIGHBOUR_BUDGET,
    attack: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    k: float = 0.2,
    fpr: float = 0.01,
    seed: int = 0,
) -> tuple[PoisonedData, dict[str, dict[str, torch.Tensor]], dict[str, torch.Tensor], dict[str, dict[str, float]]]:
    """Poison, fine-tune copies of ``base`` on the clean, poisoned and ideal sets, and test each.

    The base model is the attacker's activation model and the reference test's reference. Returns the data, the
    scores per run and test, the labels per run (``x ∈ N_r D`` of that run's training set) and the metrics.
    """
    neighbourhood = neighbourhood or Neighbourhood()
    base.eval()
    data = build_poisoned_data(
        base, tokenizer, background, members, non_members, auxiliary, neighbourhood,
        non_neighbour_budget=non_neighbour_budget, attack=attack, seed=seed,
    )  # fmt: skip
    population = qa_records([*members, *non_members])
    texts = [r["answer"] for r in population]
    sets = {"clean": data.clean, "poisoned": data.poisoned, "ideal": data.ideal}
    labels = {name: torch.from_numpy(neighbourhood.members(texts, [r["answer"] for r in sets[name]])) for name in sets}
    scores = {}
    for name, records in sets.items():
        model = copy.deepcopy(base)
        fine_tune(model, tokenizer, records, seed=seed, **(training or {}))
        scores[name] = membership_scores(model, tokenizer, population, base, k=k)
        del model
    return data, scores, labels, evaluate_runs(scores, labels, data, fpr)


# --------------------------------------------------------------------------- under `trustlit test`


class MIAPoisoning(AnalysisModule):
    """PoisonM end to end under ``trustlit test`` (module docstring; Section 6.1's protocol at a small scale).

    The data module's first evaluation split is the training pool: its first ``canaries`` records are the member
    canaries, the next ``canaries`` the auxiliary texts of the poisoned neighbours, the rest the background. The
    first ``canaries`` records of the second split are the held-out canaries. ``compute`` builds the poisoned set
    (:func:`build_poisoned_data`), fine-tunes copies of ``lm`` on the clean, poisoned and ideal sets and reports each
    test's AUC and TPR at ``fpr`` (clean vs poisoned), the advantages and mapping errors of Theorem 5.1. Writes the
    JSON results, a PNG of the AUCs, a printed table, and the same to W&B. Notes: docs/methods/mia_poisoning.md

    Args:
        lm: the base model: the attacker's activation model, the model fine-tuned, and the reference model.
        canaries: member and held-out canaries (each).
        kind, k, cosine, edit: the :class:`Neighbourhood` (the paper's 7-grams, 0.9, 0.48).
        non_neighbour_budget: b2, poisons per non-member (the paper's 10); b1 = 1 per member.
        top_k, max_steps: the token-swap search (:func:`poison_non_neighbour`).
        epochs, lr, batch_size: the fine-tuning (:func:`fine_tune`; the paper: 1 epoch, batch 16).
        mia_k: Min-K% and Min-K%++ fraction; fpr: the FPR of the reported TPR.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        canaries: PositiveInt = 9,
        kind: str = "ngram",
        k: PositiveInt = 7,
        cosine: float = 0.9,
        edit: ClosedUnitInterval = 0.48,
        non_neighbour_budget: PositiveInt = NON_NEIGHBOUR_BUDGET,
        top_k: PositiveInt = 64,
        max_steps: PositiveInt = 200,
        epochs: PositiveInt = 1,
        lr: PositiveFloat = 1e-3,
        batch_size: PositiveInt = 16,
        mia_k: ClosedUnitInterval = 0.2,
        fpr: ClosedUnitInterval = 0.01,
        prompt_format: str = "plain",
        seed: NonNegativeInt = 0,
        results_file: str = "mia_poisoning.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(MIAPoisoning.__init__, locals())
        if kind not in KINDS:
            raise ValueError(f"MIAPoisoning: kind={kind!r} is invalid, expected one of {KINDS}")
        self.neighbourhood = Neighbourhood(kind, k, cosine, edit)
        lm = CausalLMSpec.coerce(lm)
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.hparams.update(lm=asdict(lm))
        self.model, self.tokenizer = lm.load()  # the data module tokenizes with it; compute fine-tunes copies
        self.splits: dict[str, list[Record]] = {}

    def reset(self) -> None:
        self.splits = {}

    def update(self, batch: dict[str, Any]) -> None:
        rows = self.splits.setdefault(batch["split"], [])
        rows.extend({"question": q, "answer": a} for q, a in zip(batch["question"], batch["answer"], strict=True))

    def compute(self) -> dict[str, Any]:
        hp = self.hparams
        if len(self.splits) != 2:
            raise ValueError(
                f"MIAPoisoning needs two evaluation splits (training pool, held-out), got {list(self.splits)}: "
                "set data.init_args.eval_splits to two splits"
            )
        (pool_name, pool), (held_name, held) = self.splits.items()
        n = hp.canaries
        if len(pool) < 2 * n + 1 or len(held) < n:
            raise ValueError(
                f"MIAPoisoning: canaries={n} needs >= {2 * n + 1} records in {pool_name} (got {len(pool)}) and "
                f">= {n} in {held_name} (got {len(held)})"
            )
        members, auxiliary, background, non_members = pool[:n], pool[n : 2 * n], pool[2 * n :], held[:n]
        with torch.inference_mode(False), torch.enable_grad():  # the test loop runs in inference mode; GCG needs grads
            data, scores, labels, metrics = run_poisoning_experiment(
                self.model, self.tokenizer, background, members, non_members, auxiliary,
                self.neighbourhood, non_neighbour_budget=hp.non_neighbour_budget,
                attack={"top_k": hp.top_k, "max_steps": hp.max_steps, "prompt_format": hp.prompt_format},
                training={k: hp[k] for k in ("epochs", "lr", "batch_size", "prompt_format")},
                k=hp.mia_k, fpr=hp.fpr, seed=hp.seed,
            )  # fmt: skip
        header = ["test", "AUC clean", "AUC poisoned", f"TPR@{hp.fpr:g} clean", f"TPR@{hp.fpr:g} poisoned",
                  "Adv clean + poisoned", "delta"]  # fmt: skip
        rows = [
            [test, m["auc_clean"], m["auc_poisoned"], m["tpr_clean"], m["tpr_poisoned"], m["advantage_sum"], m["delta"]]
            for test, m in metrics.items()
        ]
        print_table(f"PoisonM ({self.neighbourhood.kind}): MI tests, clean vs poisoned", header, rows)
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
        results: dict[str, Any] = {f"{test}/{name}": value for test, m in metrics.items() for name, value in m.items()}
        results.update(
            false_negative_targets=len(data.false_negatives),
            false_positive_targets=len(data.false_positives),
            members_clean=int(labels["clean"].sum()),
            members_poisoned=int(labels["poisoned"].sum()),
            labels_changed=int((labels["clean"] != labels["poisoned"]).sum()),
            poisons=[asdict(p) for p in data.poisons],
            skipped=data.skipped,
            scores={run: {t: s.tolist() for t, s in scores[run].items()} for run in RUNS},
        )
        return results


__all__ = [
    "LAMBDA",
    "NON_NEIGHBOUR_BUDGET",
    "MIAPoisoning",
    "Poison",
    "PoisonedData",
    "activation_cosine",
    "advantage",
    "allowed_tokens",
    "build_poisoned_data",
    "decisions",
    "evaluate_runs",
    "fine_tune",
    "mapping_error",
    "membership_scores",
    "poison_neighbour",
    "poison_non_neighbour",
    "run_poisoning_experiment",
]
