"""Membership-inference scorers and metrics (trustlit.audit.mia) against hand computations and sklearn, and the
MembershipInference callback end to end on a tiny Llama fine-tuned in the test."""

from __future__ import annotations

import json
import math
import zlib

import lightning as L
import pytest
import torch
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sklearn_roc_curve

from trustlit import CausalLMFineTuning, CausalLMSpec
from trustlit.audit.mia import (
    SIGMA_FLOOR,
    MembershipInference,
    loss_score,
    min_k_plus_plus_score,
    min_k_score,
    model_token_statistics,
    pad_token_logprobs,
    reference_score,
    roc_auc,
    roc_curve,
    token_statistics,
    tpr_at_fpr,
    zlib_entropy,
    zlib_score,
)
from trustlit.data import FictitiousConfig, QADataModule
from trustlit.llm.loading import build_tiny_causal_lm, build_tokenizer
from trustlit.llm.prompts import IGNORE_INDEX, collate_qa
from trustlit.llm.scoring import encode_pairs, sequence_logprobs_from_logits

pytestmark = pytest.mark.usefixtures("one_thread")

LOGP = torch.tensor([[-1.0, -5.0, -3.0, -2.0, -4.0], [-0.5, -1.5, 0.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])

# --------------------------------------------------------------------------- scorers


def test_loss_score_is_the_mean_token_log_prob():
    assert loss_score(LOGP, MASK).tolist() == pytest.approx([-3.0, -1.0])


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (0.2, [-5.0, -1.5]),  # ceil(1) = 1 of 5; ceil(0.4) = 1 of 2
        (0.4, [-4.5, -1.5]),  # ceil(2) = 2: -5, -4
        (0.5, [-4.0, -1.5]),  # ceil(2.5) = 3: -5, -4, -3; ceil(1) = 1
        (0.6, [-4.0, -1.0]),  # ceil(3) = 3 (not 4 from 0.6 * 5 = 3.0000000000000004); ceil(1.2) = 2
        (1.0, [-3.0, -1.0]),  # every token: LOSS
    ],
)
def test_min_k_takes_the_ceil_k_lowest_log_probs(k, expected):
    assert min_k_score(LOGP, MASK, k).tolist() == pytest.approx(expected)


def hand_logits() -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """Logits [1, 3, 3] and labels [1, 3] with next-token distributions worked out by hand.

    Position 0: logits (0, 0, log 2) -> p = (1/4, 1/4, 1/2), log p = (-2 log 2, -2 log 2, -log 2):
    mu = -1.5 log 2, sigma^2 = 1/2 (log 2 / 2)^2 + 1/2 (log 2 / 2)^2 -> sigma = log 2 / 2; label 2: z = +1.
    Position 1: logits (0, log 3, -inf) -> p = (1/4, 3/4, 0): mu = -log 4 + 3/4 log 3,
    sigma^2 = (1/4)(3/4)(log 3)^2 (two-point law) -> sigma = sqrt(3)/4 log 3; label 0: log p - mu = -3/4 log 3,
    z = -sqrt(3). The -inf logit checks that a zero-probability token adds nothing (not NaN).
    """
    logits = torch.tensor([[[0.0, 0.0, math.log(2)], [0.0, math.log(3), -math.inf], [0.0, 0.0, 0.0]]])
    labels = torch.tensor([[IGNORE_INDEX, 2, 0]])
    return logits, labels, [1.0, -math.sqrt(3)]


def test_token_statistics_by_hand():
    logits, labels, z = hand_logits()
    logp, mu, sigma, mask = token_statistics(logits, labels)
    assert logp[0].tolist() == pytest.approx([-math.log(2), -math.log(4)])
    assert mu[0].tolist() == pytest.approx([-1.5 * math.log(2), -math.log(4) + 0.75 * math.log(3)])
    assert sigma[0].tolist() == pytest.approx([math.log(2) / 2, math.sqrt(3) / 4 * math.log(3)])
    assert mask.tolist() == [[True, True]]
    assert ((logp - mu) / sigma)[0].tolist() == pytest.approx(z)


