"""Linear probes on layer representations: how well a layer's state linearly decodes a label.

:func:`probe_accuracy` is the cross-validated accuracy of a multinomial logistic regression
(scikit-learn ``LogisticRegression``, L2, ``C = 1``, lbfgs) on standardised features, with stratified
folds: the per-layer "is the decision readable here" curve next to the intrinsic dimension (Joshi,
Bhatt, Modi, NeurIPS 2025, arXiv 2511.20315, read the decision from each layer; see
docs/methods/intrinsic_dimension.md for how their layer-wise accuracy differs).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def probe_accuracy(features: Any, labels: Any, folds: int = 5, seed: int = 0, max_iter: int = 1000) -> list[float]:
    """The held-out accuracy of each of ``folds`` stratified folds (a list; report its mean and spread).

    ``features`` ``[N, D]``, ``labels`` ``[N]`` (torch or numpy). Every class needs at least ``folds``
    samples: fewer is a one-line error naming the class count.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = np.asarray(features.cpu() if hasattr(features, "cpu") else features, dtype=np.float64)
    y = np.asarray(labels.cpu() if hasattr(labels, "cpu") else labels)
    if x.ndim != 2 or y.shape != (len(x),):
        raise ValueError(f"probe_accuracy: features must be [N, D] and labels [N], got {x.shape} and {y.shape}")
    if folds < 2:
        raise ValueError(f"probe_accuracy: folds={folds} is invalid, expected an integer >= 2")
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2 or counts.min() < folds:
        raise ValueError(
            f"probe_accuracy: {folds}-fold cross-validation needs 2 or more classes with at least {folds} samples "
            f"each, got counts {dict(zip(classes.tolist(), counts.tolist(), strict=True))}"
        )
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=max_iter))
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return [float(a) for a in cross_val_score(model, x, y, cv=splitter, scoring="accuracy")]
