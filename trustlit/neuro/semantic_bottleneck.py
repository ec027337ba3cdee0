"""Brain decoding through a semantic bottleneck: voxels -> binary concepts -> target embedding, two ridge maps.

Cammarota, Ferrante, Toschi, "Bridging Brains and Concepts: Interpretable Visual Decoding from fMRI with Semantic
Bottlenecks" (NeurIPS 2025, OpenReview K6ijewH34E) factorise the linear semantic stage of BrainDiffuser (Ozcelik &
VanRullen 2023), h~ = Z W with Z the voxels [N, V] and h the CLIP embedding [N, D], as W = A B through an
interpretable space L of K binary answers ("Is there a person?", 214 in the paper):

- B: L -> embedding, a ridge fitted on the *true* concept vectors c (standardised: "B expects normalized inputs"),
  alpha by 5-fold CV over 1e-3..1e4;
- A: voxels -> L, a ridge fitted to the standardised concepts, alpha by 5-fold CV over 1e-6..1e6;
- decoding: h^ = B(A(z)), the continuous scores of A fed to B (no thresholding; ``binarize=True`` is our option);
- the weight maps are A's coefficients, one voxel-importance map per concept: ``weight_maps`` [K, V].

With z~ the voxels standardised on the training set and c~ the standardised concepts, each ridge minimises
||Y - X W - b||^2 + alpha ||W||^2, i.e. W = (X_c^T X_c + alpha I)^-1 X_c^T Y_c on centred X_c, Y_c, with one alpha
per target chosen by 5-fold CV as the paper's himalaya ``RidgeCV`` (:func:`trustlit.neuro.ridge.kfold_ridge`).
:class:`DirectRidgeDecoder` is BrainDiffuser's linear stage: one ridge z~ -> h.

Metrics: :func:`cosine_similarity` of predicted and true embeddings, :func:`two_way_identification` (BrainDiffuser's
2-way accuracy), :func:`region_recovery_auc` (how well a concept's weight map picks out its region's voxels).

Notes: docs/methods/semantic_bottleneck.md
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from sklearn.preprocessing import StandardScaler

from trustlit.audit.mia import roc_auc
from trustlit.data.concepts import check_binary
from trustlit.neuro.ridge import RidgeSolution, Selection, check_alphas, check_cv, check_selection, fit_ridge

CONCEPT_ALPHAS = tuple(np.logspace(-6, 6, 13).tolist())  # A: the paper's 1e-6 <= alpha <= 1e6
EMBEDDING_ALPHAS = tuple(np.logspace(-3, 4, 8).tolist())  # B: the paper's 1e-3 <= alpha <= 1e4


# -- input checks ------------------------------------------------------------------------------------------------


def check_matrix(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` as a finite float64 [N, F] array; NaN or infinity raises one line saying where."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} has shape {array.shape}, expected a non-empty 2-D array [samples, features]")
    bad = ~np.isfinite(array)
    if bad.any():
        rows, columns = np.nonzero(bad)
        raise ValueError(
            f"{name} has {int(bad.sum())} NaN/infinite values (first at row {rows[0]}, column {columns[0]}; "
            f"{len(np.unique(rows))} rows affected): impute or drop them first"
        )
    return array


def check_concepts(concepts: np.ndarray) -> np.ndarray:
    """``concepts`` as a float64 [N, K] array of 0/1 answers; anything else raises one line saying where."""
    array = check_matrix(concepts, "concepts")
    check_binary(array, "concepts")
    return array


def check_lengths(**arrays: np.ndarray) -> None:
    """Every array has the same number of rows (one per stimulus)."""
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(f"one row per stimulus is needed, but {listed} rows")


class _Standardised:
    """z-scoring fitted on the training rows (BrainDiffuser z-scores voxels with the training mean and std)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.scaler = StandardScaler()

    def fit(self, x: np.ndarray) -> np.ndarray:
        return self.scaler.fit_transform(x) if self.enabled else x

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.scaler.transform(x) if self.enabled else x

    def inverse(self, x: np.ndarray) -> np.ndarray:
        return self.scaler.inverse_transform(x) if self.enabled else x