@pytest.mark.parametrize(("k", "expected"), [(0.5, -math.sqrt(3)), (1.0, (1 - math.sqrt(3)) / 2)])
def test_min_k_plus_plus_by_hand(k, expected):
    logits, labels, _ = hand_logits()
    logp, mu, sigma, mask = token_statistics(logits, labels)
    assert min_k_plus_plus_score(logp, mu, sigma, mask, k).item() == pytest.approx(expected)


def test_min_k_plus_plus_floors_sigma_of_a_one_hot_distribution():
    logp, mu, sigma = torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), torch.tensor([[0.0]])
    score = min_k_plus_plus_score(logp, mu, sigma, torch.tensor([[True]]), k=1.0)
    assert score.item() == pytest.approx(0.5 / SIGMA_FLOOR)


def test_zlib_score_divides_loss_by_the_compressed_size():
    # "abc": 2-byte zlib header, one fixed-Huffman block (3 + 3 * 8 + 7 bits = 5 bytes), 4-byte Adler-32
    assert zlib_entropy("abc") == 11
    texts = ["abc", "the cat sat on the mat " * 4]
    expected = [-3.0 / 11, -1.0 / len(zlib.compress(texts[1].encode()))]
    assert zlib_score(LOGP, MASK, texts).tolist() == pytest.approx(expected)
    # same likelihood, less compressible text: looks more like a member (Carlini et al.'s ratio, sign flipped)
    varied, repetitive = "".join(chr(33 + i) for i in range(90)), "ab" * 45
    assert zlib_score(LOGP[:1], MASK[:1], [varied])[0] > zlib_score(LOGP[:1], MASK[:1], [repetitive])[0]


def test_reference_score_is_target_minus_reference_mean_log_prob():
    ref = torch.tensor([[-2.0, -2.0, -2.0, -2.0, -2.0], [-3.0, -3.0, 9.0, 9.0, 9.0]])
    assert reference_score(LOGP, ref, MASK).tolist() == pytest.approx([-1.0, 2.0])


def test_padding_never_changes_a_score():
    """Padded positions hold garbage (random, -inf, NaN), the batch gets wider: every score is unchanged."""
    mu, sigma = torch.full_like(LOGP, -2.0), torch.full_like(LOGP, 0.5)
    texts = ["abc", "de"]

    def all_scores(logp, mu, sigma, mask):
        return torch.stack(
            [
                loss_score(logp, mask),
                min_k_score(logp, mask, 0.4),
                min_k_plus_plus_score(logp, mu, sigma, mask, 0.4),
                zlib_score(logp, mask, texts),
                reference_score(logp, mu, mask),
            ]
        )

    clean = all_scores(LOGP, mu, sigma, MASK)
    wide = torch.cat([LOGP, torch.randn(2, 3)], dim=1)
    wide[~torch.cat([MASK.bool(), torch.zeros(2, 3, dtype=torch.bool)], dim=1)] = torch.tensor(
        [math.nan, -math.inf, 7.0, math.nan, -math.inf, 7.0, 1.0, 2.0, 3.0]
    )
    wide_mask = torch.cat([MASK, torch.zeros(2, 3, dtype=MASK.dtype)], dim=1).bool()
    widen = lambda t: torch.cat([t, torch.randn(2, 3).abs()], dim=1)  # noqa: E731
    assert torch.allclose(all_scores(wide, widen(mu), widen(sigma), wide_mask), clean)
    assert torch.allclose(all_scores(LOGP, mu, sigma, MASK.bool()), clean), "bool and 0/1 masks agree"


