"""Attention-Shifting (AS): Tan, Qu, Li, Zhang, Cui, Chen and Gao, "Wisdom is Knowing What not to
Say: Hallucination-Free LLMs Unlearning via Attention Shifting", NeurIPS 2025, arXiv 2510.17210.

Adapters on the self-attention modules of a frozen model are trained so that the attention on the
forget set moves off fact-bearing tokens (importance-aware suppression) while the attention on the
retain set stays the model's own (attention-guided retention). Two formulations (``mode``).

Notation (symbols as in the code). pi_ref is the model before unlearning: the same network with
its adapters switched off. A^theta_{l,h}(q, k) and A^ref_{l,h}(q, k) are the attention
probabilities of the adapted and the reference model in layer l of ``layers`` (L), head h, from
query position q to key position k; V the valid (non-padding) positions of a sample; B the batch.

``mode="paper"`` (default), the released code's objective (github.com/CCT-sys/AS-unlearning).
Fact-bearing tokens come from part-of-speech tags of the question and answer words: f_q = 1 for the
tokens of PROPN, VERB and NUM words (``fact_tags``), o_q = 1 for the tokens of every other word,
both 0 on template, special and padding tokens (``part_of_speech_masks``; tagger: textblob's
PatternTagger, Penn tags mapped to Universal POS, where the released code runs spaCy). The masks
index the QUERY row q of the attention, as the released code's ``noun.unsqueeze(1).unsqueeze(3)``::

    c(q, k)     = clip(A^ref(q, k) (1 - sigma f_q) + beta o_q, 1e-6, 1)            (released_suppression_target)
    A^sup(q, k) = c(q, k) / (sum_{k in V} c(q, k) + 1e-6)
    L_ASP = mean_{l in L} (1/B) sum_{b,h} sum_{q in V} KL(softmax_k A^theta(q, .) || softmax_k A^sup(q, .))
    L_AKL = mean_{l in L} (1/B) sum_{b,h} [ sum_{q in V} KL(softmax_k A^ref(q, .) || softmax_k A^theta(q, .))
                                          + sum_{k in V} KL(softmax_q A^ref(., k) || softmax_q A^theta(., k)) ]
    L = lambda_sup L_ASP + lambda_ret L_AKL  (+ alpha L_retain + lambda_idk NLL(r | x_f), both 0 by default)

KL(current || adjusted) in L_ASP and KL(reference || current) in L_AKL are the directions of the
released ``F.kl_div`` calls; the softmax runs over the attention probabilities themselves
(``softmax_kl``). With beta = 1.2 >= 1 every o-row of A^sup is uniform over V, future keys
included, and the f-rows keep the reference's shape (the 1 - sigma scale is renormalised away).

``mode="trustlit"``, our variant: importance by attention-weighted gradient saliency on the keys,
with Q the answer-predicting query rows and C the candidate tokens (not padding, not special)::

    g_k = || d/d e_k  sum_t -log pi_ref(y_t | x, y_<t) ||_2      gradient saliency of token k
    a_k = mean_{l in L, h, q in Q} A^ref_{l,h}(q, k)               attention the answer pays to k
    s_k = a_k g_k / sum_{j in C} a_j g_j  for k in C, else 0       (importance_scores)
    F   = the ceil(rho |C|) candidates with the largest s          (top_fraction_mask)

F is the fact-bearing set of a forget sample; on a retain sample the same rule gives the
essential set E. Targets: the reference attention with KEY k reweighted by w_k::

    A~(q, k) = A^ref(q, k) w_k / sum_j A^ref(q, j) w_j              (shifted_attention)
    forget:  w_k = 1 - sigma  if k in F  else 1 + beta              (shift_weights)
    retain:  w_k = 1 + gamma  if k in E  else 1
    L_sup = mean_{l in L} (1/B) sum_b sum_h sum_{q in Q_b} KL(A~_f(q, .) || A^theta(q, .))   (attention_kl)
    L_ret = the same on retain, with the retain target
    L = lambda_sup L_sup + lambda_ret L_ret + alpha L_retain + lambda_idk NLL(r | x_f)

L_retain is the retain answers' token-mean NLL (``retain_loss="nll"``) or KL(pi_ref || pi_theta)
of their next-token distributions (``"kl"``); NLL(r | x_f) is the token-mean NLL of a refusal r
to a forget question x_f, from the ``idk`` batches of ``ForgetRetainDataModule(refusals=...)``.

Defaults: sigma = 0.3, beta = 1.2, layers = the last two, adapters of width 64 on the attention
outputs, lambda_sup = lambda_ret = 1, Adam lr 5e-4 (the released code's, both modes); ``paper``:
alpha = lambda_idk = 0; ``trustlit``: rho = 0.3, gamma = 0.2, alpha = 1, lambda_idk = 1 (ours).
The model runs with eager attention (to read the probabilities).

Notes: docs/methods/attention_shifting.md
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from trustlit.hparams import ClosedUnitInterval, NonNegativeFloat, PositiveFloat, PositiveInt, check_arguments
from trustlit.llm import hooks
from trustlit.llm.anatomy import decoder_layer, decoder_layers, self_attention
from trustlit.llm.loading import CausalLMSpec
from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.llm.scoring import eval_mode, sequence_logprobs_from_logits, token_nll
from trustlit.unlearning.base import RetainLoss, UnlearningModule, check_retain_loss
from trustlit.unlearning.losses import answer_token_mask, kl_to_reference, token_mean_nll

ADAPTER_NAME = "shift_adapter"
AdapterPosition = Literal["output", "input"]
Mode = Literal["paper", "trustlit"]
# retain_weight, refusal_weight: the released code's objective has neither term; trustlit's has both
MODE_DEFAULTS = {
    "paper": {"retain_weight": 0.0, "refusal_weight": 0.0},
    "trustlit": {"retain_weight": 1.0, "refusal_weight": 1.0},
}


# ---------------------------------------------------------------------------------------------
# The math, as pure functions of tensors
# ---------------------------------------------------------------------------------------------


def answer_query_mask(labels: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: query positions q whose next token is an answer token (Q in the module docstring)."""
    return F.pad(answer_token_mask(labels), (0, 1), value=False)