class _Fitted:
    """Refuse predictions before ``fit`` and voxel arrays of the wrong width."""

    n_voxels: int | None = None

    def checked_voxels(self, voxels: np.ndarray) -> np.ndarray:
        if self.n_voxels is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(...) first")
        array = check_matrix(voxels, "voxels")
        if array.shape[1] != self.n_voxels:
            raise ValueError(f"voxels has {array.shape[1]} columns, the decoder was fitted on {self.n_voxels} voxels")
        return array


class SemanticBottleneckDecoder(_Fitted):
    """Voxels -> K binary concepts (ridge A) -> target embedding (ridge B), Cammarota et al. 2025 (module docstring).

    With z~ = standardise(z) and c~ = standardise(c) (training mean and std), the fit is

        B = ridge(c~ -> h),  A = ridge(z~ -> c~),  h^(z) = B(A(z~)),

    and ``predict_concepts`` returns A's scores in the annotation scale, c^ = unstandardise(A(z~)).

    Args:
        alphas: A's grid (default the paper's 1e-6..1e6, 13 values).
        embedding_alphas: B's grid (default the paper's 1e-3..1e4, 8 values).
        cv: folds of the CV (the paper: 5; contiguous, unshuffled, as himalaya's default ``KFold``).
        selection: how the alphas are chosen (:func:`trustlit.neuro.ridge.fit_ridge`): ``kfold_per_target``
            (default, the paper's himalaya ``RidgeCV``: one alpha per concept / embedding dimension, best mean
            validation MSE over ``cv`` folds), ``loo_per_target`` (scikit-learn's efficient leave-one-out CV, per
            target) or ``kfold_shared`` (one alpha for all targets, best MSE averaged over targets and folds).
        standardize: z-score the voxels with the training statistics (BrainDiffuser does).
        binarize: threshold A's scores at ``threshold`` before B (ours; the paper feeds the continuous scores).

    Notes: docs/methods/semantic_bottleneck.md
    """

    def __init__(
        self,
        alphas: Sequence[float] = CONCEPT_ALPHAS,
        embedding_alphas: Sequence[float] = EMBEDDING_ALPHAS,
        cv: int = 5,
        *,
        selection: Selection = "kfold_per_target",
        standardize: bool = True,
        binarize: bool = False,
        threshold: float = 0.5,
    ) -> None:
        self.alphas = check_alphas(alphas, "alphas")
        self.embedding_alphas = check_alphas(embedding_alphas, "embedding_alphas")
        self.cv = check_cv(cv)
        if not 0 < threshold < 1:
            raise ValueError(f"threshold={threshold!r} is invalid, expected a number in (0, 1)")
        self.selection = check_selection(selection)
        self.binarize, self.threshold = bool(binarize), float(threshold)
        self.voxel_scale = _Standardised(standardize)
        self.concept_scale = _Standardised(True)  # B expects normalised inputs (the paper)
        self.concept_map: RidgeSolution | None = None  # A
        self.embedding_map: RidgeSolution | None = None  # B

    def fit(self, voxels: np.ndarray, concepts: np.ndarray, embeddings: np.ndarray) -> SemanticBottleneckDecoder:
        """Fit B on the true concepts, then A on the voxels; voxels [N, V], concepts [N, K] in {0, 1},
        embeddings [N, D]."""
        z = check_matrix(voxels, "voxels")
        c = check_concepts(concepts)
        h = check_matrix(embeddings, "embeddings")
        check_lengths(voxels=z, concepts=c, embeddings=h)
        c_std = self.concept_scale.fit(c)
        self.embedding_map = fit_ridge(c_std, h, self.embedding_alphas, self.cv, self.selection)
        self.concept_map = fit_ridge(self.voxel_scale.fit(z), c_std, self.alphas, self.cv, self.selection)
        self.n_voxels = z.shape[1]
        return self

    def standardised_concepts(self, voxels: np.ndarray) -> np.ndarray:
        """A(z~): the concept scores in B's (standardised) input scale, [N, K]."""
        z = self.voxel_scale(self.checked_voxels(voxels))
        return self.concept_map.predict(z)

    def predict_concepts(self, voxels: np.ndarray) -> np.ndarray:
        """c^ [N, K]: A's continuous concept scores in the 0/1 annotation scale (threshold them for yes/no)."""
        return self.concept_scale.inverse(self.standardised_concepts(voxels))

    def predict(self, voxels: np.ndarray) -> np.ndarray:
        """h^ = B(A(z~)) [N, D] (with ``binarize``: B(standardise(1[c^ >= threshold])))."""
        scores = self.standardised_concepts(voxels)
        if self.binarize:
            answers = (self.concept_scale.inverse(scores) >= self.threshold).astype(np.float64)
            scores = self.concept_scale(answers)
        return self.embedding_map.predict(scores)

    def embed_concepts(self, concepts: np.ndarray) -> np.ndarray:
        """B applied to true concept vectors (the paper's "Int to CLIP" upper bound), [N, D]."""
        if self.embedding_map is None:
            raise RuntimeError("SemanticBottleneckDecoder is not fitted: call fit(...) first")
        return self.embedding_map.predict(self.concept_scale(check_concepts(concepts)))

    @property
    def weight_maps(self) -> np.ndarray:
        """A's coefficients [K, V]: each concept's voxel-importance map (on the standardised voxels)."""
        if self.concept_map is None:
            raise RuntimeError("SemanticBottleneckDecoder is not fitted: call fit(...) first")
        return self.concept_map.coef.T

    @property
    def chosen_alphas(self) -> dict[str, float | list[float]]:
        """The alphas the CV chose for A (``concepts``) and B (``embedding``)."""
        return {"concepts": _alpha(self.concept_map), "embedding": _alpha(self.embedding_map)}