def test_pad_token_logprobs():
    logp, mask = pad_token_logprobs([torch.tensor([-1.0, -2.0, -3.0]), torch.tensor([-4.0])])
    assert logp.tolist() == [[-1.0, -2.0, -3.0], [-4.0, 0.0, 0.0]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    assert loss_score(logp, mask).tolist() == pytest.approx([-2.0, -4.0])


def test_model_token_statistics_match_the_sequence_log_probs(tokenizer, tiny_lm):
    samples = encode_pairs(tokenizer, ["Who wrote it?", "Where?"], ["Ann Lee wrote it.", "In Paris."], "plain", 64)
    batch = collate_qa(samples, tokenizer.pad_token_id)
    logp, mu, sigma, mask = model_token_statistics(tiny_lm, batch)
    logits = tiny_lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    total, count = sequence_logprobs_from_logits(logits, batch["labels"])
    assert torch.allclose(torch.where(mask, logp, 0).sum(dim=1), total, atol=1e-5)
    assert mask.sum(dim=1).tolist() == count.tolist()
    assert (sigma[mask] > 0).all() and (mu[mask] < 0).all()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: loss_score(LOGP[0], MASK[0]), r"logp must be a float tensor \[B, T\]"),
        (lambda: loss_score(LOGP.long(), MASK), "float tensor"),
        (lambda: loss_score(LOGP, MASK[:, :3]), "mask must have logp's shape"),
        (lambda: loss_score(LOGP, MASK * 2), "bool or 0/1"),
        (lambda: loss_score(LOGP, torch.tensor([[1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])), r"samples \[1\] have no token"),
        (lambda: min_k_score(LOGP, MASK, 0.0), r"k=0.0 is invalid, expected a fraction in \(0, 1\]"),
        (lambda: min_k_score(LOGP, MASK, 1.5), "k=1.5"),
        (lambda: min_k_plus_plus_score(LOGP, LOGP[:, :2], LOGP, MASK), "mu must have logp's shape"),
        (lambda: min_k_plus_plus_score(LOGP, LOGP, -LOGP.abs() - 1, MASK), "sigma must be >= 0"),
        (lambda: zlib_score(LOGP, MASK, ["one"]), "one string per sample"),
        (lambda: reference_score(LOGP, LOGP[:1], MASK), "ref_logp must have logp's shape"),
        (lambda: pad_token_logprobs([]), "at least one sample"),
    ],
)
def test_scorer_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- metrics


def test_roc_auc_hand_made_scores():
    members = torch.tensor([True, True, False, False, False])
    assert roc_auc([0.9, 0.8, 0.1, 0.2, 0.3], members) == 1.0  # perfectly separable
    assert roc_auc([0.1, 0.2, 0.8, 0.9, 0.7], members) == 0.0
    assert roc_auc([0.5] * 5, members) == 0.5  # a constant
    assert roc_auc([0.9, 0.4, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(3 / 4)  # 3 of 4 pairs ordered


def test_roc_auc_and_curve_agree_with_sklearn():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 6, (80,), generator=generator).double() + 0.1 * torch.randn(80, generator=generator)
    scores[::7] = scores[0]  # ties
    labels = torch.rand(80, generator=generator) < 0.4
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels.numpy(), scores.numpy()))
    fpr, tpr, thresholds = roc_curve(scores, labels)
    expected = sklearn_roc_curve(labels.numpy(), scores.numpy(), drop_intermediate=False)
    for ours, theirs in zip((fpr, tpr, thresholds), expected, strict=True):
        assert ours.numpy() == pytest.approx(theirs)


def test_tpr_at_fpr_hand_example():
    # members 0.9, 0.8, 0.3; non-members 0.85, 0.2, 0.1, 0.05
    scores = [0.9, 0.8, 0.3, 0.85, 0.2, 0.1, 0.05]
    members = [1, 1, 1, 0, 0, 0, 0]
    assert tpr_at_fpr(scores, members, fpr=0.01) == pytest.approx(1 / 3)  # only s >= 0.9 has FPR 0
    assert tpr_at_fpr(scores, members, fpr=0.25) == 1.0  # s >= 0.3: FPR 1/4, every member
    assert tpr_at_fpr([0.9, 0.5, 0.4], [0, 1, 1], fpr=0.01) == 0.0  # a non-member scores highest


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: roc_auc([0.1, 0.2], [1, 1]), "needs members and non-members, got 2 members of 2"),
        (lambda: roc_auc([0.1, 0.2, 0.3], [1, 0]), "one label per score"),
        (lambda: roc_auc([0.1, math.nan], [1, 0]), "finite"),
        (lambda: roc_auc([0.1, 0.2], [2, 0]), "bool or 0/1"),
        (lambda: tpr_at_fpr([0.1, 0.2], [1, 0], fpr=1.5), r"fpr=1.5 is invalid, expected a rate in \[0, 1\]"),
    ],
)
def test_metric_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- the callback, end to end

TINY = {"hidden_size": 32, "num_layers": 2, "num_heads": 2}
CORPUS = FictitiousConfig(num_authors=8, seed=0, num_perturbed=1)  # retain50: authors 0-3, forget50: 4-7


