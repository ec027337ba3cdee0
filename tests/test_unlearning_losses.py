"""The unlearning losses against their closed forms on hand-made log-probabilities."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trustlit.llm.prompts import IGNORE_INDEX
from trustlit.unlearning import KLMinimization
from trustlit.unlearning.losses import (
    dpo_loss,
    gradient_ascent_loss,
    kl_to_reference,
    masked_mean_squared_distance,
    npo_loss,
    rmu_loss,
    simnpo_loss,
    token_mean_nll,
)

LOGP = torch.tensor([-6.0, -2.0, -9.0])
REF_LOGP = torch.tensor([-4.0, -3.0, -9.0])
NUM_TOKENS = torch.tensor([3, 2, 6])
TINY_LM = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 2, "num_heads": 2}}


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x))


def test_token_mean_nll_and_gradient_ascent():
    assert token_mean_nll(LOGP, NUM_TOKENS).item() == pytest.approx(17.0 / 11.0)
    assert gradient_ascent_loss(LOGP, NUM_TOKENS).item() == pytest.approx(-17.0 / 11.0)


def test_npo_closed_form_with_two_over_beta_scaling():
    beta = 0.1
    # NLL_theta - NLL_ref = ref_logp - logp = [2, -1, 0]
    expected = -(2 / beta) * sum(log_sigmoid(beta * d) for d in (2.0, -1.0, 0.0)) / 3
    assert npo_loss(LOGP, REF_LOGP, beta).item() == pytest.approx(expected, rel=1e-6)
    # equal models: each term is -(2/beta) log(1/2)
    assert npo_loss(LOGP, LOGP, beta).item() == pytest.approx((2 / beta) * math.log(2), rel=1e-6)


def test_npo_gradient_is_reweighted_gradient_ascent():
    beta = 0.5
    logp = LOGP.clone().requires_grad_(True)
    npo_loss(logp, REF_LOGP, beta).backward()
    # d/dlogp_i = (2/n) * sigmoid(beta * (logp_i - ref_i)): ascent weighted by the model's own odds
    expected = (2 / 3) * torch.sigmoid(beta * (LOGP - REF_LOGP))
    torch.testing.assert_close(logp.grad, expected)


def test_simnpo_closed_form_with_beta_times_gamma_margin():
    beta, gamma = 2.5, 0.4
    avg_nll = [6.0 / 3, 2.0 / 2, 9.0 / 6]
    expected = -(2 / beta) * sum(log_sigmoid(beta * (a - gamma)) for a in avg_nll) / 3
    assert simnpo_loss(LOGP, NUM_TOKENS, beta, gamma).item() == pytest.approx(expected, rel=1e-6)
    printed_paper_form = -(2 / beta) * sum(log_sigmoid(beta * a - gamma) for a in avg_nll) / 3
    assert simnpo_loss(LOGP, NUM_TOKENS, beta, gamma).item() != pytest.approx(printed_paper_form, rel=1e-3)
    # gamma = 0: the two forms agree
    assert simnpo_loss(LOGP, NUM_TOKENS, beta, 0.0).item() == pytest.approx(
        -(2 / beta) * sum(log_sigmoid(beta * a) for a in avg_nll) / 3, rel=1e-6
    )


def test_simnpo_is_length_normalised():
    # doubling an answer's length and its NLL leaves SimNPO unchanged (NPO would change)
    beta = 4.5
    assert simnpo_loss(2 * LOGP, 2 * NUM_TOKENS, beta).item() == pytest.approx(
        simnpo_loss(LOGP, NUM_TOKENS, beta).item(), rel=1e-6
    )


def test_dpo_closed_form():
    beta = 0.1
    chosen, rejected = torch.tensor([-5.0, -1.0]), torch.tensor([-3.0, -8.0])
    ref_chosen, ref_rejected = torch.tensor([-6.0, -2.0]), torch.tensor([-3.0, -7.0])
    margins = [(-5 + 6) - (-3 + 3), (-1 + 2) - (-8 + 7)]  # [1, 2]
    expected = -(2 / beta) * sum(log_sigmoid(beta * m) for m in margins) / 2
    assert dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta).item() == pytest.approx(expected, rel=1e-6)


def kl_by_hand(ref_row: list[float]) -> float:
    """KL(softmax(ref_row) || uniform) over a 3-token vocabulary."""
    p = torch.softmax(torch.tensor(ref_row), 0)
    return float((p * (p.log() - math.log(1 / 3))).sum())


def tiny_kl_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pi_theta uniform everywhere; pi_ref differs at a prompt position (0) and an answer-predicting one (1)."""
    logits = torch.zeros(1, 4, 3)
    ref_logits = torch.zeros(1, 4, 3)
    ref_logits[0, 1] = torch.tensor([2.0, 0.0, 0.0])  # predicts token 2 (answer)
    ref_logits[0, 0] = torch.tensor([9.0, 0.0, 0.0])  # predicts token 1 (prompt)
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 1, 2]])  # answer tokens at positions 2, 3
    return logits, ref_logits, labels