class DirectRidgeDecoder(_Fitted):
    """BrainDiffuser's linear semantic stage (Ozcelik & VanRullen 2023): h^ = ridge(z~ -> h)(z~), the baseline of
    the semantic bottleneck (BrainDiffuser fixes alpha = 6e4 for every target; here the CV picks one per target from
    the same grid as A, as for the bottleneck).

    ``fit(voxels, concepts, embeddings)`` has the bottleneck's signature, so the two are interchangeable: the
    concepts are checked (0/1, one row per stimulus) and not used.

    Args: as :class:`SemanticBottleneckDecoder` (``alphas``, ``cv``, ``selection``, ``standardize``), and
        rescale: BrainDiffuser's test-time rescaling (off by default; transductive): each predicted dimension is
            z-scored over the rows passed to ``predict`` and mapped to the training embeddings' mean and std,
            h^'_d = (h^_d - mean(h^_d)) / std(h^_d) * std(h_d) + mean(h_d) (a constant column goes to mean(h_d)).

    Notes: docs/methods/semantic_bottleneck.md
    """

    def __init__(
        self,
        alphas: Sequence[float] = CONCEPT_ALPHAS,
        cv: int = 5,
        *,
        selection: Selection = "kfold_per_target",
        standardize: bool = True,
        rescale: bool = False,
    ) -> None:
        self.alphas = check_alphas(alphas, "alphas")
        self.cv = check_cv(cv)
        self.selection = check_selection(selection)
        self.voxel_scale = _Standardised(standardize)
        self.embedding_scale = _Standardised(bool(rescale))  # the training embeddings' statistics
        self.embedding_map: RidgeSolution | None = None

    def fit(self, voxels: np.ndarray, concepts: np.ndarray, embeddings: np.ndarray) -> DirectRidgeDecoder:
        """Fit the ridge voxels [N, V] -> embeddings [N, D]; ``concepts`` [N, K] in {0, 1} are checked, not used
        (the bottleneck's signature)."""
        z = check_matrix(voxels, "voxels")
        h = check_matrix(embeddings, "embeddings")
        check_lengths(voxels=z, concepts=check_concepts(concepts), embeddings=h)
        self.embedding_map = fit_ridge(self.voxel_scale.fit(z), h, self.alphas, self.cv, self.selection)
        self.embedding_scale.fit(h)
        self.n_voxels = z.shape[1]
        return self

    def predict(self, voxels: np.ndarray) -> np.ndarray:
        """h^ [N, D] (with ``rescale``: mapped to the training embeddings' statistics over these N rows)."""
        z = self.voxel_scale(self.checked_voxels(voxels))
        predicted = self.embedding_map.predict(z)
        if not self.embedding_scale.enabled:
            return predicted
        if len(predicted) < 2:
            raise ValueError(f"rescale=True needs >= 2 rows to predict (their own statistics), got {len(predicted)}")
        return self.embedding_scale.inverse(StandardScaler().fit_transform(predicted))

    @property
    def chosen_alphas(self) -> dict[str, float | list[float]]:
        return {"embedding": _alpha(self.embedding_map)}