def make_datamodule(train_split: str = "retain50") -> QADataModule:
    return QADataModule(
        source="fictitious",
        train_split=train_split,
        eval_splits=["forget50"],
        batch_size=8,
        max_length=64,
        prompt_format="plain",
        max_samples=16,
        fictitious=CORPUS,
    )


def make_trainer(root, callback: MembershipInference, max_steps: int) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=root,
        callbacks=[callback],
    )


def test_fine_tuned_members_are_detected_by_loss(tmp_path):
    callback = MembershipInference(
        member_split="retain50", non_member_split="forget50", reference=CausalLMSpec(tiny=TINY), batch_size=16
    )
    module = CausalLMFineTuning(lm=CausalLMSpec(tiny=TINY), lr=1e-2, generate=False)
    datamodule = make_datamodule()
    trainer = make_trainer(tmp_path, callback, max_steps=40)
    trainer.test(module, datamodule=datamodule, verbose=False)
    untrained = callback.results["loss"]["auc"]
    trainer.fit(module, datamodule=datamodule)
    logged = trainer.test(module, datamodule=datamodule, verbose=False)[0]

    assert callback.results["loss"]["auc"] > max(0.8, untrained), (untrained, callback.results)
    assert callback.results["reference"]["auc"] > 0.8, "the untrained reference model calibrates nothing away"
    assert logged["test/mia/loss/auc"] == pytest.approx(callback.results["loss"]["auc"])
    assert sorted(callback.results) == ["loss", "min_k", "min_k_plus_plus", "reference", "zlib"]
    assert all(set(m) == {"auc", "tpr@1%fpr"} for m in callback.results.values())
    report = json.loads((tmp_path / "membership_inference.json").read_text())
    assert report["metrics"] == callback.results
    assert report["counts"] == {"members": 16, "non_members": 16, "overlap": 0}
    assert len(report["scores"]["members"]["min_k_plus_plus"]) == 16
    members, non_members = report["scores"]["members"]["loss"], report["scores"]["non_members"]["loss"]
    assert roc_auc(members + non_members, [1] * 16 + [0] * 16) == pytest.approx(report["metrics"]["loss"]["auc"])
    assert (tmp_path / "membership_inference_roc.png").stat().st_size > 1000


def test_overlapping_splits_warn_with_the_count(tmp_path):
    callback = MembershipInference(member_split="full", non_member_split="forget50", batch_size=16)
    module = CausalLMFineTuning(lm=CausalLMSpec(tiny=TINY), generate=False)
    datamodule = make_datamodule()
    datamodule.max_samples = None  # full holds every forget50 record
    trainer = make_trainer(tmp_path, callback, max_steps=1)
    with pytest.warns(UserWarning, match="36 of 36 non-member samples"):
        trainer.test(module, datamodule=datamodule, verbose=False)


def test_reference_with_another_tokenizer_is_refused(tmp_path):
    model, tokenizer = build_tiny_causal_lm(**TINY, tokenizer=build_tokenizer(vocab_size=512))
    model.save_pretrained(tmp_path / "other")
    tokenizer.save_pretrained(tmp_path / "other")
    other = CausalLMSpec(name_or_path=str(tmp_path / "other"))
    callback = MembershipInference(member_split="retain50", non_member_split="forget50", reference=other)
    module = CausalLMFineTuning(lm=CausalLMSpec(tiny=TINY), generate=False)
    trainer = make_trainer(tmp_path, callback, max_steps=1)
    with pytest.raises(ValueError, match="reference model tokenizer differs from the target's"):
        trainer.test(module, datamodule=make_datamodule(), verbose=False)
    assert not (tmp_path / "membership_inference.json").exists()


def test_callback_bad_arguments():
    with pytest.raises(ValueError, match="k=0"):
        MembershipInference(k=0)
    with pytest.raises(ValueError, match=r"fpr=1\.5"):
        MembershipInference(fpr=1.5)
    with pytest.raises(ValueError, match="batch_size=0"):
        MembershipInference(batch_size=0)
    with pytest.raises(ValueError, match="on='test' is invalid"):
        MembershipInference(on="test")
    with pytest.raises(ValueError, match="expected a non-empty list of"):
        MembershipInference(on=["validate"])
