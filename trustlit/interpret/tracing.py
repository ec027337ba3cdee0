"""Hallucination source tracing: Subsequence Association Tracing (SAT).

Sun, Gai, Chen, Ravichander, Choi, Song, "Why and How LLMs Hallucinate: Connecting the Dots with
Subsequence Associations", NeurIPS 2025 (arXiv 2504.12691); released code: github.com/sunyiyou/SAT.

A hallucination y_h arises when an association s -> y_h of a subsequence s of the prompt x outweighs
the faithful one. SAT looks for the s that makes y_h likely whatever surrounds it:

1. Sample N perturbed prompts x'_1..x'_N of the prompt tokens x = (x_1..x_L): each token is kept with
   probability 1 - rho, else replaced (in place, so positions stay) by a uniformly random token or by
   one of its top-k neighbours in the input-embedding space (cosine similarity). The chat template
   around the prompt is kept.
2. p_n = P(y_h | x'_n), the teacher-forced probability of the target tokens (one batched forward pass).
3. Score a subsequence s (ordered, not necessarily contiguous) of x by the hallucination probability
   given that s occurs in the context,

       score(s) = P^(y_h | s ⊑ x') = sum_n 1[s ⊑ x'_n] p_n / sum_n 1[s ⊑ x'_n],

   where s ⊑ x' means the tokens of s occur in x' in this order (the released code's ``is_subsequence``);
   a subsequence present in no perturbed prompt scores 0.
4. Grow subsequences by beam search: level 1 scores every token of x, level k+1 inserts one more position
   of x into each of the ``beam_width`` best subsequences of level k, up to ``max_length`` tokens
   (default ceil(0.9 L), the released ``max_subseq_len_rate``). Every scored subsequence is returned,
   ranked by score.

Defaults are the released code's: N = 1024, rho = 0.5, top-50 neighbours, beam width 20. Where we
differ (the probability p_n in place of a sampled generation containing y_h; independent Bernoulli
masking in place of the released ``rgrand`` count sampling; no part-of-speech filter on neighbours)
is written in Notes: docs/methods/subsequence_association_tracing.md

``trace_subsequences`` is the pure function; :class:`SubsequenceTracing` runs it under ``trustlit test``
over the (question, answer) pairs of a QA data module and writes the ranked subsequences to its results JSON.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trustlit.analysis import AnalysisModule
from trustlit.hparams import ClosedUnitInterval, NonNegativeInt, PositiveInt, check_arguments, plain_numbers
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.prompts import IGNORE_INDEX, PromptFormat, format_qa, resolve_prompt_format
from trustlit.llm.scoring import batches, evaluating, model_device, sequence_logprobs

Replacement = Literal["neighbours", "random"]
TargetSource = Literal["answer", "greedy"]
_PLACEHOLDER = "<<trustlit-prompt>>"
# The keywords of trace() that SubsequenceTracing passes on from its hyperparameters (seed: per prompt).
TRACE_OPTIONS = (
    "num_samples",
    "rho",
    "replacement",
    "top_neighbours",
    "beam_width",
    "max_length",
    "batch_size",
    "prompt_format",
)


@dataclass(frozen=True)
class TracedSubsequence:
    """One ranked subsequence of the prompt: ``positions`` index the prompt's tokens (sorted, maybe with gaps).

    Iterates as ``(positions, score)``, the pairs of the public API: ``for span, score in trace_subsequences(...)``.
    ``support`` is how many perturbed prompts contain it (None for spans ranked from per-token scores).
    """

    positions: tuple[int, ...]
    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    score: float
    support: int | None = None

    def __iter__(self) -> Iterator[Any]:
        yield self.positions
        yield self.score

    @property
    def text(self) -> str:
        """The tokens joined, with `` … `` where the subsequence skips prompt tokens."""
        pieces = [self.tokens[0]] if self.tokens else []
        for previous, position, token in zip(self.positions, self.positions[1:], self.tokens[1:], strict=False):
            pieces.append(token if position == previous + 1 else " … " + token)
        return "".join(pieces)


@dataclass
class PromptParts:
    """The token ids of a prompt around its question: template ``prefix``, ``question``, template ``suffix``."""

    prefix: list[int]
    question: list[int]
    suffix: list[int]


@dataclass
class TraceResult:
    """What :func:`trace` found: the ranked subsequences and the probabilities behind them."""

    subsequences: list[TracedSubsequence]
    prompt_ids: list[int]
    target_ids: list[int]
    p_prompt: float  # P(y_h | x), the unperturbed prompt
    p_mean: float  # mean of P(y_h | x'_n) over the perturbed prompts
    perturbed: torch.Tensor = field(repr=False)  # [N, L] the perturbed prompt tokens
    probabilities: torch.Tensor = field(repr=False)  # [N] P(y_h | x'_n)

    def at_length(self, length: int) -> list[TracedSubsequence]:
        """The ranked subsequences of exactly ``length`` tokens (one level of the beam search)."""
        return [s for s in self.subsequences if len(s.positions) == length]


def check_tracing_arguments(
    prompt: str, target: str, num_samples: int, rho: float, beam_width: int, top_neighbours: int, replacement: str
) -> None:
    """One-line errors for input SAT cannot trace."""
    if not prompt or not prompt.strip():
        raise ValueError("trace_subsequences: the prompt is empty; give the text whose subsequences to trace")
    if not target or not target.strip():
        raise ValueError("trace_subsequences: the target is empty; give the hallucinated output y_h to trace")
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"trace_subsequences: num_samples={num_samples!r} is invalid, expected an integer >= 1")
    if not (isinstance(rho, int | float) and 0 <= rho < 1):
        raise ValueError(f"trace_subsequences: rho={rho!r} is invalid, expected a number in [0, 1)")
    if not isinstance(beam_width, int) or beam_width < 1:
        raise ValueError(f"trace_subsequences: beam_width={beam_width!r} is invalid, expected an integer >= 1")
    if not isinstance(top_neighbours, int) or top_neighbours < 1:
        raise ValueError(f"trace_subsequences: top_neighbours={top_neighbours!r} is invalid, expected an integer >= 1")
    if replacement not in ("neighbours", "random"):
        raise ValueError(
            f"trace_subsequences: replacement={replacement!r} is invalid, expected 'neighbours' or 'random'"
        )


def prompt_parts(tokenizer: PreTrainedTokenizerBase, question: str, prompt_format: str = "auto") -> PromptParts:
    """The prompt of ``question`` as encoded by :func:`~trustlit.llm.prompts.encode_qa`, in three parts.

    The template is split around a placeholder; spaces that end the prefix (``Question: ``) move to
    the question, so the question's first word is tokenized as in the joint encoding.
    """
    prompt_format = resolve_prompt_format(tokenizer, prompt_format)
    text, _ = format_qa(tokenizer, _PLACEHOLDER, "", prompt_format)
    prefix, suffix = text.split(_PLACEHOLDER)
    stripped = prefix.rstrip(" ")
    question = prefix[len(stripped) :] + question
    return PromptParts(
        prefix=tokenizer(stripped, add_special_tokens=prompt_format == "plain")["input_ids"],
        question=tokenizer(question, add_special_tokens=False)["input_ids"],
        suffix=tokenizer(suffix, add_special_tokens=False)["input_ids"] if suffix else [],
    )


def scoring_samples(
    parts: PromptParts, questions: Sequence[Sequence[int]], target_ids: Sequence[int]
) -> list[dict[str, Any]]:
    """Samples for :func:`~trustlit.llm.scoring.batches`: prefix + q + suffix, then the target as labelled answer."""
    samples = []
    for i, q in enumerate(questions):
        prompt = [*parts.prefix, *q, *parts.suffix]
        labels = [IGNORE_INDEX] * len(prompt) + list(target_ids)
        samples.append({"input_ids": prompt + list(target_ids), "labels": labels, "prompt_ids": prompt, "index": i})
    return samples


def target_logprobs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    parts: PromptParts,
    questions: Sequence[Sequence[int]],
    target_ids: Sequence[int],
    batch_size: int = 64,
) -> torch.Tensor:
    """log P(y | prefix + q + suffix) [len(questions)] for each question token sequence q, in batches."""
    samples = scoring_samples(parts, questions, target_ids)
    out = []
    with evaluating(model):
        for batch in batches(samples, tokenizer, batch_size, model_device(model)):
            logp, _ = sequence_logprobs(model, batch)
            out.append(logp.float().cpu())
    return torch.cat(out)


def special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    return {int(i) for i in tokenizer.all_special_ids}


def _normalised(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    return tokenizer.decode([token_id]).strip().lower()


def embedding_neighbours(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, token_ids: Sequence[int], top_k: int = 50
) -> list[torch.Tensor]:
    """For each token, its ``top_k`` nearest tokens by cosine similarity of the input embeddings.

    Special tokens and the token itself are never neighbours. As in the released ``get_closest_unique_tokens``,
    neighbours whose text (stripped, lower-cased) equals, contains or is contained in the token's are dropped
    (they would barely perturb); when that leaves none, the unfiltered top-k serve.
    """
    weight = model.get_input_embeddings().weight.detach().float()[: len(tokenizer)]
    excluded = torch.tensor(sorted(special_ids(tokenizer) & set(range(weight.size(0)))), dtype=torch.long)
    normed = torch.nn.functional.normalize(weight, dim=-1)
    result = []
    for token_id in token_ids:
        similarity = normed @ normed[token_id]
        similarity[excluded] = -math.inf
        similarity[token_id] = -math.inf
        top = similarity.topk(min(top_k, int(torch.isfinite(similarity).sum()))).indices
        source = _normalised(tokenizer, token_id)
        kept = [
            int(i)
            for i in top
            if not (source and (text := _normalised(tokenizer, int(i))) and (text in source or source in text))
        ]
        result.append(torch.tensor(kept or top.tolist(), dtype=torch.long))
    return result


def perturb(
    prompt_ids: Sequence[int],
    num_samples: int,
    rho: float,
    candidates: Sequence[torch.Tensor] | torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """N perturbed copies [N, L] of ``prompt_ids``: each token kept with probability 1 - rho, else replaced
    in place by a token drawn uniformly from its candidates (``candidates[i]`` for position i, or one shared
    tensor of allowed ids; the original token is never drawn)."""
    x = torch.tensor(prompt_ids, dtype=torch.long)
    n, length = num_samples, len(prompt_ids)
    replace = torch.rand(n, length, generator=generator) < rho
    if isinstance(candidates, torch.Tensor):  # random: any allowed id but the original
        allowed = candidates
        draw = torch.randint(0, allowed.numel() - 1, (n, length), generator=generator)
        rank = torch.searchsorted(allowed, x)
        present = allowed[rank.clamp(max=allowed.numel() - 1)] == x
        replacement = allowed[draw + ((draw >= rank) & present).long()]
    else:
        sizes = torch.tensor([c.numel() for c in candidates])
        table = torch.nn.utils.rnn.pad_sequence(list(candidates), batch_first=True)  # [L, K]
        pick = (torch.rand(n, length, generator=generator) * sizes).long().clamp(max=table.size(1) - 1)
        replacement = table[torch.arange(length).expand(n, length), pick]
    return torch.where(replace, replacement, x)


class SubsequencePresence:
    """``1[s ⊑ x'_n]`` for many candidate subsequences s at once (ordered token matches, gaps allowed).

    Precomputes, for each distinct prompt token v, ``next[v, n, i]``: the first position >= i of v in x'_n
    (L when none); a candidate is then matched greedily, one gather over [C, N] per token.
    """

    def __init__(self, perturbed: torch.Tensor, prompt_ids: Sequence[int]) -> None:
        self.values = sorted(set(prompt_ids))
        self.index = {v: i for i, v in enumerate(self.values)}
        n, length = perturbed.shape
        table = torch.full((len(self.values), n, length + 2), length, dtype=torch.long)
        for i in range(length - 1, -1, -1):
            here = perturbed[:, i].unsqueeze(0) == torch.tensor(self.values).unsqueeze(1)  # [V, N]
            table[:, :, i] = torch.where(here, i, table[:, :, i + 1])
        self.table = table.view(-1)
        self.n, self.stride = n, length + 2
        self.length = length

    def __call__(self, candidates: Sequence[Sequence[int]]) -> torch.Tensor:
        """Presence [C, N] (bool) of each candidate (a sequence of token ids, all of one length)."""
        values = torch.tensor([[self.index[v] for v in c] for c in candidates], dtype=torch.long)  # [C, k]
        rows = torch.arange(self.n).unsqueeze(0) * self.stride  # [1, N]
        start = torch.zeros(values.size(0), self.n, dtype=torch.long)
        for j in range(values.size(1)):
            offset = values[:, j : j + 1] * (self.n * self.stride) + rows
            start = self.table[offset + start.clamp(max=self.length + 1)] + 1
        return start <= self.length


def beam_search(
    token_ids: Sequence[int],
    score_level: Callable[[list[tuple[int, ...]]], torch.Tensor],
    beam_width: int,
    max_length: int,
    same_tokens_same_score: bool = True,
    alive: Callable[[tuple[int, ...]], bool] | None = None,
) -> list[tuple[tuple[int, ...], float]]:
    """Every subsequence scored while growing the ``beam_width`` best of each length by one position.

    Candidates are sorted position tuples of ``token_ids``; level 1 is every position; level k+1 inserts
    one new position into each kept candidate of level k. With ``same_tokens_same_score`` (SAT: presence
    depends only on the tokens), candidates with the same tokens are scored once, under their first positions.
    Only candidates for which ``alive`` holds (SAT: present in some perturbed prompt; every extension of one
    that is not is absent too) are kept for the next level; the search stops when none is.
    """
    seen_keys: set[tuple[int, ...]] = set()
    level = [(i,) for i in range(len(token_ids))]
    scored: list[tuple[tuple[int, ...], float]] = []
    for length in range(1, max_length + 1):
        unique = []
        for candidate in level:
            key = tuple(token_ids[i] for i in candidate) if same_tokens_same_score else candidate
            if key not in seen_keys:
                seen_keys.add(key)
                unique.append(candidate)
        if not unique:
            break
        scores = score_level(unique).tolist()
        scored.extend(zip(unique, scores, strict=True))
        if length == max_length:
            break
        living = [item for item in zip(unique, scores, strict=True) if alive is None or alive(item[0])]
        best = sorted(living, key=lambda item: -item[1])[:beam_width]
        level = sorted(
            {
                tuple(sorted((*candidate, i)))
                for candidate, _ in best
                for i in range(len(token_ids))
                if i not in candidate
            }
        )
    return sorted(scored, key=lambda item: (-item[1], len(item[0]), item[0]))


def replacement_candidates(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[int],
    replacement: str,
    top_neighbours: int,
) -> list[torch.Tensor] | torch.Tensor:
    """What :func:`perturb` draws replacements from: embedding neighbours per position, or every non-special id."""
    if replacement == "neighbours":
        return embedding_neighbours(model, tokenizer, prompt_ids, top_neighbours)
    excluded = special_ids(tokenizer)
    return torch.tensor([i for i in range(len(tokenizer)) if i not in excluded], dtype=torch.long)


def decoded_tokens(tokenizer: PreTrainedTokenizerBase, token_ids: Sequence[int]) -> list[str]:
    return [tokenizer.decode([t]) for t in token_ids]


def as_subsequences(
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[int],
    ranked: Sequence[tuple[tuple[int, ...], float]],
    support: Sequence[int] | None = None,
) -> list[TracedSubsequence]:
    tokens = decoded_tokens(tokenizer, prompt_ids)
    return [
        TracedSubsequence(
            positions=positions,
            token_ids=tuple(prompt_ids[i] for i in positions),
            tokens=tuple(tokens[i] for i in positions),
            score=float(score),
            support=None if support is None else int(support[k]),
        )
        for k, (positions, score) in enumerate(ranked)
    ]


def trace(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    target: str,
    *,
    num_samples: int = 1024,
    rho: float = 0.5,
    replacement: Replacement = "neighbours",
    top_neighbours: int = 50,
    beam_width: int = 20,
    max_length: int | None = None,
    batch_size: int = 64,
    seed: int = 0,
    prompt_format: PromptFormat = "auto",
    answer_prefix: str = "",
) -> TraceResult:
    """SAT on one (prompt, target) pair (see the module docstring); :func:`trace_subsequences` returns its ranking.

    ``answer_prefix``: answer text that precedes the target (kept fixed and not scored), to trace a
    hallucinated span in the middle of an answer: y_h is scored as P(y_h | x', answer_prefix).
    """
    check_tracing_arguments(prompt, target, num_samples, rho, beam_width, top_neighbours, replacement)
    parts = prompt_parts(tokenizer, prompt, prompt_format)
    if answer_prefix:
        parts.suffix = parts.suffix + tokenizer(answer_prefix, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    x = parts.question
    max_length = math.ceil(0.9 * len(x)) if max_length is None else max_length
    if max_length < 1:
        raise ValueError(f"trace_subsequences: max_length={max_length} is invalid, expected an integer >= 1")
    generator = torch.Generator().manual_seed(seed)
    candidates = replacement_candidates(model, tokenizer, x, replacement, top_neighbours)
    perturbed = perturb(x, num_samples, rho, candidates, generator)
    logp = target_logprobs(model, tokenizer, parts, [x, *perturbed.tolist()], target_ids, batch_size)
    p_prompt, probabilities = logp[0].exp().item(), logp[1:].exp().double()
    presence = SubsequencePresence(perturbed, x)
    supports: dict[tuple[int, ...], int] = {}

    def score_level(level: list[tuple[int, ...]]) -> torch.Tensor:
        present = presence([[x[i] for i in c] for c in level]).double()  # [C, N]
        count = present.sum(dim=1)
        supports.update(zip(level, count.long().tolist(), strict=True))
        return torch.where(count > 0, (present @ probabilities) / count.clamp(min=1), torch.zeros_like(count))

    ranked = beam_search(x, score_level, beam_width, min(max_length, len(x)), alive=lambda c: supports[c] > 0)
    return TraceResult(
        subsequences=as_subsequences(tokenizer, x, ranked, [supports[p] for p, _ in ranked]),
        prompt_ids=list(x),
        target_ids=list(target_ids),
        p_prompt=p_prompt,
        p_mean=probabilities.mean().item(),
        perturbed=perturbed,
        probabilities=probabilities.float(),
    )


def trace_subsequences(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: str, target: str, **options: Any
) -> list[TracedSubsequence]:
    """The subsequences of ``prompt``'s tokens ranked by P^(y_h | s ⊑ x') for ``target`` y_h (SAT).

    ``options`` are :func:`trace`'s keywords: ``num_samples=1024, rho=0.5, replacement="neighbours"|"random",
    top_neighbours=50, beam_width=20, max_length=None (ceil(0.9 L)), batch_size=64, seed=0, prompt_format="auto"``.
    Each item iterates as ``(positions, score)``: positions index the tokens of ``prompt`` alone
    (``prompt_parts(tokenizer, prompt).question``), score is the estimated hallucination probability.
    """
    return trace(model, tokenizer, prompt, target, **options).subsequences


def insert_tokens(question_ids: Sequence[int], span_ids: Sequence[int], position: int) -> list[int]:
    """``span_ids`` inserted as one block before ``question_ids[position]``."""
    return [*question_ids[:position], *span_ids, *question_ids[position:]]


def greedy_produces(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    parts: PromptParts,
    questions: Sequence[Sequence[int]],
    target_ids: Sequence[int],
    batch_size: int = 64,
) -> torch.Tensor:
    """Whether greedy decoding after each prompt starts with ``target_ids`` [len(questions)] (bool): every
    target token is the argmax given the prompt and the target tokens before it (one teacher-forced pass)."""
    results = []
    t = len(target_ids)
    samples = scoring_samples(parts, questions, target_ids)
    with evaluating(model):
        for batch in batches(samples, tokenizer, batch_size, model_device(model)):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            labels = batch["labels"][:, 1:]
            predicted = logits[:, :-1].argmax(-1)
            hit = ((predicted == labels) | (labels == IGNORE_INDEX)).all(dim=1)
            results.append(hit.cpu() & ((labels != IGNORE_INDEX).sum(1).cpu() == t))
    return torch.cat(results)


def greedy_continuation(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt_ids: Sequence[int], num_tokens: int
) -> str:
    """The model's greedy continuation of ``prompt_ids``, ``num_tokens`` tokens at most, decoded."""
    ids = torch.tensor([list(prompt_ids)], device=model_device(model))
    with evaluating(model):
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=num_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    return tokenizer.decode(out[0, ids.size(1) :], skip_special_tokens=True)


def greedy_answer_prefix(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, question: str, num_tokens: int, prompt_format: str
) -> str:
    """The first ``num_tokens`` tokens of the model's greedy answer to ``question``, decoded."""
    parts = prompt_parts(tokenizer, question, prompt_format)
    return greedy_continuation(model, tokenizer, [*parts.prefix, *parts.question, *parts.suffix], num_tokens)


def answer_prefix(tokenizer: PreTrainedTokenizerBase, answer: str, num_tokens: int | None) -> str:
    """``answer`` cut to its first ``num_tokens`` tokens (None: whole)."""
    if num_tokens is None:
        return answer
    return tokenizer.decode(tokenizer(answer, add_special_tokens=False)["input_ids"][:num_tokens])


def check_target(owner: str, target: str, target_tokens: int | None) -> None:
    """``target`` is ``answer`` or ``greedy``, and ``greedy`` comes with ``target_tokens``; one-line errors."""
    if target not in ("answer", "greedy"):
        raise ValueError(f"{owner}: target={target!r} is invalid, expected 'answer' or 'greedy'")
    if target == "greedy" and target_tokens is None:
        raise ValueError(f"{owner}: target='greedy' needs target_tokens (how many tokens of the model's answer to use)")


class SubsequenceTracing(AnalysisModule):
    """SAT over the (question, answer) pairs of a QA data module, run by ``trustlit test``.

    For each pair, traces the target y_h (the pair's ``answer``, or with ``target: greedy`` the first
    ``target_tokens`` tokens of the model's own greedy answer) to the subsequences of the question by
    :func:`trace` (formula and defaults in the module docstring), and writes per prompt the ``top`` ranked
    subsequences overall and the best of each length to ``results_file``; logs the mean P(y_h | x), the mean
    top score and the mean of P(y_h | x') over the perturbed prompts.

    Notes: docs/methods/subsequence_association_tracing.md

    Args:
        lm: the traced model (a ``.ckpt`` of a fine-tuning run, ``smollm2-135m-instruct``, ...).
        num_samples, rho, replacement, top_neighbours, beam_width, max_length, batch_size, seed: of :func:`trace`.
        target: ``answer`` (trace the given answer) or ``greedy`` (trace the model's own answer).
        target_tokens: cut the target to its first tokens (None: the whole answer; required for ``greedy``).
        prompt_format: as the data module encodes prompts (``auto``: chat when the tokenizer has a template).
        top: how many ranked subsequences per prompt go into the results.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        num_samples: PositiveInt = 1024,
        rho: ClosedUnitInterval = 0.5,
        replacement: Replacement = "neighbours",
        top_neighbours: PositiveInt = 50,
        beam_width: PositiveInt = 20,
        max_length: PositiveInt | None = None,
        batch_size: PositiveInt = 64,
        seed: NonNegativeInt = 0,
        target: TargetSource = "answer",
        target_tokens: PositiveInt | None = None,
        prompt_format: PromptFormat = "auto",
        top: PositiveInt = 10,
        results_file: str = "tracing.json",
    ) -> None:
        super().__init__(results_file=results_file)
        check_arguments(SubsequenceTracing.__init__, locals())
        if not 0 <= rho < 1:
            raise ValueError(f"SubsequenceTracing: rho={rho!r} is invalid, expected a number in [0, 1)")
        check_target("SubsequenceTracing", target, target_tokens)
        lm = CausalLMSpec.coerce(lm)
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.hparams["lm"] = asdict(lm)
        self.model, self.tokenizer = lm.load()
        self.model.eval()
        self.traces: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.traces = []

    def target_for(self, question: str, answer: str) -> str:
        hp = self.hparams
        if hp.target == "greedy":
            return greedy_answer_prefix(self.model, self.tokenizer, question, hp.target_tokens, hp.prompt_format)
        return answer_prefix(self.tokenizer, answer, hp.target_tokens)

    def update(self, batch: dict[str, Any]) -> None:
        hp = self.hparams
        for question, answer in zip(batch["question"], batch["answer"], strict=True):
            target = self.target_for(question, answer)
            options = {name: hp[name] for name in TRACE_OPTIONS}
            seed = hp.seed + len(self.traces)
            result = trace(self.model, self.tokenizer, question, target, seed=seed, **options)
            self.traces.append(self.summary(question, target, result))

    def summary(self, question: str, target: str, result: TraceResult) -> dict[str, Any]:
        """JSON-ready record of one trace: the top subsequences overall and the best of each length."""

        def plain(s: TracedSubsequence) -> dict[str, Any]:
            return {"positions": list(s.positions), "text": s.text, "score": s.score, "support": s.support}

        lengths = sorted({len(s.positions) for s in result.subsequences})
        return {
            "question": question,
            "target": target,
            "prompt_tokens": decoded_tokens(self.tokenizer, result.prompt_ids),
            "p_prompt": result.p_prompt,
            "p_mean": result.p_mean,
            "top": [plain(s) for s in result.subsequences[: self.hparams.top]],
            "best_per_length": {str(k): plain(result.at_length(k)[0]) for k in lengths},
        }

    def compute(self) -> dict[str, Any]:
        traces = self.traces
        if not traces:
            raise RuntimeError("SubsequenceTracing saw no (question, answer) pairs: the test dataloader is empty")
        self.print_table(traces)
        return {
            "num_prompts": len(traces),
            "mean_p_prompt": sum(t["p_prompt"] for t in traces) / len(traces),
            "mean_p_perturbed": sum(t["p_mean"] for t in traces) / len(traces),
            "mean_top_score": sum(t["top"][0]["score"] for t in traces) / len(traces),
            "traces": traces,
        }

    def print_table(self, traces: list[dict[str, Any]]) -> None:
        from rich.console import Console
        from rich.table import Table

        from trustlit.callbacks import FILE_WIDTH

        if self._trainer is not None and not self.trainer.is_global_zero:
            return
        table = Table(title="Subsequence Association Tracing: top subsequence per prompt")
        for column in ("question", "target y_h", "P(y_h|x)", "top subsequence", "P(y_h|s)"):
            table.add_column(column, justify="right" if column.startswith("P") else "left")
        for t in traces:
            best = t["top"][0]
            table.add_row(t["question"], t["target"], f"{t['p_prompt']:.3f}", best["text"], f"{best['score']:.3f}")
        console = Console()
        if not console.is_terminal:
            console.width = FILE_WIDTH
        console.print(table)
