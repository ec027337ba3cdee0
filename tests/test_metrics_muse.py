"""MUSE metrics (trustlit.metrics.muse) against hand-computed numbers, and ROUGE-L F1."""

from __future__ import annotations

import pytest
import torch

import trustlit.metrics.muse as muse
from trustlit.audit.mia import min_k_score
from trustlit.data import load_qa_split
from trustlit.llm.prompts import encode_qa
from trustlit.metrics import (
    knowmem,
    min_k_scores,
    privleak,
    privleak_auc,
    rouge_l_f1,
    verbmem_scores,
)

# --------------------------------------------------------------------------- ROUGE-L F1


def test_rouge_l_f1_hand_computed():
    # LCS = "the cat on mat" (4 of 6 words each way): P = R = 2/3
    assert rouge_l_f1("The cat sat on the mat.", "the cat lay on a mat") == pytest.approx(2 / 3)
    # LCS = "a c": P = 2/5, R = 1, F1 = 2 * 0.4 / 1.4
    assert rouge_l_f1("a b c d e", "a c") == pytest.approx(4 / 7)
    assert rouge_l_f1("a c", "a b c d e") == pytest.approx(4 / 7)
    assert rouge_l_f1("x y", "a b") == 0.0
    assert rouge_l_f1("", "a b") == 0.0
    assert rouge_l_f1("a b", "") == 0.0


def test_knowmem_is_the_mean_rouge_l_f1():
    assert knowmem(["a b c d e", "x"], ["a c", "x"]) == pytest.approx((4 / 7 + 1) / 2)
    with pytest.raises(ValueError, match="as many"):
        knowmem(["a"], [])


# --------------------------------------------------------------------------- Min-K% Prob


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (0.4, -4.5),  # ceil(0.4 * 5) = 2 lowest: -5, -4
        (0.5, -4.0),  # ceil(2.5) = 3: -5, -4, -3
        (0.1, -5.0),  # ceil(0.5) = 1: at least one token
        (1.0, -3.0),  # all
    ],
)
def test_min_k_scores_take_the_ceil_k_lowest_log_probs(k, expected):
    assert min_k_scores([torch.tensor([1.0, 5.0, 3.0, 2.0, 4.0])], k).tolist() == pytest.approx([expected])


def test_min_k_scores_of_ragged_answers_are_the_mia_scorer_on_the_padded_batch():
    nll = [torch.tensor([1.0, 5.0, 3.0, 2.0, 4.0]), torch.tensor([0.5]), torch.tensor([2.0, 1.0])]
    assert min_k_scores(nll, k=0.4).tolist() == pytest.approx([-4.5, -0.5, -2.0])
    padded = torch.tensor([[-1.0, -5.0, -3.0, -2.0, -4.0], [-0.5, 0, 0, 0, 0], [-2.0, -1.0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    assert torch.allclose(min_k_scores(nll, k=0.4), min_k_score(padded, mask, k=0.4))


def test_min_k_scores_errors():
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        min_k_scores([torch.tensor([1.0])], 0.0)
    with pytest.raises(ValueError, match="no token"):
        min_k_scores([torch.tensor([1.0]), torch.tensor([])])


# --------------------------------------------------------------------------- AUC and PrivLeak


def test_privleak_auc_scores_forget_by_the_min_k_loss():
    memorised, unseen = torch.tensor([-0.1, -0.2]), torch.tensor([-3.0, -4.0])
    # forget answers far likelier than holdout ones: no forget answer looks less like training data
    assert privleak_auc(memorised, unseen) == 0.0
    assert privleak_auc(unseen, memorised) == 1.0  # over-unlearned
    assert privleak_auc(torch.tensor([-1.0, -4.0]), torch.tensor([-3.0, -2.0])) == pytest.approx(1 / 2)
    assert privleak_auc(torch.tensor([-1.0, -5.0]), torch.tensor([-5.0])) == pytest.approx(1 / 4)  # a tie is 1/2


def test_privleak_formula():
    assert privleak(0.6, 0.5) == pytest.approx(20.0)
    assert privleak(0.0, 0.5) == pytest.approx(-100.0)  # MUSE's target model: under-unlearning
    assert privleak(0.47, 0.47) == 0.0
    with pytest.raises(ValueError, match="positive"):
        privleak(0.5, 0.0)


# --------------------------------------------------------------------------- VerbMem


CONTINUATION = "Antwerp, Belgium in 1932 magical realism"  # words of the first fictitious answers


def test_verbmem_continues_the_first_half_of_the_answer(monkeypatch, tokenizer, tiny_lm):
    records = list(load_qa_split("fictitious", "forget10", None))[:4]
    calls = []

    def fake_generate(model, tok, batch, max_new_tokens):
        calls.append((batch["prompt_input_ids"], batch["prompt_attention_mask"], max_new_tokens))
        return [CONTINUATION] * batch["prompt_input_ids"].size(0)

    monkeypatch.setattr(muse, "generate_greedy", fake_generate)
    scores = verbmem_scores(tiny_lm, tokenizer, records, "plain", 128, batch_size=3, slack_tokens=2)
    expected_prompts, expected = [], []
    for record in records:
        sample = encode_qa(tokenizer, record["question"], record["answer"], "plain", 128)
        answer_ids = sample["input_ids"][len(sample["prompt_ids"]) :]
        half = len(answer_ids) // 2
        rest = answer_ids[half:]
        expected_prompts.append((tuple(sample["prompt_ids"] + answer_ids[:half]), len(rest) + 2))
        expected.append(rouge_l_f1(CONTINUATION, tokenizer.decode(rest, skip_special_tokens=True)))
    seen = [
        (tuple(row[mask.bool()].tolist()), budget)
        for ids, masks, budget in calls
        for row, mask in zip(ids, masks, strict=True)
    ]
    assert sorted(seen) == sorted(expected_prompts)
    assert scores.tolist() == pytest.approx(expected)
    assert max(expected) > 0, "the check needs a continuation that overlaps some reference"


def test_verbmem_does_not_depend_on_the_batch_size(tokenizer, tiny_lm):
    records = list(load_qa_split("fictitious", "forget10", None))[:4]
    one = verbmem_scores(tiny_lm, tokenizer, records, "chat", 128, batch_size=1, slack_tokens=1)
    four = verbmem_scores(tiny_lm, tokenizer, records, "chat", 128, batch_size=4, slack_tokens=1)
    assert one.shape == (4,) and ((one >= 0) & (one <= 1)).all()
    assert torch.allclose(one, four)