def test_kl_to_reference_on_answer_tokens_only():
    logits, ref_logits, labels = tiny_kl_batch()
    # answer positions 2 and 3 are predicted from positions 1 and 2; position 2 has KL 0, prompt position 0 is ignored
    expected = kl_by_hand([2.0, 0.0, 0.0]) / 2
    assert kl_to_reference(logits, ref_logits, labels).item() == pytest.approx(expected, rel=1e-6)
    assert kl_to_reference(logits, ref_logits, labels, "answer_tokens").item() == pytest.approx(expected, rel=1e-6)
    assert kl_to_reference(ref_logits, ref_logits, labels).item() == pytest.approx(0.0, abs=1e-7)


def test_kl_to_reference_on_all_positions_as_tofu_and_open_unlearning():
    logits, ref_logits, labels = tiny_kl_batch()
    # every one of the B*T = 4 positions counts, the prompt position 0 and the last position 3 included
    expected = (kl_by_hand([9.0, 0.0, 0.0]) + kl_by_hand([2.0, 0.0, 0.0])) / 4
    assert kl_to_reference(logits, ref_logits, labels, "all_positions").item() == pytest.approx(expected, rel=1e-6)
    # a second, all-padding sample with KL 0 halves the mean: the divisor is B*T, not the answer-token count
    padded = [torch.cat([x, torch.zeros_like(x)]) for x in (logits, ref_logits)]
    both_labels = torch.cat([labels, torch.full_like(labels, IGNORE_INDEX)])
    assert kl_to_reference(*padded, both_labels, "all_positions").item() == pytest.approx(expected / 2, rel=1e-6)


def test_all_positions_kl_equals_open_unlearnings_expression_on_random_logits():
    generator = torch.Generator().manual_seed(0)
    logits, ref_logits = torch.randn(2, 2, 5, 7, generator=generator)
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 3, 4, IGNORE_INDEX], [IGNORE_INDEX, 1, 2, 3, 4]])
    # open-unlearning's compute_kl_divergence (and TOFU's KL loss), on the flattened [B*T, V] log-probabilities
    peer = F.kl_div(
        F.log_softmax(logits, -1).view(-1, 7),
        F.log_softmax(ref_logits, -1).view(-1, 7),
        reduction="batchmean",
        log_target=True,
    )
    assert kl_to_reference(logits, ref_logits, labels, "all_positions").item() == pytest.approx(peer.item(), rel=1e-6)
    answer_only = kl_to_reference(logits, ref_logits, labels, "answer_tokens").item()
    assert answer_only != pytest.approx(peer.item(), rel=1e-3), "the two reductions differ on these logits"


def test_kl_reduction_is_checked():
    logits, ref_logits, labels = tiny_kl_batch()
    with pytest.raises(ValueError, match=r"kl_reduction must be one of .*'answer_tokens'.* got 'tokens'"):
        kl_to_reference(logits, ref_logits, labels, "tokens")
    with pytest.raises(ValueError, match=r"kl_reduction must be one of .* got 'batchmean'"):
        KLMinimization(lm=TINY_LM, kl_reduction="batchmean")


@pytest.mark.parametrize("reduction", ["answer_tokens", "all_positions"])
def test_kl_minimization_retain_term_uses_its_kl_reduction(reduction):
    torch.manual_seed(0)
    module = KLMinimization(lm=TINY_LM, kl_reduction=reduction)
    with torch.no_grad():  # move pi_theta away from pi_ref so that the KL is not 0
        for parameter in module.model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 5, 6, IGNORE_INDEX], [IGNORE_INDEX, 7, 8, 9, 10]])
    retain = {
        "input_ids": torch.tensor([[1, 2, 5, 6, 0], [3, 7, 8, 9, 10]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
        "labels": labels,
    }
    module.eval()
    with torch.no_grad():
        logits = module.model(input_ids=retain["input_ids"], attention_mask=retain["attention_mask"]).logits
        ref_logits = module.reference(input_ids=retain["input_ids"], attention_mask=retain["attention_mask"]).logits
        term = module.losses({"forget": retain, "retain": retain})["retain_kl"]
    assert module.hparams.kl_reduction == reduction
    assert term.item() == pytest.approx(kl_to_reference(logits, ref_logits, labels, reduction).item(), rel=1e-5)
    assert term.item() > 0


def test_masked_mean_squared_distance_and_rmu():
    activations = torch.tensor([[[1.0, 1.0], [3.0, 1.0]], [[0.0, 0.0], [5.0, 5.0]]])
    target = torch.tensor([1.0, 1.0])
    mask = torch.tensor([[True, True], [True, False]])
    # sample 0: (0 + 2) / 2 = 1; sample 1: 1 / 1 = 1 -> 1
    assert masked_mean_squared_distance(activations, target, mask).item() == pytest.approx(1.0)
    forget, retain = rmu_loss(activations, mask, activations, activations + 2, mask, target, alpha=3.0)
    assert forget.item() == pytest.approx(1.0)
    assert retain.item() == pytest.approx(3.0 * 4.0)
