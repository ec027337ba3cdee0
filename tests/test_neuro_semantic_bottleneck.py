"""The semantic-bottleneck decoders (trustlit/neuro/semantic_bottleneck.py) against closed forms, on noise-free and
planted problems, their metrics on hand-made cases, and the voxel simulator (trustlit/neuro/simulator.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from trustlit.neuro.semantic_bottleneck import (
    DirectRidgeDecoder,
    SemanticBottleneckDecoder,
    cosine_similarity,
    region_recovery_auc,
    two_way_identification,
)
from trustlit.neuro.simulator import REGIONS, assign_regions, simulate_voxels


def ridge_closed_form(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """W = (X_c^T X_c + alpha I)^-1 X_c^T Y_c on centred X, Y, and b = mean(Y) - mean(X) W."""
    xc, yc = x - x.mean(0), y - y.mean(0)
    w = np.linalg.solve(xc.T @ xc + alpha * np.eye(x.shape[1]), xc.T @ yc)
    return w, y.mean(0) - x.mean(0) @ w


def zscore(x: np.ndarray, reference: np.ndarray) -> np.ndarray:
    scale = reference.std(0)
    return (x - reference.mean(0)) / np.where(scale == 0, 1.0, scale)


@pytest.fixture
def small_problem():
    rng = np.random.default_rng(0)
    voxels = rng.normal(size=(40, 12)) * rng.uniform(0.5, 3, 12) + rng.normal(size=12)
    concepts = (rng.random((40, 5)) < 0.4).astype(float)
    embeddings = rng.normal(size=(40, 7))
    return voxels, concepts, embeddings


def test_bottleneck_ridges_match_the_closed_form_at_fixed_alphas(small_problem):
    voxels, concepts, embeddings = small_problem
    decoder = SemanticBottleneckDecoder(alphas=[3.0], embedding_alphas=[0.5], standardize=False)
    decoder.fit(voxels, concepts, embeddings)
    c_std = zscore(concepts, concepts)
    b, b0 = ridge_closed_form(c_std, embeddings, 0.5)
    a, a0 = ridge_closed_form(voxels, c_std, 3.0)
    np.testing.assert_allclose(decoder.weight_maps, a.T, rtol=1e-8, atol=1e-10)
    test = voxels[:6] + 0.3
    np.testing.assert_allclose(decoder.predict(test), (test @ a + a0) @ b + b0, rtol=1e-8, atol=1e-10)
    unscaled = (test @ a + a0) * concepts.std(0) + concepts.mean(0)
    np.testing.assert_allclose(decoder.predict_concepts(test), unscaled, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(decoder.embed_concepts(concepts[:3]), c_std[:3] @ b + b0, rtol=1e-8, atol=1e-10)
    assert decoder.chosen_alphas == {"concepts": 3.0, "embedding": 0.5}


def test_direct_ridge_matches_the_closed_form_on_standardised_voxels(small_problem):
    voxels, concepts, embeddings = small_problem
    decoder = DirectRidgeDecoder(alphas=[7.0]).fit(voxels, concepts, embeddings)
    w, w0 = ridge_closed_form(zscore(voxels, voxels), embeddings, 7.0)
    test = voxels[5:9] * 1.1
    np.testing.assert_allclose(decoder.predict(test), zscore(test, voxels) @ w + w0, rtol=1e-8, atol=1e-10)


def test_rescale_maps_the_predictions_to_the_training_embedding_statistics(small_problem):
    """BrainDiffuser's test-time rescaling: per dimension, the predictions of the rows passed to predict get the
    training embeddings' mean and (population) std, an increasing affine map of the plain predictions."""
    voxels, concepts, embeddings = small_problem
    plain = DirectRidgeDecoder(alphas=[7.0]).fit(voxels, concepts, embeddings)
    rescaled = DirectRidgeDecoder(alphas=[7.0], rescale=True).fit(voxels, concepts, embeddings)
    test = voxels[:9] * 0.7 + 0.2
    h, h_rescaled = plain.predict(test), rescaled.predict(test)
    np.testing.assert_allclose(h_rescaled.mean(0), embeddings.mean(0), atol=1e-12)
    np.testing.assert_allclose(h_rescaled.std(0), embeddings.std(0), rtol=1e-12)
    np.testing.assert_allclose(zscore(h_rescaled, h_rescaled), zscore(h, h), atol=1e-10)
    with pytest.raises(ValueError, match="rescale=True needs >= 2 rows to predict"):
        rescaled.predict(test[:1])


