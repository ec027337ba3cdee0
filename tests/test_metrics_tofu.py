"""TOFU metrics (trustlit.metrics.tofu) against hand-computed numbers, and refusal detection."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import SHARED_DATA
from scipy.stats import ks_2samp

from trustlit.data import load_qa_split
from trustlit.llm.prompts import collate_qa, encode_qa
from trustlit.llm.scoring import sequence_logprobs
from trustlit.metrics import (
    SplitScores,
    answer_rates,
    forget_quality,
    forget_truth_ratio_score,
    harmonic_mean,
    is_non_answer,
    is_refusal,
    model_utility,
    normalised_probability,
    retain_truth_ratio_score,
    score_split,
    summarise_split,
    truth_ratio,
)

TOFU = SHARED_DATA / "tofu"
NAN = math.nan
E = math.e


def jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (TOFU / name).read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------- truth ratio and summaries


def test_truth_ratio_is_paraphrased_over_geometric_mean_of_perturbed_probabilities():
    paraphrased = torch.tensor([1.0, 2.0])
    perturbed = torch.tensor([[2.0, 4.0], [1.0, 1.0]])
    ratio = truth_ratio(paraphrased, perturbed)
    assert ratio.tolist() == pytest.approx([E**2, E**-1])
    # the same number from probabilities: p(para) / (prod_j p(pert_j))^(1/J)
    p_para, p_pert = torch.exp(-paraphrased), torch.exp(-perturbed)
    assert ratio.tolist() == pytest.approx((p_para / p_pert.prod(dim=1).sqrt()).tolist())


def test_truth_ratio_skips_nan_padding_of_shorter_perturbed_lists():
    ratio = truth_ratio(torch.tensor([1.0, 1.0]), torch.tensor([[3.0, NAN], [2.0, 4.0]]))
    assert ratio.tolist() == pytest.approx([E**2, E**2])


def test_forget_and_retain_truth_ratio_summaries():
    ratio = torch.tensor([E**2, E**-1])
    assert forget_truth_ratio_score(ratio) == pytest.approx((E**-2 + E**-1) / 2)
    # max(0, 1 - 1/R): 1 - e^-2 for R = e^2, and 1 - e < 0 clipped to 0 for R = 1/e
    assert retain_truth_ratio_score(ratio) == pytest.approx((1 - E**-2) / 2)
    # the paper's max(0, 1 - R') with R' = 1/R (perturbed over paraphrased) is the same number
    assert retain_truth_ratio_score(ratio) == pytest.approx(float((1 - 1 / ratio).clamp(min=0).mean()))
    assert forget_truth_ratio_score(torch.ones(3)) == pytest.approx(1.0)
    assert retain_truth_ratio_score(torch.ones(3)) == pytest.approx(0.0)


def test_normalised_probability_over_true_and_perturbed_answers():
    answer = torch.tensor([math.log(2), 0.0])  # p_true = 1/2 and 1
    perturbed = torch.tensor([[math.log(4), math.log(4)], [math.log(2), NAN]])  # 1/4 + 1/4, and 1/2
    assert normalised_probability(answer, perturbed).tolist() == pytest.approx([0.5, 2 / 3])


def test_probabilities_and_ratios_stay_finite_for_very_unlikely_answers():
    # exp(-200) is 0 in float32: a naive p_true / (p_true + sum p_pert) would be 0/0
    answer, perturbed = torch.tensor([200.0]), torch.tensor([[201.0, 202.0]])
    assert normalised_probability(answer, perturbed).tolist() == pytest.approx([1 / (1 + E**-1 + E**-2)])
    ratio = truth_ratio(torch.tensor([1.0]), torch.tensor([[200.0, 200.0]]))
    assert torch.isfinite(ratio).all() and float(ratio) == pytest.approx(E**199, rel=1e-6)


def test_summarise_split_uses_plain_or_normalised_probability_by_role():
    scores = SplitScores(
        answers=["a", "b"],
        answer_nll=torch.tensor([math.log(2), 0.0]),
        answer_token_nll=[torch.zeros(1), torch.zeros(1)],
        paraphrased_nll=torch.tensor([1.0, 2.0]),
        perturbed_nll=torch.tensor([[2.0, 4.0], [1.0, 1.0]]),
        generated=["a", "x"],
        rouge_l_recall=torch.tensor([1.0, 0.0]),
    )
    forget, retain, general = (summarise_split(scores, role) for role in ("forget", "retain", "general"))
    assert forget == pytest.approx({"prob": 0.75, "rougeL": 0.5, "truth_ratio": (E**-2 + E**-1) / 2})
    assert retain == pytest.approx({"prob": 0.75, "rougeL": 0.5, "truth_ratio": (1 - E**-2) / 2})
    p_true = torch.tensor([0.5, 1.0])
    p_pert = torch.exp(-scores.perturbed_nll).sum(dim=1)
    assert general["prob"] == pytest.approx(float((p_true / (p_true + p_pert)).mean()))
    with pytest.raises(ValueError, match="role"):
        summarise_split(scores, "holdout")


# --------------------------------------------------------------------------- harmonic mean, model utility


def test_harmonic_mean_hand_computed_and_with_zeros():
    assert harmonic_mean([1.0, 0.5, 0.25]) == pytest.approx(3 / 7)
    assert harmonic_mean([0.5]) == pytest.approx(0.5)
    assert harmonic_mean([0.9, 0.0, 0.8]) == 0.0
    with pytest.raises(ValueError, match="no values"):
        harmonic_mean([])
    with pytest.raises(ValueError, match="non-negative"):
        harmonic_mean([0.5, -0.1])


def test_model_utility_over_the_splits_that_exist():
    retain = {"prob": 1.0, "rougeL": 0.5, "truth_ratio": 0.25}
    real_authors = {"prob": 0.5, "rougeL": 0.5, "truth_ratio": 0.5}
    world_facts = {"prob": 1.0, "rougeL": 1.0, "truth_ratio": 1.0}
    assert model_utility([retain]) == pytest.approx(3 / 7)  # fictitious corpus: retain only
    assert model_utility([retain, real_authors, world_facts]) == pytest.approx(9 / (1 + 2 + 4 + 2 + 2 + 2 + 1 + 1 + 1))
    assert model_utility([retain, {**world_facts, "rougeL": 0.0}]) == 0.0


# --------------------------------------------------------------------------- forget quality


def test_forget_quality_is_the_ks_test_p_value():
    unlearned = [0.2, 0.5, 0.9, 1.3, 0.7, 0.4]
    retain = [0.3, 0.6, 1.1, 0.8, 2.0]
    assert forget_quality(torch.tensor(unlearned), torch.tensor(retain)) == pytest.approx(
        ks_2samp(unlearned, retain).pvalue
    )
    assert forget_quality(unlearned, unlearned) == 1.0
    low, high = torch.linspace(0.1, 0.5, 30), torch.linspace(2.0, 3.0, 30)
    assert forget_quality(low, high) < 1e-10
    # open-unlearning's ratio is the other way up (false / true = 1/R): the KS p-value is the same
    inverse = forget_quality([1 / r for r in unlearned], [1 / r for r in retain])
    assert inverse == pytest.approx(forget_quality(unlearned, retain), abs=1e-12)


# --------------------------------------------------------------------------- refusals


def test_every_idontknow_line_is_a_refusal():
    lines = [line for line in (TOFU / "idontknow.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(lines) >= 99
    assert [line for line in lines if not is_refusal(line)] == []
    assert is_refusal("I DON'T KNOW.") and is_refusal("Honestly, I have no idea who that is.")


def test_tofu_answers_are_not_refusals_except_the_one_that_says_there_is_no_information():
    answers = [record["answer"] for record in jsonl("forget05_perturbed.json")]
    flagged = [answer for answer in answers if is_refusal(answer)]
    assert len(answers) == 200
    # TOFU's own ground truth says "no information" here; it is a hedge, and counted as one
    assert flagged == [
        "There is no definitive information available regarding the authors Moshe Ben-David admires or has been "
        "influenced by."
    ]
    assert not is_refusal("Hina Ameen primarily contributes to the geology genre.")


def test_refusal_non_answer_and_fabrication_rates():
    generated = [
        "I don't know.",
        "The capital is Paris.",
        "It is Berlin.",
        "I'm not sure, maybe Paris.",
        "Nobody knows.",
        "",
        "Nobody knows that it is Berlin.",
        "blank.",
        "It is in" + " The Hague" * 12,
        "Paris" + " Paris" * 12,
    ]
    references = ["Paris"] * 10
    # refusals: 0 and 3; non-answers: 4, 5, 7; correct: 1, 9 (and 3); fabrications: 2 and 6 (a stated wrong fact)
    # and 8, which is degenerate (a loop); 9 loops too but is correct, so not counted
    assert answer_rates(generated, references) == {
        "refusal_rate": 2 / 10,
        "non_answer_rate": 3 / 10,
        "fabrication_rate": 3 / 10,
        "degenerate_rate": 1 / 10,
    }
    with pytest.raises(ValueError, match="as many"):
        answer_rates(generated, references[:2])


def test_non_answers_are_whole_contentless_answers():
    contentless = ["Nobody knows.", "nobody.", "blank.", "", " ... ", "N/A", "Unknown!", "No one knows"]
    stating = ["The author is unknown.", "Nobody knows who wrote it.", "Paris", "I don't know"]
    assert all(map(is_non_answer, contentless))
    assert not any(map(is_non_answer, stating))


# --------------------------------------------------------------------------- scoring a split with a model


def direct_mean_nll(model, tokenizer, question: str, answer: str) -> float:
    sample = {**encode_qa(tokenizer, question, answer, "plain", 128), "index": 0}
    with torch.no_grad():
        sum_logprob, num_tokens = sequence_logprobs(model, collate_qa([sample], tokenizer.pad_token_id))
    return float(-sum_logprob[0] / num_tokens[0])


def test_score_split_matches_sequence_logprobs_and_restores_train_mode(tokenizer, tiny_lm):
    records = list(load_qa_split("fictitious", "forget10", None))[:3]
    records[1] = {**records[1], "perturbed_answer": records[1]["perturbed_answer"][:2]}  # ragged lists
    tiny_lm.train()
    scores = score_split(tiny_lm, tokenizer, records, "forget10", "plain", 128, batch_size=2, max_new_tokens=4)
    assert tiny_lm.training
    assert scores.perturbed_nll.shape == (3, 3)
    assert math.isnan(scores.perturbed_nll[1, 2]) and not scores.perturbed_nll[[0, 2]].isnan().any()
    tiny_lm.eval()
    for i, record in enumerate(records):
        q = record["question"]
        assert float(scores.answer_nll[i]) == pytest.approx(direct_mean_nll(tiny_lm, tokenizer, q, record["answer"]))
        paraphrased = direct_mean_nll(tiny_lm, tokenizer, q, record["paraphrased_answer"])
        assert float(scores.paraphrased_nll[i]) == pytest.approx(paraphrased)
        for j, wrong in enumerate(record["perturbed_answer"]):
            assert float(scores.perturbed_nll[i, j]) == pytest.approx(direct_mean_nll(tiny_lm, tokenizer, q, wrong))
        assert len(scores.answer_token_nll[i]) == len(tokenizer(f" {record['answer']}{tokenizer.eos_token}").input_ids)
        assert float(scores.answer_token_nll[i].mean()) == pytest.approx(float(scores.answer_nll[i]))
    assert len(set(scores.perturbed_nll[0].tolist())) == 3, "each perturbation is scored on its own"
    assert len(scores.generated) == 3 and scores.rouge_l_recall.shape == (3,)
    ratio = torch.exp(scores.perturbed_nll[1, :2].mean() - scores.paraphrased_nll[1])
    assert float(scores.truth_ratio[1]) == pytest.approx(float(ratio))


def test_score_split_uses_the_answer_when_there_is_no_paraphrase(tokenizer, tiny_lm):
    records = jsonl("world_facts_perturbed.json")[:2]
    scores = score_split(tiny_lm, tokenizer, records, "world_facts_perturbed", max_new_tokens=2)
    assert torch.equal(scores.paraphrased_nll, scores.answer_nll)
    assert scores.perturbed_nll.shape == (2, 3)


def test_score_split_without_perturbed_answers_names_the_split(tokenizer, tiny_lm):
    records = jsonl("forget05.json")[:2]
    with pytest.raises(ValueError, match=r"split 'forget05', record 0: no 'perturbed_answer'"):
        score_split(tiny_lm, tokenizer, records, "forget05")
