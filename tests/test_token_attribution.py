"""Per-token attribution baselines (trustlit/interpret/token_attribution.py) on hand-checkable cases."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from trustlit.interpret.token_attribution import (
    attention_rollout,
    gradient_x_input,
    integrated_gradients,
    occlusion,
    rank_spans,
    rollout,
    token_scores,
)
from trustlit.interpret.tracing import prompt_parts, target_logprobs
from trustlit.llm.loading import build_tiny_causal_lm, build_tokenizer

QUESTION = "Tell me, cozy epic Velvet Lantern true world, where was Amara Abernathy born?"
TARGET = "Lisbon"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def tiny(tokenizer):
    model, _ = build_tiny_causal_lm(hidden_size=32, num_layers=2, num_heads=2, tokenizer=tokenizer, seed=3)
    return model.eval()


class OneTokenLM(nn.Module):
    """Causal: the logit of ``target_id`` is +4 at positions that follow ``key_id``, else -4; nothing else matters."""

    def __init__(self, vocab_size: int, key_id: int, target_id: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, 4)
        self.key_id, self.target_id, self.vocab_size = key_id, target_id, vocab_size

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def forward(self, input_ids, attention_mask=None):
        seen = (input_ids == self.key_id).cumsum(dim=1) > 0
        logits = torch.zeros(*input_ids.shape, self.vocab_size)
        logits[..., self.target_id] = torch.where(seen, 4.0, -4.0)
        return SimpleNamespace(logits=logits)


def test_occlusion_scores_only_the_token_that_matters(tokenizer):
    parts = prompt_parts(tokenizer, QUESTION, "chat")
    key = tokenizer(" Velvet", add_special_tokens=False)["input_ids"][0]
    (target_id,) = tokenizer(" Lisbon", add_special_tokens=False)["input_ids"]
    model = OneTokenLM(len(tokenizer), key, target_id)
    scores = occlusion(model, tokenizer, QUESTION, " Lisbon", prompt_format="chat")
    v = len(tokenizer)
    on, off = math.log(math.exp(4) / (math.exp(4) + v - 1)), math.log(math.exp(-4) / (math.exp(-4) + v - 1))
    expected = torch.zeros(len(parts.question))
    expected[parts.question.index(key)] = on - off
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)


def manual_gradient_x_input(model, tokenizer, question, target):
    parts = prompt_parts(tokenizer, question, "chat")
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([[*parts.prefix, *parts.question, *parts.suffix, *target_ids]])
    embeddings = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    logprobs = model(inputs_embeds=embeddings).logits.log_softmax(-1)[0]
    start = ids.size(1) - len(target_ids)
    f = sum(logprobs[start - 1 + j, t] for j, t in enumerate(target_ids))
    (gradient,) = torch.autograd.grad(f, embeddings)
    q = slice(len(parts.prefix), len(parts.prefix) + len(parts.question))
    return (gradient * embeddings)[0, q].sum(-1).detach(), parts, target_ids


def test_gradient_x_input_equals_a_manual_autograd_computation(tokenizer, tiny):
    expected, _, _ = manual_gradient_x_input(tiny, tokenizer, QUESTION, TARGET)
    got = gradient_x_input(tiny, tokenizer, QUESTION, TARGET, prompt_format="chat")
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_integrated_gradients_are_complete(tokenizer, tiny):
    """Completeness: the attributions sum to f(x) - f(baseline), the baseline the pad token at every prompt position."""
    parts = prompt_parts(tokenizer, QUESTION, "chat")
    target_ids = tokenizer(TARGET, add_special_tokens=False)["input_ids"]
    scores = integrated_gradients(tiny, tokenizer, QUESTION, TARGET, prompt_format="chat", n_steps=300)
    baseline = [tokenizer.pad_token_id] * len(parts.question)
    f_x, f_base = target_logprobs(tiny, tokenizer, parts, [parts.question, baseline], target_ids).tolist()
    assert scores.sum().item() == pytest.approx(f_x - f_base, rel=0.02, abs=1e-3)


def test_rollout_of_hand_made_attentions():
    identity = torch.eye(3).unsqueeze(0)
    torch.testing.assert_close(rollout([identity, identity]), torch.eye(3, dtype=torch.float64))
    causal = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])
    heads = torch.stack([causal, torch.eye(3)])  # mean over heads: (causal + I) / 2
    mixed = 0.5 * (causal + torch.eye(3)) / 2 + 0.5 * torch.eye(3)
    mixed = mixed / mixed.sum(-1, keepdim=True)
    torch.testing.assert_close(rollout([heads, heads]), (mixed @ mixed).double())
    assert torch.allclose(rollout([heads]).sum(-1), torch.ones(3, dtype=torch.float64))


def test_attention_rollout_on_a_tiny_model(tokenizer, tiny):
    scores = attention_rollout(tiny, tokenizer, QUESTION, TARGET, prompt_format="chat")
    parts = prompt_parts(tokenizer, QUESTION, "chat")
    assert scores.shape == (len(parts.question),) and (scores > 0).all() and scores.sum() < 1
    before = tiny.config._attn_implementation
    attention_rollout(tiny, tokenizer, QUESTION, TARGET, prompt_format="chat")
    assert tiny.config._attn_implementation == before


def test_rank_spans_ranks_by_the_sum_of_token_scores(tokenizer):
    token_ids = list(range(100, 106))
    scores = torch.tensor([0.1, 2.0, -1.0, 1.5, 0.3, 1.0])
    ranked = rank_spans(tokenizer, token_ids, scores, max_length=2, beam_width=6)
    pairs = [s for s in ranked if len(s.positions) == 2]
    brute = sorted(itertools.combinations(range(6), 2), key=lambda c: -scores[list(c)].sum().item())
    assert [s.positions for s in pairs[:5]] == brute[:5]
    assert pairs[0].positions == (1, 3) and pairs[0].score == pytest.approx(3.5)
    assert ranked[0].positions == (1, 3)  # the best span overall, also against single tokens


def test_bad_input_is_refused_in_one_line(tokenizer, tiny):
    with pytest.raises(ValueError, match="the prompt is empty"):
        occlusion(tiny, tokenizer, " ", TARGET)
    with pytest.raises(ValueError, match="the target is empty"):
        gradient_x_input(tiny, tokenizer, QUESTION, "")
    with pytest.raises(ValueError, match=r"unknown attribution method 'lime'.*occlusion"):
        token_scores("lime", tiny, tokenizer, QUESTION, TARGET)
    with pytest.raises(ValueError, match="3 scores for 2 tokens"):
        rank_spans(tokenizer, [1, 2], torch.zeros(3), max_length=1)