def test_binarize_thresholds_the_concept_scores_before_b(small_problem):
    voxels, concepts, embeddings = small_problem
    decoder = SemanticBottleneckDecoder(alphas=[1.0], embedding_alphas=[1.0], binarize=True).fit(
        voxels, concepts, embeddings
    )
    answers = (decoder.predict_concepts(voxels) >= 0.5).astype(float)
    np.testing.assert_allclose(decoder.predict(voxels), decoder.embed_concepts(answers), atol=1e-10)


def test_noise_free_simulation_recovers_the_concepts_exactly():
    rng = np.random.default_rng(1)
    concepts = (rng.random((300, 8)) < 0.3).astype(float)
    sim = simulate_voxels(concepts, grid=(12, 12, 6), noise=0, nuisance=0, gain_spread=0, seed=2)
    np.testing.assert_allclose(sim.voxels, concepts @ sim.patterns, atol=1e-4)  # x = c W exactly (float32)
    embeddings = concepts @ rng.normal(size=(8, 16)) + rng.normal(size=16)
    decoder = SemanticBottleneckDecoder().fit(sim.voxels[:240], concepts[:240], embeddings[:240])
    predicted = decoder.predict_concepts(sim.voxels[240:])
    assert np.abs(predicted - concepts[240:]).max() < 1e-3
    np.testing.assert_array_equal(predicted >= 0.5, concepts[240:] == 1)
    # embeddings linear in the concepts: B recovers them too, so the bottleneck decodes them exactly
    assert cosine_similarity(decoder.predict(sim.voxels[240:]), embeddings[240:]).min() > 0.999