def attention_received(attention: torch.Tensor, query_mask: torch.Tensor) -> torch.Tensor:
    """a_k [B, Tk]: attention paid to key k, averaged over heads and the masked query rows.

    ``attention`` [B, H, Tq, Tk] (average over layers beforehand), ``query_mask`` [B, Tq] bool.
    """
    rows = query_mask[:, None, :, None].to(attention.dtype)
    count = (query_mask.sum(-1) * attention.size(1)).clamp(min=1)
    return (attention * rows).sum(dim=(1, 2)) / count[:, None]


def importance_scores(gradient_norm: torch.Tensor, attention: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """s_k = a_k g_k / sum_{j in C} a_j g_j on the candidates C, 0 elsewhere; [B, T].

    ``gradient_norm`` g and ``attention`` a are [B, T]; ``candidates`` [B, T] bool. A sample
    whose candidates all score 0 gets uniform scores over its candidates.
    """
    raw = gradient_norm * attention * candidates
    total = raw.sum(-1, keepdim=True)
    uniform = candidates / candidates.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(total > 0, raw / total.clamp(min=torch.finfo(raw.dtype).tiny), uniform)


def top_fraction_mask(scores: torch.Tensor, candidates: torch.Tensor, fraction: float) -> torch.Tensor:
    """[B, T] bool: per sample, the ceil(fraction * |C|) highest-scoring candidates (at least one).

    Ties go to the earlier position. A sample without candidates selects nothing.
    """
    masked = scores.masked_fill(~candidates, float("-inf"))
    order = masked.argsort(dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(order.size(-1), device=order.device).expand_as(order))
    num_candidates = candidates.sum(-1)
    # the 1e-9 keeps 0.3 * 10 = 3.0000000000000004 from rounding up to 4
    count = torch.ceil(num_candidates * fraction - 1e-9).clamp(min=1).minimum(num_candidates)
    return (ranks < count[:, None]) & candidates


def shift_weights(selected: torch.Tensor, selected_factor: float, other_factor: float) -> torch.Tensor:
    """w_k [B, T]: ``selected_factor`` on the selected keys, ``other_factor`` on every other key."""
    return torch.where(selected, selected_factor, other_factor).to(torch.float32)


def shifted_attention(reference: torch.Tensor, key_weights: torch.Tensor) -> torch.Tensor:
    """A~(q, k) = A^ref(q, k) w_k / sum_j A^ref(q, j) w_j; a row with no weighted mass stays as it is.

    ``reference`` [B, H, Tq, Tk], ``key_weights`` [B, Tk].
    """
    weighted = reference * key_weights[:, None, None, :]
    total = weighted.sum(-1, keepdim=True)
    return torch.where(total > 0, weighted / total.clamp(min=torch.finfo(weighted.dtype).tiny), reference)


def attention_kl(target: torch.Tensor, current: torch.Tensor, query_mask: torch.Tensor) -> torch.Tensor:
    """KL(target(q, .) || current(q, .)) summed over heads and masked query rows, averaged over samples.

    ``target``, ``current`` [B, H, Tq, Tk] attention probabilities (target entries that are 0
    contribute 0); ``query_mask`` [B, Tq] bool. The reduction is the released code's
    ``batchmean`` (a sum over everything but the batch).
    """
    target, current = target.float(), current.float()
    log_current = current.clamp(min=1e-12).log()
    rows = (torch.special.xlogy(target, target) - target * log_current).sum(-1)  # [B, H, Tq]
    return (rows * query_mask[:, None, :]).sum(dim=(1, 2)).mean()


def attention_mass(attention: torch.Tensor, key_mask: torch.Tensor, query_mask: torch.Tensor) -> torch.Tensor:
    """mean over heads and masked query rows of the attention mass on the masked keys.

    ``attention`` [B, H, Tq, Tk], ``key_mask`` [B, Tk] and ``query_mask`` [B, Tq] bool.
    """
    mass = (attention.float() * key_mask[:, None, None, :]).sum(-1)  # [B, H, Tq]
    return mass[query_mask[:, None, :].expand_as(mass)].mean()


# -- paper mode: fact-bearing tokens by part of speech, the released losses ----------------------

# Penn Treebank tags (the tagger's) to Universal POS (spaCy's ``pos_``, which the released code reads)
PTB_TO_UD = {
    **dict.fromkeys(["NN", "NNS"], "NOUN"),
    **dict.fromkeys(["NNP", "NNPS"], "PROPN"),
    **dict.fromkeys(["VB", "VBD", "VBG", "VBN", "VBP", "VBZ"], "VERB"),
    **dict.fromkeys(["JJ", "JJR", "JJS", "AFX"], "ADJ"),
    **dict.fromkeys(["RB", "RBR", "RBS", "WRB"], "ADV"),
    **dict.fromkeys(["PRP", "PRP$", "WP", "WP$", "WDT", "EX"], "PRON"),
    **dict.fromkeys(["DT", "PDT"], "DET"),
    **dict.fromkeys(["IN", "RP"], "ADP"),
    **dict.fromkeys(["POS", "TO"], "PART"),
    **dict.fromkeys([".", ",", ":", '"', "``", "''", "(", ")", "-LRB-", "-RRB-", "HYPH"], "PUNCT"),
    **dict.fromkeys(["#", "$", "SYM"], "SYM"),
    "CD": "NUM",
    "CC": "CCONJ",
    "MD": "AUX",
    "UH": "INTJ",
}
UD_TAGS = frozenset([*PTB_TO_UD.values(), "X"])
RELEASED_FACT_TAGS = ("PROPN", "VERB", "NUM")  # the released code's fact-bearing classes
_BE = frozenset(["be", "am", "is", "are", "was", "were", "been", "being", "'m", "'re"])
_HAVE_DO = frozenset(["have", "has", "had", "having", "do", "does", "did"])
_SKIPPED_BEFORE_VERB = frozenset(["RB", "RBR", "RBS", "PRP"])  # "has not written", "did he write"

TaggedWord = tuple[int, int, str]  # (start, end) character span and Universal POS tag


def universal_tags(tagged: list[tuple[str, str]]) -> list[str]:
    """Universal POS of (word, Penn tag) pairs, with UD's auxiliaries: a form of *be* is AUX (UD's
    copula is AUX), one of *have*/*do* is AUX when a verb follows (past adverbs and pronouns), as
    spaCy tags them; unknown tags are X."""
    tags = []
    for i, (word, penn) in enumerate(tagged):
        tag = PTB_TO_UD.get(penn, "X")
        lower = word.lower()
        if tag == "VERB" and lower in _BE:
            tag = "AUX"
        elif tag == "VERB" and lower in _HAVE_DO:
            following = [p for _, p in tagged[i + 1 :] if p not in _SKIPPED_BEFORE_VERB][:1]
            tag = "AUX" if following and following[0].startswith("VB") else tag
        tags.append(tag)
    return tags


def tag_words(text: str) -> list[TaggedWord]:
    """The words of ``text`` with their character spans and Universal POS tags.

    Tagger: textblob's PatternTagger (the Brill-style lexicon and rules of the Pattern library,
    shipped inside the textblob package, so nothing is downloaded). Words the tagger rewrote and
    that cannot be found in ``text`` in order are dropped.
    """
    from textblob.en.taggers import PatternTagger

    tagged = PatternTagger().tag(text)
    words, cursor = [], 0
    for (word, _), tag in zip(tagged, universal_tags(tagged), strict=True):
        start = text.find(word, cursor)
        if start >= 0:
            words.append((start, start + len(word), tag))
            cursor = start + len(word)
    return words


def token_tags(spans: list[tuple[int, int]], words: list[TaggedWord]) -> list[str | None]:
    """The tag of each token: that of the last word (by start) overlapping its character span
    ``[start, end)``, as the released code assigns spaCy's tags to subword tokens; None when
    the token overlaps no word (whitespace, template text)."""
    words = sorted(words)
    tags: list[str | None] = []
    for start, end in spans:
        overlapping = [tag for w_start, w_end, tag in words if w_start < end and w_end > start]
        tags.append(overlapping[-1] if overlapping else None)
    return tags


def _place(words: list[TaggedWord], source: str, text: str, start: int) -> list[TaggedWord]:
    """Move words tagged in ``source`` to their spans in ``text``, searching in order from ``start``;
    a word not found (cut off by ``max_length``) is dropped."""
    placed, cursor = [], start
    for w_start, w_end, tag in words:
        found = text.find(source[w_start:w_end], cursor)
        if found >= 0:
            placed.append((found, found + w_end - w_start, tag))
            cursor = found + w_end - w_start
    return placed


def token_char_spans(tokenizer: Any, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The decoded text of ``ids`` and each token's character span in it, by decoding the prefixes
    (which works for any tokenizer, with or without offset mappings). A token that only completes a
    multi-byte character gets an empty span."""
    text, spans = "", []
    for k in range(len(ids)):
        prefix = tokenizer.decode(ids[: k + 1], clean_up_tokenization_spaces=False)
        spans.append((len(text), max(len(text), len(prefix))))
        text = prefix
    return text, spans


def released_suppression_target(
    reference: torch.Tensor,
    fact_rows: torch.Tensor,
    other_rows: torch.Tensor,
    valid: torch.Tensor,
    sigma: float,
    beta: float,
) -> torch.Tensor:
    """A^sup(q, k) = c(q, k) / (sum_{k valid} c(q, k) + 1e-6), the released code's
    ``adjust_attention_weights``, with c(q, k) = clip(A^ref(q, k) (1 - sigma f_q) + beta o_q, 1e-6, 1).

    The masks index the query row q: ``fact_rows`` f [B, T] (fact-bearing tokens), ``other_rows``
    o [B, T] (the other tagged tokens); ``valid`` [B, T] keeps padding keys out (0 in the target).
    ``reference`` [B, H, T, T]. With beta >= 1 every o-row becomes uniform over the valid keys.
    """
    fact = fact_rows[:, None, :, None].to(reference.dtype)
    other = other_rows[:, None, :, None].to(reference.dtype)
    adjusted = (reference * (1 - sigma * fact) + beta * other).clamp(1e-6, 1.0) * valid[:, None, None, :]
    return adjusted / (adjusted.sum(-1, keepdim=True) + 1e-6)


def softmax_kl(source: torch.Tensor, target: torch.Tensor, valid: torch.Tensor, dim: int) -> torch.Tensor:
    """(1/B) sum KL(softmax_dim(source) || softmax_dim(target)) over heads and the lines along ``dim``.

    The released code's ``F.kl_div(..., reduction="batchmean")`` on log-softmaxes of attention
    probabilities [B, H, T, T]: the softmax runs over the probabilities themselves, along keys
    (``dim=-1``) or queries (``dim=-2``), among the ``valid`` [B, T] positions (padding is out of
    both the softmax and the sum).
    """
    both = valid[:, None, :, None] & valid[:, None, None, :]
    # -1e4 rather than -inf: exp underflows to 0 and fully masked lines stay finite (then zeroed)
    log_p = source.float().masked_fill(~both, -1e4).log_softmax(dim)
    log_q = target.float().masked_fill(~both, -1e4).log_softmax(dim)
    return torch.where(both, log_p.exp() * (log_p - log_q), 0.0).sum() / source.size(0)


# ---------------------------------------------------------------------------------------------
# The adapter
# ---------------------------------------------------------------------------------------------


class AttentionAdapter(nn.Module):
    """h -> h + scale * W_up relu(W_down h), with W_up starting at 0, on one self-attention module.

    ``position="output"`` shifts the module's output (as the paper code), ``"input"`` the hidden
    states its query, key and value projections read. Installed as hooks of the attention module
    (:meth:`input_hook`, :meth:`output_hook`) for as long as the model lives, so every forward
    (training, validation, generation) sees them; it passes everything through unchanged when
    ``enabled`` is unset (pi_ref). The attention probabilities are read by
    :func:`trustlit.llm.hooks.capture` during a pass.
    """

    def __init__(self, hidden_size: int, bottleneck: int, position: AdapterPosition = "output") -> None:
        super().__init__()
        self.position = position
        self.down = nn.Linear(hidden_size, bottleneck, bias=False)
        self.up = nn.Linear(bottleneck, hidden_size, bias=False)
        nn.init.zeros_(self.up.weight)
        self.scale = nn.Parameter(torch.ones(1))
        self.enabled = True

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.scale * self.up(F.relu(self.down(hidden)))

    def shift(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden + adapter(hidden), computed in the adapter's dtype."""
        return hidden + self(hidden.to(self.down.weight.dtype)).to(hidden.dtype)

    def input_hook(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Forward pre-hook: shift the hidden states the attention reads (``position="input"``)."""
        if not self.enabled:
            return None
        if "hidden_states" in kwargs:
            return args, {**kwargs, "hidden_states": self.shift(kwargs["hidden_states"])}
        return (self.shift(args[0]), *args[1:]), kwargs

    def output_hook(self, module: nn.Module, args: Any, output: Any) -> Any:
        """Forward hook: shift the output (``position="output"``)."""
        hidden, rest = (output[0], output[1:]) if isinstance(output, tuple) else (output, ())
        if not self.enabled or self.position != "output":
            return None
        return (self.shift(hidden), *rest) if isinstance(output, tuple) else self.shift(hidden)


def _require_tagger() -> None:
    """Paper mode tags words with textblob's bundled PatternTagger: fail at construction if it is absent."""
    try:
        import textblob.en.taggers  # noqa: F401
    except ImportError:
        raise ImportError(
            "AttentionShifting(mode='paper') tags parts of speech with textblob: pip install textblob==0.20.1 "
            "(or use mode='trustlit')"
        ) from None


class ShiftTerms(NamedTuple):
    """The attention terms of one step and the passes the rest of the loss reuses."""

    suppression: torch.Tensor
    retention: torch.Tensor
    fact: torch.Tensor  # [B, T] bool, the forget sample's fact-bearing tokens
    forget_logits: torch.Tensor
    forget_maps: list[torch.Tensor]
    ref_forget_maps: list[torch.Tensor]
    retain_logits: torch.Tensor
    ref_retain_logits: torch.Tensor


def _attention_probabilities(
    captured: dict[str, torch.Tensor | None], modules: dict[str, nn.Module]
) -> list[torch.Tensor]:
    """The captured attention probabilities in layer order; a module that returned none is an error."""
    for name, module in modules.items():
        if captured.get(name) is None:
            raise RuntimeError(
                f"{type(module).__name__} returned no attention probabilities: AttentionShifting needs the "
                "model's attn_implementation to stay 'eager'"
            )
    return [captured[name] for name in modules]


# ---------------------------------------------------------------------------------------------
# The method
# ---------------------------------------------------------------------------------------------


class AttentionShifting(UnlearningModule):
    """Attention-Shifting unlearning (see the module docstring for the loss; its page for the sources).

    Args:
        mode: ``paper`` (default) the released code's objective: part-of-speech fact tokens,
            their query rows, KL of softmaxed attention; ``trustlit`` our variant: saliency fact
            keys, KL of attention probabilities on the answer rows, retain NLL and refusal terms.
        suppress_factor: sigma in [0, 1] (released code: 0.3). ``paper``: fact-bearing query rows
            are scaled by 1 - sigma; ``trustlit``: the share of a fact-bearing key's attention removed.
        boost_factor: beta >= 0 (released code: 1.2). ``paper``: added to the other tagged rows
            before the clip to [1e-6, 1]; ``trustlit``: the relative boost of every other key, so
            fact-bearing mass shrinks by (1 - sigma) / (1 + beta).
        fact_tags: ``paper`` only: the Universal POS classes that are fact-bearing (default the
            released code's PROPN, VERB, NUM).
        retain_boost: ``trustlit`` only: gamma >= 0, the boost of essential retain tokens (ours:
            0.2; 0 holds the retain attention to the reference, as the paper code does).
        top_fraction: ``trustlit`` only: rho in (0, 1], the share of candidate tokens marked
            fact-bearing (forget) or essential (retain) by importance (ours: 0.3).
        layers: the layers whose attention is shifted (default: the last two, as the paper code).
        adapter_size: bottleneck width of the adapters, one per layer (paper code: 64).
        adapter_position: ``output`` (paper code) adds each adapter to its attention module's
            output, which moves the attention of the layers above it; ``input`` (ours) to the
            hidden states the module reads, which moves its own attention too.
        suppression_weight: lambda_sup. retention_weight: lambda_ret (paper code: 1 and 1).
        retain_weight: alpha, weight of ``retain_loss`` (default: 0 in ``paper`` mode, as the
            released objective; 1 in ``trustlit``).
        retain_loss: ``nll`` or ``kl`` on the retain answers.
        refusal_weight: lambda_idk, weight of the refusal NLL on forget questions (ours; default
            0 in ``paper`` mode, 1 in ``trustlit``). Needs ``ForgetRetainDataModule(refusals=...)``.
        lr: learning rate of the adapters (paper code: 5e-4).
        Other arguments: see :class:`~trustlit.CausalLMModule`.
    """

    def __init__(
        self,
        lm: CausalLMSpec | None = None,
        mode: Mode = "paper",
        suppress_factor: ClosedUnitInterval = 0.3,
        boost_factor: NonNegativeFloat = 1.2,
        fact_tags: list[str] | None = None,
        retain_boost: NonNegativeFloat = 0.2,
        top_fraction: PositiveFloat = 0.3,
        layers: list[int] | None = None,
        adapter_size: PositiveInt = 64,
        adapter_position: AdapterPosition = "output",
        suppression_weight: NonNegativeFloat = 1.0,
        retention_weight: NonNegativeFloat = 1.0,
        retain_weight: NonNegativeFloat | None = None,
        retain_loss: RetainLoss = "nll",
        refusal_weight: NonNegativeFloat | None = None,
        lr: PositiveFloat = 5e-4,
        **kwargs: Any,
    ) -> None:
        check_arguments(AttentionShifting.__init__, locals())
        if mode not in MODE_DEFAULTS:
            raise ValueError(f"AttentionShifting: mode={mode!r} is invalid, expected 'paper' or 'trustlit'")
        fact_tags = list(RELEASED_FACT_TAGS) if fact_tags is None else list(fact_tags)
        if not fact_tags or not set(fact_tags) <= UD_TAGS:
            raise ValueError(
                f"AttentionShifting: fact_tags={fact_tags!r} is invalid, expected a non-empty list of "
                f"Universal POS tags from {sorted(UD_TAGS)}"
            )
        retain_weight = MODE_DEFAULTS[mode]["retain_weight"] if retain_weight is None else retain_weight
        refusal_weight = MODE_DEFAULTS[mode]["refusal_weight"] if refusal_weight is None else refusal_weight
        if top_fraction > 1:  # (0, 1]: the type says > 0
            raise ValueError(
                f"AttentionShifting: top_fraction={top_fraction!r} is invalid, expected a number in (0, 1]"
            )
        if suppression_weight == 0 and refusal_weight == 0:
            raise ValueError("suppression_weight and refusal_weight are both 0: nothing would be unlearned")
        if adapter_position not in ("output", "input"):
            raise ValueError(f"adapter_position must be 'output' or 'input', got '{adapter_position}'")
        if layers is not None and len(layers) == 0:
            raise ValueError("layers must name at least one layer (e.g. [-2, -1]), got []")
        check_retain_loss(retain_loss)
        spec = CausalLMSpec(**lm) if isinstance(lm, dict) else lm
        if spec is not None and spec.lora is not None:
            raise ValueError("AttentionShifting trains its own attention adapters: drop `lora` from the model spec")
        super().__init__(spec, lr=lr, **kwargs)
        # the resolved defaults, also where LightningCLI gave the hyperparameters as written (None)
        self.hparams.update(retain_weight=retain_weight, refusal_weight=refusal_weight, fact_tags=fact_tags)

        blocks = decoder_layers(self.model)
        chosen = layers if layers is not None else [-2, -1]
        for index in chosen:
            decoder_layer(self.model, index)  # an index the model lacks is an error naming the valid ones
        self.layer_indices = sorted({index % len(blocks) for index in chosen})
        if adapter_position == "output" and self.layer_indices[0] == 0:
            rank_zero_warn(
                "AttentionShifting: layer 0's attention comes before every adapter when adapter_position='output', "
                "so its terms cannot change; target later layers or use adapter_position='input'"
            )

        if self.model.config._attn_implementation != "eager":
            self.model.set_attn_implementation("eager")  # to read attention probabilities
        self.model.requires_grad_(False)
        self.shift_adapters: list[AttentionAdapter] = []
        for block in blocks:
            attention = self_attention(block)
            adapter = AttentionAdapter(self.model.config.hidden_size, adapter_size, adapter_position)
            attention.add_module(ADAPTER_NAME, adapter)
            if adapter_position == "input":
                attention.register_forward_pre_hook(adapter.input_hook, with_kwargs=True)
            attention.register_forward_hook(adapter.output_hook)
            self.shift_adapters.append(adapter)
        self.special_ids = sorted(set(self.tokenizer.all_special_ids))
        self._importance_cache: dict[tuple[str, int], torch.Tensor] = {}
        self._tag_cache: dict[tuple[str, int], torch.Tensor] = {}
        if mode == "paper":
            _require_tagger()

    # -- passes through the network ------------------------------------------------------------

    @contextmanager
    def _pass(self, adapters: bool) -> Iterator[list[torch.Tensor]]:
        """Adapters on (pi_theta) or off (pi_ref); yields the attention probabilities [B, H, T, T] of
        ``layers``, filled by the forward run inside."""
        attentions = {str(i): self_attention(decoder_layer(self.model, i)) for i in self.layer_indices}
        for adapter in self.shift_adapters:
            adapter.enabled = adapters
        maps: list[torch.Tensor] = []
        try:
            with hooks.capture(attentions, element=1) as captured:
                yield maps
                maps.extend(_attention_probabilities(captured, attentions))
        finally:
            for adapter in self.shift_adapters:
                adapter.enabled = True

    def attention_maps(self, batch: dict[str, Any], adapters: bool = True) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits and the attention [B, H, T, T] of each layer in ``layers``, with adapters on or off."""
        with self._pass(adapters) as maps:
            logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return logits, maps

    def candidates(self, batch: dict[str, Any]) -> torch.Tensor:
        """[B, T] bool: tokens that may be fact-bearing or essential (not padding, not special)."""
        special = torch.tensor(self.special_ids, device=batch["input_ids"].device)
        return batch["attention_mask"].bool() & ~torch.isin(batch["input_ids"], special)

    def _cache_keys(self, batch: dict[str, Any]) -> list[tuple[str, int]] | None:
        if "index" not in batch:
            return None
        return [(str(batch.get("split")), int(i)) for i in batch["index"]]

    def reference_pass(
        self, batch: dict[str, Any], importance: bool = True
    ) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None]:
        """pi_ref's logits, attention maps of ``layers`` and (if asked) importance scores s [B, T].

        Scores already computed for the batch's samples come from the cache; otherwise the
        answer NLL is differentiated with respect to the input embeddings (no parameter gets a
        gradient).
        """
        keys = self._cache_keys(batch)
        valid = batch["attention_mask"].bool()
        cached = (
            importance
            and keys is not None
            and all(
                key in self._importance_cache and self._importance_cache[key].numel() == int(valid[row].sum())
                for row, key in enumerate(keys)
            )
        )
        with eval_mode(self.model):  # pi_ref is evaluated without dropout
            if not importance or cached:
                with torch.no_grad():
                    logits, maps = self.attention_maps(batch, adapters=False)
                scores = None
                if cached:
                    scores = torch.zeros(valid.shape, device=valid.device)
                    for row, key in enumerate(keys):
                        scores[row, valid[row]] = self._importance_cache[key].to(valid.device)
                return logits, maps, scores
            with torch.enable_grad():
                embeddings = self.model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_(True)
                with self._pass(adapters=False) as maps:
                    logits = self.model(inputs_embeds=embeddings, attention_mask=batch["attention_mask"]).logits
                (gradient,) = torch.autograd.grad(token_nll(logits, batch["labels"]).sum(), embeddings)
        maps = [m.detach() for m in maps]
        received = attention_received(torch.stack(maps).float().mean(0), answer_query_mask(batch["labels"]))
        scores = importance_scores(gradient.float().norm(dim=-1), received, self.candidates(batch))
        if keys is not None:
            for row, key in enumerate(keys):
                self._importance_cache[key] = scores[row, valid[row]].detach().cpu()
        return logits.detach(), maps, scores.detach()

    def selected_tokens(self, batch: dict[str, Any], scores: torch.Tensor) -> torch.Tensor:
        """[B, T] bool: the top ``top_fraction`` of candidates by importance (F or E)."""
        return top_fraction_mask(scores, self.candidates(batch), self.hparams.top_fraction)

    def part_of_speech_masks(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Paper mode's masks [B, T] bool: ``fact`` marks the tokens of the question and answer words
        whose Universal POS is in ``fact_tags``, ``other`` the tokens of their other words; template,
        special and padding tokens are in neither. Computed once per sample (cached by index)."""
        keys = self._cache_keys(batch)
        valid = batch["attention_mask"].bool()
        codes = torch.zeros(valid.shape, dtype=torch.long, device=valid.device)  # 0 neither, 1 fact, 2 other
        for row in range(valid.shape[0]):
            key = keys[row] if keys is not None else None
            cached = self._tag_cache.get(key) if key is not None else None
            if cached is None or cached.numel() != int(valid[row].sum()):
                cached = self._tag_codes(batch, row)
                if key is not None:
                    self._tag_cache[key] = cached
            codes[row, valid[row]] = cached.to(valid.device)
        return codes == 1, codes == 2

    def _tag_codes(self, batch: dict[str, Any], row: int) -> torch.Tensor:
        """The 0/1/2 codes of one sample's valid positions (see :meth:`part_of_speech_masks`)."""
        if "question" not in batch or "answer" not in batch:
            raise ValueError(
                "AttentionShifting(mode='paper') tags the question and answer texts: the batch has no "
                "'question'/'answer' entries (use ForgetRetainDataModule)"
            )
        valid = batch["attention_mask"][row].bool()
        ids = batch["input_ids"][row][valid].tolist()
        content = [i for i, token in enumerate(ids) if token not in self.special_ids]
        text, spans = token_char_spans(self.tokenizer, [ids[i] for i in content])
        # the question appears verbatim in the prompt; the answer starts at the first answer token
        answer_tokens = batch["labels"][row][valid].ne(IGNORE_INDEX).tolist()
        first_answer = next((k for k, i in enumerate(content) if answer_tokens[i]), len(content))
        answer_start = spans[first_answer][0] if first_answer < len(spans) else len(text)
        question_start = max(text.find(batch["question"][row]), 0)
        words = [
            *_place(tag_words(batch["question"][row]), batch["question"][row], text, question_start),
            *_place(tag_words(batch["answer"][row]), batch["answer"][row], text, answer_start),
        ]
        fact_tags = set(self.hparams.fact_tags)
        codes = torch.zeros(len(ids), dtype=torch.long)
        for i, tag in zip(content, token_tags(spans, words), strict=True):
            codes[i] = 0 if tag is None else 1 if tag in fact_tags else 2
        return codes

    # -- the loss -----------------------------------------------------------------------------

    def _shift_loss(
        self, maps: list[torch.Tensor], ref_maps: list[torch.Tensor], weights: torch.Tensor, queries: torch.Tensor
    ) -> torch.Tensor:
        terms = [
            attention_kl(shifted_attention(ref.float(), weights), current, queries)
            for current, ref in zip(maps, ref_maps, strict=True)
        ]
        return torch.stack(terms).mean()

    def paper_terms(self, forget: dict[str, Any], retain: dict[str, Any]) -> ShiftTerms:
        """L_ASP and L_AKL as released (module docstring, paper mode)."""
        hp = self.hparams
        fact, other = self.part_of_speech_masks(forget)
        valid = forget["attention_mask"].bool()
        _, ref_forget_maps, _ = self.reference_pass(forget, importance=False)
        forget_logits, forget_maps = self.attention_maps(forget)
        suppression = torch.stack(
            [
                softmax_kl(
                    current,
                    released_suppression_target(ref.float(), fact, other, valid, hp.suppress_factor, hp.boost_factor),
                    valid,
                    dim=-1,
                )
                for current, ref in zip(forget_maps, ref_forget_maps, strict=True)
            ]
        ).mean()
        valid = retain["attention_mask"].bool()
        ref_retain_logits, ref_retain_maps, _ = self.reference_pass(retain, importance=False)
        retain_logits, retain_maps = self.attention_maps(retain)
        retention = torch.stack(
            [
                softmax_kl(ref, current, valid, dim=-1) + softmax_kl(ref, current, valid, dim=-2)
                for current, ref in zip(retain_maps, ref_retain_maps, strict=True)
            ]
        ).mean()
        return ShiftTerms(
            suppression, retention, fact, forget_logits, forget_maps, ref_forget_maps, retain_logits, ref_retain_logits
        )

    def trustlit_terms(self, forget: dict[str, Any], retain: dict[str, Any]) -> ShiftTerms:
        """L_sup and L_ret of trustlit's variant (module docstring, trustlit mode)."""
        hp = self.hparams
        _, ref_forget_maps, forget_scores = self.reference_pass(forget, importance=True)
        fact = self.selected_tokens(forget, forget_scores)
        forget_queries = answer_query_mask(forget["labels"])
        forget_logits, forget_maps = self.attention_maps(forget)
        weights = shift_weights(fact, 1.0 - hp.suppress_factor, 1.0 + hp.boost_factor)
        suppression = self._shift_loss(forget_maps, ref_forget_maps, weights, forget_queries)

        need_essential = hp.retain_boost > 0 and hp.retention_weight > 0
        ref_retain_logits, ref_retain_maps, retain_scores = self.reference_pass(retain, importance=need_essential)
        retain_queries = answer_query_mask(retain["labels"])
        retain_logits, retain_maps = self.attention_maps(retain)
        if need_essential:
            weights = shift_weights(self.selected_tokens(retain, retain_scores), 1.0 + hp.retain_boost, 1.0)
        else:
            weights = torch.ones(retain["input_ids"].shape, device=retain_logits.device)
        retention = self._shift_loss(retain_maps, ref_retain_maps, weights, retain_queries)
        return ShiftTerms(
            suppression, retention, fact, forget_logits, forget_maps, ref_forget_maps, retain_logits, ref_retain_logits
        )

    def losses(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """L and its terms (see the module docstring), with attention diagnostics: ``fact_attention``
        and ``fact_attention_ref``, the mean attention mass answer positions put on fact-bearing
        tokens under pi_theta and pi_ref."""
        hp = self.hparams
        forget, retain = batch["forget"], batch["retain"]
        if hp.refusal_weight > 0 and "idk" not in batch:
            raise ValueError(
                "AttentionShifting's refusal term needs refusal answers: set `refusals: default` on the "
                "ForgetRetainDataModule, or refusal_weight=0 for the attention-only objective"
            )
        shift = self.paper_terms(forget, retain) if hp.mode == "paper" else self.trustlit_terms(forget, retain)

        retain_nll = token_mean_nll(*sequence_logprobs_from_logits(shift.retain_logits, retain["labels"]))
        if hp.retain_loss == "nll":
            retain_term = retain_nll
        else:
            retain_term = kl_to_reference(shift.retain_logits, shift.ref_retain_logits, retain["labels"])

        loss = (
            hp.suppression_weight * shift.suppression
            + hp.retention_weight * shift.retention
            + hp.retain_weight * retain_term
        )
        terms = {
            "suppression": shift.suppression.detach(),
            "retention": shift.retention.detach(),
            f"retain_{hp.retain_loss}": retain_term.detach(),
        }
        if hp.refusal_weight > 0:
            refusal = token_mean_nll(*self.logprobs(batch["idk"]))
            loss = loss + hp.refusal_weight * refusal
            terms["refusal_nll"] = refusal.detach()
        with torch.no_grad():
            terms["forget_nll"] = token_mean_nll(*sequence_logprobs_from_logits(shift.forget_logits, forget["labels"]))
            terms["retain_nll"] = retain_nll.detach()
            queries = answer_query_mask(forget["labels"])
            for name, maps in (("fact_attention", shift.forget_maps), ("fact_attention_ref", shift.ref_forget_maps)):
                terms[name] = torch.stack([attention_mass(m, shift.fact, queries) for m in maps]).mean()
        return {"loss": loss, **terms}


__all__ = [
    "AttentionAdapter",
    "AttentionShifting",
    "answer_query_mask",
    "attention_kl",
    "attention_mass",
    "attention_received",
    "importance_scores",
    "released_suppression_target",
    "shift_weights",
    "shifted_attention",
    "softmax_kl",
    "tag_words",
    "token_char_spans",
    "token_tags",
    "top_fraction_mask",
    "universal_tags",
]