def _alpha(model: RidgeSolution | None) -> float | list[float]:
    """One number for a shared alpha, else one per target."""
    if model is None:
        raise RuntimeError("the decoder is not fitted: call fit(...) first")
    return float(model.alphas[0]) if model.shared else model.alphas.tolist()


# -- metrics ------------------------------------------------------------------------------------------------------


def _rows(predicted: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p, t = check_matrix(predicted, "predicted"), check_matrix(target, "target")
    if p.shape != t.shape:
        raise ValueError(f"predicted has shape {p.shape} and target {t.shape}: they must match")
    return p, t


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def cosine_similarity(predicted: np.ndarray, target: np.ndarray) -> np.ndarray:
    """cos(h^_i, h_i) per stimulus, [N] (a zero row has similarity 0)."""
    p, t = _rows(predicted, target)
    return np.sum(_unit_rows(p) * _unit_rows(t), axis=1)


def two_way_identification(
    predicted: np.ndarray, target: np.ndarray, similarity: Literal["pearson", "cosine"] = "pearson"
) -> float:
    """2-way identification accuracy: the fraction of pairs (i, j != i) with s(h^_i, h_i) > s(h^_i, h_j) (ties count
    1/2), s the Pearson correlation (BrainDiffuser's evaluation) or the cosine; chance is 0.5."""
    p, t = _rows(predicted, target)
    if len(p) < 2:
        raise ValueError(f"2-way identification needs at least 2 stimuli, got {len(p)}")
    if similarity == "pearson":
        p, t = p - p.mean(axis=1, keepdims=True), t - t.mean(axis=1, keepdims=True)
    elif similarity != "cosine":
        raise ValueError(f"similarity={similarity!r} is invalid, expected 'pearson' or 'cosine'")
    s = _unit_rows(p) @ _unit_rows(t).T  # s[i, j] = s(h^_i, h_j)
    own = np.diag(s)[:, None]
    wins = (own > s).sum(axis=1) + 0.5 * ((own == s).sum(axis=1) - 1)  # the diagonal ties with itself
    return float(wins.sum() / (len(p) * (len(p) - 1)))


def region_recovery_auc(
    weight_maps: np.ndarray, region_masks: np.ndarray, concept_regions: Sequence[int]
) -> np.ndarray:
    """Per concept k, the ROC AUC of |weight_maps[k]| as a score for the membership of each voxel in the region
    ``concept_regions[k]`` (``region_masks`` [R, V] bool); 0.5 is chance, 1 a map whose largest weights are exactly
    the region's voxels. NaN for a concept with no region (index < 0)."""
    w = check_matrix(weight_maps, "weight_maps")
    masks = np.asarray(region_masks, dtype=bool)
    if masks.ndim != 2 or masks.shape[1] != w.shape[1]:
        raise ValueError(f"region_masks has shape {masks.shape}, expected [regions, {w.shape[1]} voxels]")
    if len(concept_regions) != len(w):
        raise ValueError(f"concept_regions has {len(concept_regions)} entries, weight_maps {len(w)} concepts")
    aucs = np.full(len(w), np.nan)
    for k, region in enumerate(concept_regions):
        if region >= 0:
            aucs[k] = roc_auc(np.abs(w[k]), masks[region])
    return aucs