@pytest.mark.parametrize("prior_variance", [1e-2, 1.0])
@pytest.mark.parametrize("selection", ["kfold_per_target", "loo_per_target", "kfold_shared"])
def test_cross_validation_picks_the_bayes_optimal_alpha(prior_variance, selection):
    """w ~ N(0, tau^2 I), noise N(0, 1): the posterior mean is the ridge with alpha = 1 / tau^2 (100 and 1 here);
    over 300 targets the shared 5-fold choice lands on it, and so does the median of the per-target choices."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 40))
    y = x @ rng.normal(scale=np.sqrt(prior_variance), size=(40, 300)) + rng.normal(size=(200, 300))
    decoder = DirectRidgeDecoder(standardize=False, selection=selection).fit(x, np.zeros((200, 1)), y)
    chosen = decoder.chosen_alphas["embedding"]
    assert isinstance(chosen, float) == (selection == "kfold_shared")
    assert np.median(chosen) == pytest.approx(1 / prior_variance)


def test_two_way_identification_on_a_hand_made_case():
    targets = np.eye(3)
    predicted = np.array([[1.0, 0.5, 0.0], [0.9, 0.5, 0.0], [0.0, 1.0, 1.0]])
    # p1 beats both foils (2 wins), p2 loses to t1 and beats t3 (1), p3 ties t2 and beats t1 (1.5): 4.5 / 6
    assert two_way_identification(predicted, targets, similarity="cosine") == pytest.approx(0.75)
    assert two_way_identification(targets, targets) == 1.0
    shifted = predicted + 5.0  # Pearson ignores a shift of every coordinate of a row
    assert two_way_identification(shifted, targets) == two_way_identification(predicted, targets)
    expected = [1 / np.sqrt(1.25), 0.5 / np.sqrt(1.06), 1 / np.sqrt(2)]
    np.testing.assert_allclose(cosine_similarity(predicted, targets), expected)


def test_region_recovery_auc_on_hand_made_maps():
    masks = np.array([[True, True, False, False], [False, False, True, True]])
    maps = np.array([[0.9, -0.8, 0.1, 0.2], [0.9, 0.1, 0.8, 0.2]])
    # map 1: |w| ranks the region first (AUC 1); map 2 vs region 1: pairs (0.8>0.9 no, 0.8>0.1, 0.2>0.9 no, 0.2>0.1)
    np.testing.assert_allclose(region_recovery_auc(maps, masks, [0, 1]), [1.0, 0.5])
    assert np.isnan(region_recovery_auc(maps, masks, [0, -1])[1])
    # ties (rounded weights) count 1/2, as scikit-learn's roc_auc_score counts them
    rng = np.random.default_rng(0)
    tied, regions = np.round(rng.normal(size=(3, 60)), 1), rng.random((2, 60)) < 0.3
    expected = [roc_auc_score(regions[r], np.abs(tied[k])) for k, r in enumerate([0, 1, 0])]
    np.testing.assert_allclose(region_recovery_auc(tied, regions, [0, 1, 0]), expected, rtol=1e-12)


def test_weight_maps_of_a_noisy_simulation_find_the_regions():
    rng = np.random.default_rng(4)
    concepts = (rng.random((400, 8)) < 0.3).astype(float)
    sim = simulate_voxels(concepts, grid=(12, 12, 6), noise=1.0, nuisance=0.5, seed=5)
    decoder = SemanticBottleneckDecoder().fit(sim.voxels, concepts, concepts @ rng.normal(size=(8, 6)))
    aucs = region_recovery_auc(decoder.weight_maps, sim.region_masks, sim.concept_regions)
    assert aucs.min() > 0.6  # chance is 0.5; at this noise the maps reach 0.68-0.82 (seed 4)
    assert (region_recovery_auc(sim.patterns, sim.region_masks, sim.concept_regions) == 1).all()


def test_simulator_regions_and_patterns():
    concepts = np.eye(4)
    sim = simulate_voxels(concepts, grid=(16, 16, 4), seed=0)
    assert sim.region_masks.shape == (len(REGIONS), 16 * 16 * 4)
    assert not (sim.region_masks.sum(0) > 1).any()  # the regions do not overlap
    for k, region in enumerate(sim.concept_regions):
        assert (sim.patterns[k][~sim.region_masks[region]] == 0).all() and sim.patterns[k].max() > 0
    names = ["gender: female", "father: doctor", "born in: France", "genre: fantasy", "award: Hugo", "colour"]
    np.testing.assert_array_equal(assign_regions(names), [0, 1, 2, 3, 3, 0])  # "colour" fills a least-used region


@pytest.mark.parametrize(
    ("voxels", "concepts", "embeddings", "message"),
    [
        (np.where(np.eye(4, 3) == 1, np.nan, 0), np.ones((4, 2)), np.ones((4, 2)), "voxels has 3 NaN.*row 0, column 0"),
        (np.ones((4, 3)), np.ones((5, 2)), np.ones((4, 2)), "voxels has 4, concepts has 5, embeddings has 4 rows"),
        (np.ones((4, 3)), np.full((4, 2), 0.3), np.ones((4, 2)), r"concepts: value 0.3 at row 0, column 0 is not"),
        (np.ones(4), np.ones((4, 2)), np.ones((4, 2)), r"voxels has shape \(4,\)"),
    ],
)
@pytest.mark.parametrize("decoder", [SemanticBottleneckDecoder, DirectRidgeDecoder])
def test_bad_input_raises_one_line(voxels, concepts, embeddings, message, decoder):
    """Both decoders take fit(voxels, concepts, embeddings) and check all three (the direct ridge ignores the
    concepts but still refuses non-binary ones and a row count that differs)."""
    with pytest.raises(ValueError, match=message):
        decoder().fit(voxels, concepts, embeddings)


def test_bad_arguments_and_unfitted_use():
    with pytest.raises(ValueError, match=r"alphas=\[0.0\] is invalid"):
        SemanticBottleneckDecoder(alphas=[0.0])
    with pytest.raises(ValueError, match="cv=1 is invalid"):
        DirectRidgeDecoder(cv=1)
    with pytest.raises(ValueError, match="selection='loo' is invalid, expected one of 'kfold_per_target'"):
        SemanticBottleneckDecoder(selection="loo")
    with pytest.raises(RuntimeError, match="not fitted"):
        DirectRidgeDecoder().predict(np.ones((2, 3)))
    decoder = DirectRidgeDecoder(alphas=[1.0]).fit(np.eye(4), np.eye(4), np.eye(4))
    with pytest.raises(ValueError, match="fitted on 4 voxels"):
        decoder.predict(np.ones((2, 3)))
    with pytest.raises(ValueError, match="noise=-1"):
        simulate_voxels(np.eye(2), noise=-1)
    with pytest.raises(RuntimeError, match="not fitted"):
        SemanticBottleneckDecoder().predict_concepts(np.ones((2, 3)))
