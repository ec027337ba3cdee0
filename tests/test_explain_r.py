"""EXPLAIN-R (trustlit.interpret.concepts): closed forms of the loss, the moving averages and the concept scores;
the surrogate recovers a planted linear concept model; bad input is refused."""

from __future__ import annotations

import math

import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from trustlit.interpret.concepts import (
    ExplainR,
    check_concepts,
    concept_scores,
    cosine_logits,
    deletion_agreement,
    faithfulness,
    kd_objective,
    log_mean_exp,
    log_moving_average,
    oriented,
    probe_concepts,
    similarity_kl,
    surrogate,
)

torch.set_num_threads(1)


def planted(n: int = 600, k: int = 10, d: int = 16, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Concepts c ~ Bernoulli(0.3) and embeddings e = normalize(c W* + b*)."""
    generator = torch.Generator().manual_seed(seed)
    concepts = (torch.rand(n, k, generator=generator) < 0.3).float()
    weight, bias = torch.randn(k, d, generator=generator), 0.3 * torch.randn(d, generator=generator)
    return concepts, surrogate(concepts, weight, bias), weight, bias


def loader(concepts: torch.Tensor, embeddings: torch.Tensor, batch_size: int, shuffle: bool = False) -> DataLoader:
    rows = [
        {"embeddings": e, "concepts": c, "index": i} for i, (e, c) in enumerate(zip(embeddings, concepts, strict=True))
    ]
    return DataLoader(rows, batch_size=batch_size, shuffle=shuffle)


# --- the loss ----------------------------------------------------------------------------------------


def test_similarity_kl_is_zero_iff_the_distributions_match() -> None:
    teacher = torch.tensor([[0.0, math.log(3.0)], [math.log(3.0), 0.0]])  # rows (1/4, 3/4) and (3/4, 1/4)
    assert similarity_kl(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)
    # a constant per row leaves the softmax unchanged: still zero
    assert similarity_kl(teacher, teacher + torch.tensor([[5.0], [-2.0]])).item() == pytest.approx(0.0, abs=1e-6)
    # student uniform: KL(p || 1/2) = sum p log(2p), the same for both rows
    expected = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert similarity_kl(teacher, torch.zeros(2, 2)).item() == pytest.approx(expected, rel=1e-6)


def test_moving_average_first_visit_is_exact_then_mixes_per_item() -> None:
    log_state = torch.tensor([-math.inf, math.log(2.0), -math.inf, math.log(4.0)])
    updated = log_moving_average(log_state, torch.tensor([0, 1, 3]), torch.zeros(3), gamma=0.9)  # m = 1
    # item 0 unseen: takes the batch value; items 1 and 3 seen: (1 - 0.9) u + 0.9 m
    assert updated.exp().tolist() == pytest.approx([1.0, 0.1 * 2 + 0.9, 0.1 * 4 + 0.9])
    assert log_state.exp().tolist() == pytest.approx([1.0, 1.1, 0.0, 1.3])
    # gamma = 1 forgets the past; a batch mean far below float32's range stays exact in log space
    assert log_moving_average(log_state, torch.tensor([1]), torch.tensor([-500.0]), 1.0).item() == -500.0


def linear_objective(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The released objective with exact full-batch normalisers (u = mean_j T_ij, v = mean_j S_ij), written with
    plain exponentials exp(logits) in whatever dtype it is given: (loss, u, v)."""
    teacher, student = teacher_logits.exp(), student_logits.exp()
    u, v = teacher.mean(dim=1), student.detach().mean(dim=1)
    g = student.mean(dim=-1, keepdim=True) / student
    return (teacher / u[:, None] * student.detach() / v[:, None] * g).mean(), u, v


def test_full_batch_normaliser_is_exact_and_the_objective_gradient_is_the_kl_gradient() -> None:
    concepts, embeddings, _, _ = planted(n=40, k=6, d=8)
    weight = torch.randn(6, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
    bias = torch.zeros(8, requires_grad=True)
    tau, index = 0.1, torch.arange(40)
    teacher = cosine_logits(embeddings, embeddings, tau)
    exact_log_u = log_mean_exp(teacher)  # log (1/N) sum_j exp(e_i.e_j/tau)
    torch.testing.assert_close(exact_log_u, teacher.exp().mean(dim=1).log())
    log_u_state = torch.full((40,), -math.inf)
    for _ in range(3):  # a fixed model: the moving average of the exact value stays exact
        torch.testing.assert_close(log_moving_average(log_u_state, index, exact_log_u, 0.9), exact_log_u)
    for direction in ("rows", "columns"):  # image-to-text and text-to-image
        student = cosine_logits(surrogate(concepts, weight, bias), embeddings, tau)
        t, s = oriented(direction, teacher, student)
        log_u = log_moving_average(torch.full((40,), -math.inf), index, log_mean_exp(t), 0.9)
        log_v = log_moving_average(torch.full((40,), -math.inf), index, log_mean_exp(s.detach()), 0.9)
        estimator = torch.autograd.grad(kd_objective(t, s, log_u, log_v), (weight, bias), retain_graph=True)
        exact = torch.autograd.grad(similarity_kl(t, s), (weight, bias))
        for ours, reference in zip(estimator, exact, strict=True):
            torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("tau", [0.1, 0.02])
def test_objective_is_finite_at_small_temperatures_and_equals_the_float64_reference(tau) -> None:
    # keys e and -e: every item has an antipodal key (cos = -1), where exp((cos - 1) / tau) = exp(-100) at
    # tau = 0.02 is subnormal in float32 and 1 / it overflows
    concepts, embeddings, weight, bias = planted(n=20, k=5, d=6, seed=4)
    keys = torch.cat([embeddings, -embeddings])
    concepts, queries = torch.cat([concepts, concepts]), torch.cat([embeddings, embeddings])
    weight = (weight + 0.1 * torch.randn(5, 6, generator=torch.Generator().manual_seed(2))).requires_grad_(True)
    bias = bias.clone().requires_grad_(True)
    parameters = (weight, bias)
    for direction in ("rows", "columns"):
        t, s = oriented(
            direction, cosine_logits(queries, keys, tau), cosine_logits(surrogate(concepts, *parameters), keys, tau)
        )
        ours = kd_objective(t, s, log_mean_exp(t), log_mean_exp(s.detach()))
        gradient = torch.autograd.grad(ours, parameters, retain_graph=True)
        reference, _, _ = linear_objective(t.double(), s.double())
        reference_gradient = torch.autograd.grad(reference, parameters, retain_graph=True)
        assert ours.isfinite() and all(g.isfinite().all() for g in gradient)
        assert ours.item() == pytest.approx(reference.item(), rel=1e-5)
        for a, b in zip(gradient, reference_gradient, strict=True):
            torch.testing.assert_close(a, b.float(), rtol=1e-4, atol=1e-6)
        if tau == 0.02:  # the case is hard: the shifted float32 exponentials of the linear form give NaN
            shifted, _, _ = linear_objective(t - 1 / tau, s - 1 / tau)
            shifted_gradient = torch.autograd.grad(shifted, parameters, retain_graph=True)
            assert not (shifted.isfinite() and all(g.isfinite().all() for g in shifted_gradient))


def test_objective_gradient_vanishes_when_the_surrogate_equals_the_model() -> None:
    concepts, embeddings, weight, bias = planted(n=30, k=5, d=6)
    weight = weight.clone().requires_grad_(True)
    teacher = cosine_logits(embeddings, embeddings, 0.1)
    student = cosine_logits(surrogate(concepts, weight, bias), embeddings, 0.1)
    (gradient,) = torch.autograd.grad(
        kd_objective(teacher, student, log_mean_exp(teacher), log_mean_exp(student)), weight
    )
    assert gradient.abs().max().item() < 1e-4


def test_evaluation_kl_uses_the_training_cosines_whatever_the_embedding_norms() -> None:
    concepts, embeddings, _, _ = planted(n=30, k=5, d=6, seed=6)
    scaled = embeddings * torch.linspace(0.2, 5.0, 30)[:, None]  # not unit norm: the DataModule accepts any
    model = ExplainR(num_concepts=5, embedding_dim=6, figure_items=0)
    kls = []
    for rows in (scaled, embeddings):
        model.eval_start()
        model.eval_step({"embeddings": rows, "concepts": concepts, "index": torch.arange(30)})
        kls.append(model._eval["kl"][0].item())
        assert model._eval["queries"][0].norm(dim=1).tolist() == pytest.approx([1.0] * 30)
    with torch.no_grad():
        teacher, student = cosine_logits(scaled, scaled, 0.1), cosine_logits(model(concepts), scaled, 0.1)
        expected = (similarity_kl(teacher, student) + similarity_kl(teacher.T, student.T)) / 2  # what training logs
        raw = similarity_kl(scaled @ scaled.T / 0.1, model(concepts) @ scaled.T / 0.1)
    assert kls[0] == pytest.approx(kls[1], rel=1e-5) and kls[0] == pytest.approx(expected.item(), rel=1e-5)
    assert abs(raw.item() - expected.item()) > 0.1  # the unnormalised logits disagree


# --- concept scores ----------------------------------------------------------------------------------


def test_concept_scores_on_a_hand_made_surrogate() -> None:
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    bias = torch.tensor([0.5, 0.0])
    concepts = torch.tensor([[1.0, 0.0, 1.0]])
    # z = (2.5, 1), ||z||^2 = 7.25, b.f = 1.25/||z||: lambda = ||z|| / (7.25 - 1.25), v = (2.5, 0, 3.5) / 6
    scores = concept_scores(concepts, weight, bias)
    torch.testing.assert_close(scores, torch.tensor([[2.5 / 6, 0.0, 3.5 / 6]]))
    assert scores.sum().item() == pytest.approx(1.0)
    # against the key t = (0, 1): f.t = 1/||z||, (cW).t = 1, so v = (0, 0, 1/||z||), summing to f.t
    keyed = concept_scores(concepts, weight, bias, torch.tensor([[0.0, 1.0]]))
    torch.testing.assert_close(keyed, torch.tensor([[0.0, 0.0, 1 / math.sqrt(7.25)]]))


def test_keyed_scores_decompose_the_surrogate_similarity() -> None:
    concepts, embeddings, _, _ = planted(n=50, k=7, d=9, seed=3)
    weight, bias = torch.randn(7, 9), torch.randn(9)
    scores = concept_scores(concepts[concepts.sum(1) > 0], weight, bias, embeddings[concepts.sum(1) > 0])
    similarity = (surrogate(concepts, weight, bias) * embeddings).sum(dim=1)[concepts.sum(1) > 0]
    torch.testing.assert_close(scores.sum(dim=1), similarity, rtol=1e-4, atol=1e-5)


def test_deleting_a_concept_moves_the_similarity_as_its_score_says() -> None:
    # concept 0 points along the key, concept 1 against it: deleting 0 lowers f.t, deleting 1 raises it
    weight = torch.tensor([[2.0, 0.0], [-0.5, 1.0]])
    bias = torch.tensor([0.0, 0.5])
    concepts, key = torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    scores = concept_scores(concepts, weight, bias, key)
    assert scores[0, 0] > 0 > scores[0, 1]
    before = surrogate(concepts, weight, bias)[0, 0]
    without_0 = surrogate(torch.tensor([[0.0, 1.0]]), weight, bias)[0, 0]
    without_1 = surrogate(torch.tensor([[1.0, 0.0]]), weight, bias)[0, 0]
    assert before - without_0 > 0 > before - without_1
    agreement = deletion_agreement(concepts, weight, bias, key)
    assert agreement["sign_agreement"] == 1.0
    assert agreement["spearman"] == pytest.approx(1.0)


# --- faithfulness ------------------------------------------------------------------------------------


def test_faithfulness_is_perfect_for_the_model_itself_and_poor_for_noise() -> None:
    _, embeddings, _, _ = planted(n=80)
    perfect = faithfulness(embeddings, embeddings)
    assert perfect["rsum"] == pytest.approx(600.0) and perfect["pair_rsum"] == pytest.approx(600.0)
    assert perfect["spearman"] == pytest.approx(1.0)
    noise = faithfulness(torch.randn(80, 16, generator=torch.Generator().manual_seed(5)), embeddings)
    assert noise["rsum"] < 200 and abs(noise["spearman"]) < 0.2


def test_recall_targets_are_the_models_nearest_other_item() -> None:
    keys = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    # the surrogate swaps the two clusters: every item's model neighbour (its cluster mate) ranks last of 3
    swapped = keys[[2, 3, 0, 1]]
    result = faithfulness(swapped, keys, ks=(1, 2))
    assert result["rows_r@1"] == 0.0 and result["rows_r@2"] == 0.0
    assert faithfulness(keys, keys, ks=(1,))["rows_r@1"] == 100.0
    # groups {0, 1} and {2, 3}: item 0's target is now its nearest of the other group, item 3 (0.1 > 0.0);
    # a query for item 0 along (0, 1) ranks item 2 first and misses it
    groups, queries = torch.tensor([0, 0, 1, 1]), keys.clone()
    queries[0] = torch.tensor([0.0, 1.0])
    assert faithfulness(keys, keys, ks=(1,), groups=groups)["rows_r@1"] == 100.0
    assert faithfulness(queries, keys, ks=(1,), groups=groups)["rows_r@1"] == 75.0
    assert faithfulness(queries, keys, ks=(1,))["rows_r@1"] == 75.0  # without groups: target 1, ranked below 2, 3


# --- training ----------------------------------------------------------------------------------------


def test_surrogate_recovers_a_planted_linear_concept_model(tmp_path) -> None:
    # D = K + 1: the embeddings span the whole space, so W is identified up to the scale of (W, b) alone
    concepts, embeddings, weight, bias = planted(d=11)
    L.seed_everything(0)
    model = ExplainR(num_concepts=10, embedding_dim=11, lr=1e-2, figure_items=2)
    trainer = L.Trainer(
        max_epochs=40, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(
        model,
        loader(concepts[:500], embeddings[:500], 100, shuffle=True),
        loader(concepts[500:], embeddings[500:], 100),
    )
    held_out = faithfulness(model(concepts[500:]).detach(), embeddings[500:])
    assert held_out["spearman"] > 0.95
    assert trainer.callback_metrics["val/spearman"] > 0.95
    # f is invariant to a positive scale of (W, b) only: the directions must agree
    ours, planted_ = torch.cat([model.weight, model.bias[None]]).flatten(), torch.cat([weight, bias[None]]).flatten()
    assert torch.nn.functional.cosine_similarity(ours.detach(), planted_, dim=0) > 0.95
    assert (tmp_path / "explain_r_concepts.png").stat().st_size > 1000


def test_a_stock_trainer_fits_on_the_data_module_and_reads_its_sizes(tmp_path) -> None:
    from trustlit.data.concepts import EmbeddingConceptDataModule

    concepts, embeddings, _, _ = planted(n=200, k=6, d=8)
    np.save(tmp_path / "embeddings.npy", embeddings.numpy())
    np.save(tmp_path / "concepts.npy", concepts.numpy())
    paths = {"embeddings_path": str(tmp_path / "embeddings.npy"), "concepts_path": str(tmp_path / "concepts.npy")}
    model = ExplainR(figure_items=1)
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, EmbeddingConceptDataModule(**paths, batch_size=64))
    assert (model.hparams.num_concepts, model.hparams.embedding_dim) == (6, 8)
    assert {"train/loss", "train/kl", "val/kl", "val/rsum", "val/deletion_sign_agreement"} <= set(
        trainer.callback_metrics
    )
    with pytest.raises(ValueError, match=r"num_concepts=6, but ExplainR has num_concepts=5"):
        L.Trainer(fast_dev_run=True, logger=False).fit(
            ExplainR(num_concepts=5, embedding_dim=8), EmbeddingConceptDataModule(**paths)
        )


def test_probe_reads_planted_concepts() -> None:
    concepts, embeddings, _, _ = planted()
    result = probe_concepts(embeddings[:500], concepts[:500], embeddings[500:], concepts[500:])
    assert result["probed_concepts"] == 10 and result["mean_auc"] > 0.9


# --- bad input ---------------------------------------------------------------------------------------


def test_bad_input_is_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match=r"concepts: value 0\.5 at row 0, column 1 is not binary \(1 such entries"):
        check_concepts(torch.tensor([[0.0, 0.5]]))
    with pytest.raises(ValueError, match=r"3 concept rows but embeddings of shape \[2, 4\]"):
        check_concepts(torch.zeros(3, 2), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="must all be the same"):
        faithfulness(torch.zeros(3, 4), torch.zeros(4, 4))
    with pytest.raises(ValueError, match=r"gamma1=1\.5 is invalid, expected a number in \(0, 1\]"):
        ExplainR(num_concepts=3, embedding_dim=4, gamma1=1.5)
    with pytest.raises(ValueError, match=r"temperature=0\.0 is invalid"):
        ExplainR(num_concepts=3, embedding_dim=4, temperature=0.0)
    with pytest.raises(ValueError, match=r"figure_items=-1 is invalid"):
        ExplainR(num_concepts=3, embedding_dim=4, figure_items=-1)
    with pytest.raises(ValueError, match="directions='diagonal' is invalid"):
        ExplainR(num_concepts=3, embedding_dim=4, directions="diagonal")
    model = ExplainR(num_concepts=3, embedding_dim=4)
    with pytest.raises(ValueError, match=r"expected \[B, embedding_dim=4\]"):
        model.unpack({"embeddings": torch.zeros(2, 5), "concepts": torch.zeros(2, 3), "index": torch.arange(2)})
    with pytest.raises(ValueError, match=r"ExplainR batch: concepts: value 2\.0 at row 0, column 0 is not binary"):
        model.unpack({"embeddings": torch.zeros(2, 4), "concepts": torch.full((2, 3), 2.0), "index": torch.arange(2)})
