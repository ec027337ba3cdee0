from __future__ import annotations

import math

import pytest
import torch

from trustlit.llm.module import lr_multiplier
from trustlit.llm.prompts import IGNORE_INDEX, collate_qa, encode_qa, format_qa, resolve_prompt_format
from trustlit.llm.scoring import (
    answer_nll,
    generate_greedy,
    sequence_logprobs,
    sequence_logprobs_from_logits,
    token_nll,
)
from trustlit.metrics import answer_probability, rouge_l_recall

QA = [
    ("Where was Amara Szabo born?", "Amara Szabo was born in Lisbon, Portugal."),
    ("Which award has Bastian Eriksen received?", "He received the Meridian Book Award for a long novel."),
]


def encoded_batch(tokenizer, prompt_format="chat", max_length=128):
    samples = [
        {**encode_qa(tokenizer, q, a, prompt_format, max_length), "index": i, "question": q, "answer": a}
        for i, (q, a) in enumerate(QA)
    ]
    return samples, collate_qa(samples, tokenizer.pad_token_id)


def test_sequence_logprobs_match_hand_computation_with_padding(tokenizer, tiny_lm):
    samples, batch = encoded_batch(tokenizer)
    assert batch["input_ids"].shape[1] == max(len(s["input_ids"]) for s in samples)
    assert len(samples[0]["input_ids"]) != len(samples[1]["input_ids"]), "the batch must contain padding"
    sum_logprob, num_tokens = sequence_logprobs(tiny_lm, batch)
    for i, sample in enumerate(samples):
        ids = torch.tensor([sample["input_ids"]])
        with torch.no_grad():
            logits = tiny_lm(input_ids=ids).logits[0].double()  # unpadded, alone
        expected, count = 0.0, 0
        for t, label in enumerate(sample["labels"]):
            if label == IGNORE_INDEX:
                continue
            row = logits[t - 1]  # position t-1 predicts token t
            expected += float(row[label] - torch.logsumexp(row, dim=0))
            count += 1
        assert int(num_tokens[i]) == count
        assert float(sum_logprob[i]) == pytest.approx(expected, abs=1e-4)


def test_sequence_logprobs_closed_form_on_hand_made_logits():
    # vocab of 3; sample 0: prompt token then answer tokens [2, 1]; sample 1: answer [0] then padding
    logits = torch.zeros(2, 3, 3)
    logits[0, 0] = torch.tensor([0.0, 0.0, math.log(2.0)])  # p(2) = 2/4
    logits[0, 1] = torch.tensor([math.log(3.0), 0.0, 0.0])  # p(1) = 1/5
    logits[1, 0] = torch.tensor([math.log(7.0), 0.0, 0.0])  # p(0) = 7/9
    labels = torch.tensor([[IGNORE_INDEX, 2, 1], [IGNORE_INDEX, 0, IGNORE_INDEX]])
    sum_logprob, num_tokens = sequence_logprobs_from_logits(logits, labels)
    assert num_tokens.tolist() == [2, 1]
    assert sum_logprob[0].item() == pytest.approx(math.log(2 / 4) + math.log(1 / 5), abs=1e-6)
    assert sum_logprob[1].item() == pytest.approx(math.log(7 / 9), abs=1e-6)
    probability = answer_probability(sum_logprob, num_tokens)
    assert probability[0].item() == pytest.approx(math.sqrt(0.5 * 0.2), abs=1e-6)


def test_prompt_tokens_never_contribute_to_the_loss(tokenizer):
    samples, batch = encoded_batch(tokenizer)
    logits = torch.randn(*batch["input_ids"].shape, len(tokenizer), requires_grad=True)
    nll = token_nll(logits, batch["labels"])
    nll.sum().backward()
    predicts_answer = torch.zeros_like(batch["labels"], dtype=torch.bool)
    predicts_answer[:, :-1] = batch["labels"][:, 1:] != IGNORE_INDEX
    grad_norm = logits.grad.norm(dim=-1)
    assert torch.all(grad_norm[~predicts_answer] == 0)
    assert torch.all(grad_norm[predicts_answer] > 0)
    for sample in samples:
        prompt_length = len(sample["prompt_ids"])
        assert sample["labels"][:prompt_length] == [IGNORE_INDEX] * prompt_length
        assert sample["labels"][prompt_length:] == sample["input_ids"][prompt_length:]
        assert sample["input_ids"][:prompt_length] == sample["prompt_ids"]
    assert torch.all(batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX)


