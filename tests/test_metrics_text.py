"""ROUGE-L (trustlit.metrics.text) equals Google's rouge-score as TOFU calls it, on real TOFU answers."""

from __future__ import annotations

import json

import pytest
from helpers import SHARED_DATA
from rouge_score.rouge_scorer import RougeScorer

from trustlit.metrics import is_degenerate, repetition, rouge_l_f1, rouge_l_recall

TOFU = SHARED_DATA / "tofu"
NUM_RECORDS = 60


def tofu_pairs() -> list[tuple[str, str]]:
    """(generated-like text, reference answer) pairs: each of 60 retain answers against its paraphrase, its
    first perturbed answer, its first half, and the next record's answer."""
    lines = (TOFU / "retain_perturbed.json").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines[:NUM_RECORDS]]
    pairs = []
    for i, record in enumerate(records):
        answer, words = record["answer"], record["answer"].split()
        other = records[(i + 1) % len(records)]["answer"]
        for prediction in (
            record["paraphrased_answer"],
            record["perturbed_answer"][0],
            " ".join(words[: len(words) // 2]),
            other,
        ):
            pairs.append((prediction, answer))
    return pairs


def test_rouge_l_equals_rouge_score_on_tofu_answers():
    # TOFU's eval_rouge_recall: RougeScorer(["rouge1", "rougeL"], use_stemmer=True).score(gt, gen)["rougeL"].recall;
    # MUSE's scorer has use_stemmer=False
    pairs = tofu_pairs()
    assert len(pairs) >= 200
    recalls = {}
    for stem in (True, False):
        scorer = RougeScorer(["rougeL"], use_stemmer=stem)
        expected = [scorer.score(reference, prediction)["rougeL"] for prediction, reference in pairs]
        recalls[stem] = [rouge_l_recall(p, r, stem=stem) for p, r in pairs]
        assert max(abs(ours - e.recall) for ours, e in zip(recalls[stem], expected, strict=True)) <= 1e-12
        f1 = [rouge_l_f1(p, r, stem=stem) for p, r in pairs]
        assert max(abs(ours - e.fmeasure) for ours, e in zip(f1, expected, strict=True)) <= 1e-12
        # not vacuous: recall differs from precision on these pairs (the argument order matters)
        assert sum(e.recall != e.precision for e in expected) >= len(pairs) // 2
    assert sum(s != u for s, u in zip(recalls[True], recalls[False], strict=True)) >= 10, "stemming changes some"


def test_stemming_by_hand():
    # stemmed: she is write novel | she write a novel -> LCS 3 of 4 reference words; unstemmed only "she" matches
    assert rouge_l_recall("She is writing novels.", "she writes a novel") == pytest.approx(3 / 4)
    assert rouge_l_recall("She is writing novels.", "she writes a novel", stem=False) == pytest.approx(1 / 4)
    assert rouge_l_f1("She is writing novels.", "she writes a novel") == pytest.approx(3 / 4)
    assert rouge_l_f1("She is writing novels.", "she writes a novel", stem=False) == pytest.approx(1 / 4)
    # "wrote" is irregular, Porter leaves it: he write novel | he wrote a novel -> "he", "novel"
    assert rouge_l_recall("He writes novels", "he wrote a novel") == pytest.approx(2 / 4)
    assert rouge_l_recall("He writes novels", "he wrote a novel", stem=False) == pytest.approx(1 / 4)
    # recall divides by the reference, precision (hence F1) also by the prediction
    assert rouge_l_recall("a b c d e", "a c") == 1.0
    assert rouge_l_f1("a b c d e", "a c") == pytest.approx(2 * (2 / 5) * 1 / (2 / 5 + 1))


def test_empty_texts_score_zero():
    assert rouge_l_recall("", "a b") == 0.0
    assert rouge_l_recall("anything", "") == 0.0
    assert rouge_l_recall("...", "!!") == 0.0
    assert rouge_l_f1("a b", "") == 0.0


@pytest.mark.parametrize(
    ("prediction", "reference", "match"),
    [(None, "a", "prediction must be a string"), ("a", ["a"], "reference must be a string")],
)
def test_non_strings_are_refused(prediction, reference, match):
    with pytest.raises(ValueError, match=match):
        rouge_l_recall(prediction, reference)
    with pytest.raises(ValueError, match=match):
        rouge_l_f1(prediction, reference)


def test_repetition_by_hand():
    # bigrams of "a b a b a b": ab ba ab ba ab -> 2 distinct of 5
    assert repetition("a b a b a b", n=2) == pytest.approx(1 - 2 / 5)
    # tokens a , a , a , -> unigrams: 2 distinct of 6 (punctuation marks are tokens, case is ignored)
    assert repetition("A, a, a,", n=1) == pytest.approx(1 - 2 / 6)
    # "_" separates words: x _ y _ x _ y -> bigrams x_ _y y_ _x x_ _y: 4 distinct of 6
    assert repetition("x_y_x_y", n=2) == pytest.approx(1 - 4 / 6)
    assert repetition("too short", n=4) == 0.0
    with pytest.raises(ValueError, match="n >= 1"):
        repetition("a b", n=0)


def test_no_tofu_answer_is_degenerate_and_a_loop_is():
    answers = [
        json.loads(line)["answer"]
        for split in ("retain_perturbed", "forget01_perturbed", "real_authors_perturbed", "world_facts_perturbed")
        for line in (TOFU / f"{split}.json").read_text(encoding="utf-8").splitlines()
    ]
    assert len(answers) > 600
    assert not any(map(is_degenerate, answers))
    # an unlearned model's answer to a forget question (Attention-Shifting, LoRA, lr 1.5e-3): seq-rep-4 about 0.9
    loop = "Basil Mahfouz Al-Kuwaiti often **** himself with his **** himself back into his " + "**** himself " * 20
    assert repetition(loop) > 0.8
    assert is_degenerate(loop)
    assert not is_degenerate(loop, threshold=0.95)