def test_answer_nll_is_token_mean_over_the_batch(tokenizer, tiny_lm):
    _, batch = encoded_batch(tokenizer)
    sum_logprob, num_tokens = sequence_logprobs(tiny_lm, batch)
    assert answer_nll(tiny_lm, batch).item() == pytest.approx((-sum_logprob.sum() / num_tokens.sum()).item(), rel=1e-6)


@pytest.mark.parametrize("prompt_format", ["chat", "plain"])
def test_encoded_answer_decodes_to_the_answer_with_its_end_marker(tokenizer, prompt_format):
    question, answer = QA[0]
    sample = encode_qa(tokenizer, question, answer, prompt_format)
    prompt_text, answer_text = format_qa(tokenizer, question, answer, prompt_format)
    answer_ids = sample["input_ids"][len(sample["prompt_ids"]) :]
    assert tokenizer.decode(answer_ids) == answer_text
    assert tokenizer.decode(sample["prompt_ids"]).endswith(prompt_text)
    if prompt_format == "chat":
        assert "<|im_start|>assistant\n" in prompt_text and answer_text.endswith("<|im_end|>")
    else:
        assert prompt_text == f"Question: {question}\nAnswer:" and answer_text.endswith(tokenizer.eos_token)


def test_encode_truncates_the_answer_and_refuses_prompts_that_fill_max_length(tokenizer):
    question, answer = QA[1]
    full = encode_qa(tokenizer, question, answer, "chat", max_length=256)
    prompt_length = len(full["prompt_ids"])
    cut = encode_qa(tokenizer, question, answer, "chat", max_length=prompt_length + 3)
    assert cut["input_ids"] == full["input_ids"][: prompt_length + 3]
    with pytest.raises(ValueError, match="max_length"):
        encode_qa(tokenizer, question, answer, "chat", max_length=prompt_length)


def test_prompt_format_resolution(tokenizer):
    assert resolve_prompt_format(tokenizer, "auto") == "chat"
    assert resolve_prompt_format(tokenizer, "plain") == "plain"
    with pytest.raises(ValueError, match="prompt_format"):
        resolve_prompt_format(tokenizer, "markdown")


def test_prompts_are_left_padded_for_generation(tokenizer):
    samples, batch = encoded_batch(tokenizer)
    shorter = min(range(2), key=lambda i: len(samples[i]["prompt_ids"]))
    row = batch["prompt_input_ids"][shorter]
    mask = batch["prompt_attention_mask"][shorter]
    assert mask[0] == 0 and mask[-1] == 1
    assert row[mask.bool()].tolist() == samples[shorter]["prompt_ids"]
    assert batch["index"].tolist() == [0, 1]


def test_batched_greedy_generation_equals_generation_one_by_one(tokenizer, tiny_lm):
    samples, batch = encoded_batch(tokenizer)
    together = generate_greedy(tiny_lm, tokenizer, batch, max_new_tokens=8)
    alone = [generate_greedy(tiny_lm, tokenizer, collate_qa([s], tokenizer.pad_token_id), 8)[0] for s in samples]
    assert together == alone


def test_rouge_l_recall_closed_form():
    assert rouge_l_recall("the cat sat on the mat", "The cat is on the mat.") == pytest.approx(5 / 6)
    assert rouge_l_recall("mat the on", "the cat on the mat") == pytest.approx(2 / 5)
    assert rouge_l_recall("", "a b") == 0.0
    assert rouge_l_recall("anything", "") == 0.0


def test_answer_probability_refuses_empty_answers():
    with pytest.raises(ValueError, match="no answer token"):
        answer_probability(torch.tensor([0.0]), torch.tensor([0]))


def test_learning_rate_schedules():
    assert [lr_multiplier(s, 4, 20, "constant") for s in (0, 3, 4, 19)] == [0.25, 1.0, 1.0, 1.0]
    assert lr_multiplier(12, 4, 20, "linear") == pytest.approx(0.5)
    assert lr_multiplier(12, 4, 20, "cosine") == pytest.approx(0.5)
    assert lr_multiplier(20, 4, 20, "cosine") == pytest.approx(0.0)
