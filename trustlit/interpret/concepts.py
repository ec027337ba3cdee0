"""EXPLAIN-R: a concept surrogate of an embedding model (Hoang-Xuan, Wei, Xing, Yang, Thai, "Advancing
Interpretability of CLIP Representations with Concept Surrogate Model", NeurIPS 2025; code nhatkhtn/explain-r).

The surrogate maps a concept annotation c_i in {0,1}^K of item i into the model's embedding space,

    f(c_i) = normalize(c_i W + b),        W [K, D] (row W_k: the k-th concept's direction), b [D],

and is trained so that its similarity distributions match the model's. With model embeddings e_i
(queries; CLIP's images) and keys k_j (CLIP's texts; for a text-only encoder the keys are the same
embeddings, k_j = e_j), temperature tau, and the row-wise softmax

    P^e_i(j) = softmax_j(e_i . k_j / tau),      P^f_i(j) = softmax_j(f(c_i) . k_j / tau),

the loss is mean_i KL(P^e_i || P^f_i) (image-to-text, ``rows``) plus the same over the columns
(text-to-image: softmax over i for each key j, ``columns``), averaged. Minibatch KL has a biased
gradient (1/x of a minibatch mean); the paper tracks, per item i and direction, moving averages

    u_i <- (1 - gamma1) u_i + gamma1 mean_{j in B} exp(e_i . k_j / tau)      (model's normaliser)
    v_i <- (1 - gamma2) v_i + gamma2 mean_{j in B} exp(f(c_i) . k_j / tau)   (surrogate's normaliser)

(first visit of i: gamma = 1, the bias correction) and descends the objective of :func:`kd_objective`,

    L = mean_{i, j in B} [exp(e_i.k_j/tau) / u_i] [exp(f_i.k_j/tau) / v_i]_detached g_ij,
    g_ij = mean_{l in B} exp(f_i.k_l/tau) / exp(f_i.k_j/tau),

whose gradient is the paper's estimator of grad mean_i KL(P^e_i || P^f_i) (exact when B is the whole set).
Everything runs in log space: the similarity logits s = cos / tau (:func:`cosine_logits`, the same in
training and evaluation), log u and log v (:func:`log_moving_average`), and each term of L as one exponential
exp(t_ij - log u_i + logmeanexp_l s_il - log v_i), finite in float32 however small tau is.
Concept scores (Sec. 3.4): v_i(k) = lambda_i c_ik W_k . f(c_i), lambda_i = 1 / (||c_i W + b|| - b . f(c_i)),
summing to 1 over k; against a key t: v_i(k; t) = lambda c_ik W_k . t, lambda = f(c_i).t / ((c_i W).t),
summing to f(c_i) . t. Faithfulness (Sec. 4.1): recall@{1,5,10} and rsum of the surrogate's retrieval
against the model's own top-1, both directions; also Spearman correlation of the similarities.

Released defaults: tau = 0.1, gamma1 = gamma2 = 0.9, AdamW at lr 1e-3 (the config's 2.5e-3 after the
code's tau * batch / 256 scaling), weight decay 1e-6, amsgrad, batch 1024, 150 epochs.

Notes: docs/methods/explain_r.md
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch import nn

from trustlit.audit.mia import roc_auc
from trustlit.data.concepts import check_binary
from trustlit.hparams import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    plain_numbers,
)
from trustlit.interpret.splice import splice

__all__ = [
    "ExplainR",
    "check_concepts",
    "concept_scores",
    "cosine_logits",
    "deletion_agreement",
    "faithfulness",
    "kd_objective",
    "log_moving_average",
    "probe_concepts",
    "similarity_kl",
    "splice",
    "surrogate",
]

Direction = Literal["both", "rows", "columns"]
RECALL_AT = (1, 5, 10)


# --- checks -------------------------------------------------------------------------------------------


def check_concepts(concepts: torch.Tensor, embeddings: torch.Tensor | None = None, where: str = "concepts") -> None:
    """``concepts`` must be a [N, K] matrix of 0/1 values, with as many rows as ``embeddings`` [N, D]."""
    if concepts.ndim != 2:
        raise ValueError(f"{where}: concepts of shape {list(concepts.shape)}, expected [N, K]")
    check_binary(concepts, f"{where}: concepts")
    if embeddings is not None and (embeddings.ndim != 2 or embeddings.shape[0] != concepts.shape[0]):
        raise ValueError(
            f"{where}: {concepts.shape[0]} concept rows but embeddings of shape {list(embeddings.shape)}, "
            f"expected [{concepts.shape[0]}, D]"
        )


# --- the surrogate and its loss ------------------------------------------------------------------------


def surrogate(concepts: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """f(c) = normalize(c W + b): concepts [N, K], W [K, D], b [D] -> [N, D] unit rows."""
    return nn.functional.normalize(concepts @ weight + bias, dim=-1)


def cosine_logits(queries: torch.Tensor, keys: torch.Tensor, temperature: float) -> torch.Tensor:
    """cos(q_i, k_j) / tau [Nq, Nk]: the similarity logits of the loss, the logged KL and the evaluation alike."""
    return nn.functional.normalize(queries, dim=-1) @ nn.functional.normalize(keys, dim=-1).T / temperature


def log_mean_exp(logits: torch.Tensor) -> torch.Tensor:
    """log mean_j exp(logits_ij) [N] of an [N, M] matrix, without forming the exponentials."""
    return logits.logsumexp(dim=-1) - math.log(logits.shape[-1])


def log_moving_average(
    log_state: torch.Tensor, index: torch.Tensor, log_batch_mean: torch.Tensor, gamma: float
) -> torch.Tensor:
    """log u_i <- log((1 - gamma) u_i + gamma m_i) for the items ``index`` of ``log_state`` [N] (in place;
    returned [B]), from log u and log m, so no normaliser underflows at a small temperature.

    ``log_state`` -inf (u = 0) marks an item not seen yet: its first value is m_i itself (gamma = 1), the bias
    correction. The released code decides this once per batch (``u.sum() == 0``); per item is the
    paper's rule and matters when a batch mixes seen and unseen items (``drop_last`` with shuffling).
    """
    previous = log_state[index]
    unseen = previous == -torch.inf
    log_keep = math.log1p(-gamma) if gamma < 1 else -math.inf  # log(1 - gamma)
    kept = torch.where(unseen, torch.full_like(previous, -torch.inf), previous + log_keep)
    added = log_batch_mean.detach() + torch.where(unseen, 0.0, math.log(gamma))
    updated = torch.logaddexp(kept, added)
    log_state[index] = updated
    return updated


def kd_objective(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, log_u: torch.Tensor, log_v: torch.Tensor
) -> torch.Tensor:
    """The paper's surrogate objective (module docstring) for one direction; its gradient is the
    moving-average estimator of grad mean_i KL(P^e_i || P^f_i). ``teacher_logits``/``student_logits`` [B, B]
    (rows: items i, columns: keys j; :func:`cosine_logits`), ``log_u``/``log_v`` [B] the log normalisers of the
    rows' items. Each term [T_ij / u_i] [S_ij / v_i]_detached g_ij is one exponential,
    exp(t_ij - log u_i + logmeanexp_l s_il - log v_i + s_ij,detached - s_ij): its value is T_ij / u_i times
    mean_l S_il / v_i and its gradient the estimator's, with no exp(s) formed on its own (it underflows)."""
    student = student_logits
    log_u, log_v = log_u.detach().unsqueeze(-1), log_v.detach().unsqueeze(-1)  # normalisers: constants
    exponent = (
        teacher_logits.detach() - log_u + log_mean_exp(student).unsqueeze(-1) - log_v + (student.detach() - student)
    )
    return exponent.exp().mean()


def similarity_kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
    """mean_i KL(softmax(teacher_i) || softmax(student_i)) over the rows of two [N, M] logit matrices."""
    return nn.functional.kl_div(
        student_logits.log_softmax(dim=-1), teacher_logits.log_softmax(dim=-1), reduction="batchmean", log_target=True
    )


# --- concept scores -------------------------------------------------------------------------------------


def concept_scores(
    concepts: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, keys: torch.Tensor | None = None
) -> torch.Tensor:
    """The paper's projection scores [N, K].

    Without ``keys``: v_i(k) = lambda_i c_ik W_k . f(c_i), lambda_i = 1 / (||z_i|| - b . f(c_i)), z_i = c_i W + b;
    they sum to 1 over k. With ``keys`` [N, D] (one key t_i per item, e.g. the model's embedding of item i):
    v_i(k; t_i) = lambda_i c_ik W_k . t_i, lambda_i = f(c_i) . t_i / ((c_i W) . t_i); they sum to f(c_i) . t_i.
    Without keys this is the keyed score with t_i = f(c_i) (then f . f = 1 and (c W) . f = ||z|| - b . f).
    """
    f = surrogate(concepts, weight, bias)
    keys = f if keys is None else keys
    projections = concepts * (keys @ weight.T)  # c_ik W_k . t_i
    scale = (f * keys).sum(dim=-1, keepdim=True) / projections.sum(dim=-1, keepdim=True)
    return scale * projections


def deletion_agreement(
    concepts: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, keys: torch.Tensor | None = None
) -> dict[str, float]:
    """Does deleting an annotation move the surrogate as its concept score says?

    For every item i and active concept k: the score v_i(k; t_i) (:func:`concept_scores`) and the drop
    s_i - s_i^{-k} of the similarity s_i = f(c_i) . t_i when c_ik is set to 0 (t_i = f(c_i) without keys).
    Returns ``sign_agreement`` (share of pairs with sign(drop) = sign(score)) and ``spearman`` (rank
    correlation of scores and drops over all pairs); NaN when no item has an active concept.
    """
    f = surrogate(concepts, weight, bias)
    keys = f if keys is None else keys
    scores = concept_scores(concepts, weight, bias, keys)
    items, dropped = concepts.nonzero(as_tuple=True)
    if items.numel() == 0:
        return {"sign_agreement": float("nan"), "spearman": float("nan")}
    deleted = concepts[items].clone()
    deleted[torch.arange(items.numel()), dropped] = 0
    after = (surrogate(deleted, weight, bias) * keys[items]).sum(dim=-1)
    drop = (f[items] * keys[items]).sum(dim=-1) - after
    score = scores[items, dropped]
    return {
        "sign_agreement": float((torch.sign(drop) == torch.sign(score)).float().mean()),
        "spearman": spearman(score, drop),
    }


# --- faithfulness ----------------------------------------------------------------------------------------


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation of two 1-D samples (ties share their mean rank; scipy's ``spearmanr``)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a.detach().double().cpu().numpy(), b.detach().double().cpu().numpy()).statistic)


def recall_at(similarity: torch.Tensor, targets: torch.Tensor, ks: Sequence[int] = RECALL_AT) -> dict[int, float]:
    """Percent of rows whose target column ranks in the top k of ``similarity`` [N, M] (ties count in favour)."""
    target_scores = similarity.gather(1, targets.unsqueeze(1))
    ranks = (similarity > target_scores).sum(dim=1)
    return {k: 100.0 * float((ranks < k).float().mean()) for k in ks}


def faithfulness(
    surrogate_queries: torch.Tensor,
    keys: torch.Tensor,
    model_queries: torch.Tensor | None = None,
    ks: Sequence[int] = RECALL_AT,
    groups: torch.Tensor | None = None,
) -> dict[str, float]:
    """How well surrogate queries f_i [N, D] reproduce the model's similarities to keys [N, D].

    S = f k^T (surrogate), T = e k^T (model; ``model_queries`` None means a text-only encoder, e = k).
    ``rows_r@k``: percent of items i whose model top-1 key argmax_j T_ij is in the top k of S_i;
    ``columns_r@k`` the same per key over the items; ``rsum`` = the sum of the six (max 600), the
    paper's faithfulness rsum. For a text-only encoder the diagonal (an item and itself, always the
    model's top-1) is left out of T, S and the targets. ``pair_rsum``: the same with the item's own key
    as target (the paper's "performance"). ``spearman``: rank correlation of S and T over the pairs
    i != j. The SpLiCE baseline passes its reconstructions as ``surrogate_queries``. ``groups`` [N] (text-only
    encoders): also leave out every pair of the same group (e.g. two descriptions of one author), so R@k asks
    for the model's nearest item of another group; the pair metrics keep every key.
    """
    text_only = model_queries is None
    model_queries = keys if text_only else model_queries
    if not (surrogate_queries.shape == keys.shape == model_queries.shape) or keys.ndim != 2 or len(keys) < 2:
        raise ValueError(
            f"faithfulness: surrogate_queries {list(surrogate_queries.shape)}, keys {list(keys.shape)} and "
            f"model_queries {list(model_queries.shape)} must all be the same [N >= 2, D]"
        )
    unit = nn.functional.normalize
    s = unit(surrogate_queries.float(), dim=-1) @ unit(keys.float(), dim=-1).T
    t = unit(model_queries.float(), dim=-1) @ unit(keys.float(), dim=-1).T
    if groups is not None and (not text_only or groups.shape != (len(keys),)):
        raise ValueError(f"faithfulness: groups must be [N={len(keys)}] and needs model_queries=None")
    groups = torch.arange(len(keys), device=keys.device) if groups is None else groups.to(keys.device)
    off = groups[:, None] != groups[None, :]
    results = {"spearman": spearman(s[off], t[off])}
    masked_s = s.masked_fill(~off, -torch.inf) if text_only else s
    masked_t = t.masked_fill(~off, -torch.inf) if text_only else t
    own = torch.arange(len(keys), device=keys.device)
    for name, sim, model_sim in (("rows", masked_s, masked_t), ("columns", masked_s.T, masked_t.T)):
        for k, value in recall_at(sim, model_sim.argmax(dim=1), ks).items():
            results[f"{name}_r@{k}"] = value
        for k, value in recall_at(s if name == "rows" else s.T, own, ks).items():
            results[f"pair_{name}_r@{k}"] = value
    results["rsum"] = sum(results[f"{name}_r@{k}"] for name in ("rows", "columns") for k in ks)
    results["pair_rsum"] = sum(results[f"pair_{name}_r@{k}"] for name in ("rows", "columns") for k in ks)
    return results


def probe_concepts(
    train_embeddings: torch.Tensor,
    train_concepts: torch.Tensor,
    test_embeddings: torch.Tensor,
    test_concepts: torch.Tensor,
    max_iter: int = 1000,
) -> dict[str, Any]:
    """The linear-probe baseline: one logistic regression (scikit-learn, L2, C = 1) per concept from the
    embeddings; held-out ``accuracy`` and ``auc`` per concept (NaN for a concept constant on either
    split) and their means over the concepts that have both. A probe reads concepts out of the embedding;
    it makes no embedding, so it has no faithfulness rsum."""
    from sklearn.linear_model import LogisticRegression

    check_concepts(train_concepts, train_embeddings, "probe_concepts (train)")
    check_concepts(test_concepts, test_embeddings, "probe_concepts (test)")
    x_train, x_test = train_embeddings.double().cpu().numpy(), test_embeddings.double().cpu().numpy()
    accuracy, auc = [], []
    for k in range(train_concepts.shape[1]):
        y_train, y_test = train_concepts[:, k].cpu(), test_concepts[:, k].cpu()
        if len(y_train.unique()) < 2 or len(y_test.unique()) < 2:
            accuracy.append(float("nan"))
            auc.append(float("nan"))
            continue
        probe = LogisticRegression(C=1.0, max_iter=max_iter).fit(x_train, y_train.numpy())
        accuracy.append(float(probe.score(x_test, y_test.numpy())))
        auc.append(roc_auc(torch.from_numpy(probe.decision_function(x_test)), y_test.bool()))
    measured = torch.tensor(auc).isfinite()
    return {
        "accuracy": accuracy,
        "auc": auc,
        "mean_accuracy": float(torch.tensor(accuracy)[measured].mean()) if measured.any() else float("nan"),
        "mean_auc": float(torch.tensor(auc)[measured].mean()) if measured.any() else float("nan"),
        "probed_concepts": int(measured.sum()),
    }


def oriented(direction: str, *matrices: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The [queries, keys] matrices as they are for ``rows`` (image-to-text), transposed for ``columns``."""
    return matrices if direction == "rows" else tuple(matrix.T for matrix in matrices)


# --- the LightningModule --------------------------------------------------------------------------------


class ExplainR(L.LightningModule):
    """EXPLAIN-R's concept surrogate f(c) = normalize(c W + b) of an embedding model (module docstring).

    Batches: ``{"embeddings" [B, D], "concepts" [B, K] (0/1), "index" [B]}`` (``EmbeddingConceptDataModule``),
    optionally ``"keys" [B, D]`` (a second modality, CLIP's texts; without it the keys are the embeddings).
    ``index`` addresses the per-item moving averages u, v. Logs ``train/loss`` (the objective), ``train/kl``
    (minibatch KL averaged over the directions), ``train/accuracy`` (argmax agreement); ``val/kl`` and the
    :func:`faithfulness` metrics ``val/rsum``, ``val/spearman``, ... over the validation items (at most
    ``eval_items``), the same under ``test/``. After fit: ``<default_root_dir>/explain_r_concepts.png``,
    the top concept scores of the first validation items (also to W&B when a WandbLogger is attached).

    Args:
        num_concepts: K, the concept vocabulary size (None: the data module's ``num_concepts``, read in ``setup``).
        embedding_dim: D, the model's embedding width (None: the data module's ``embedding_dim``).
        temperature: tau of the similarity softmax (released 0.1).
        gamma1: moving-average rate of the model's normaliser u, in (0, 1] (released 0.9).
        gamma2: moving-average rate of the surrogate's normaliser v, in (0, 1] (released 0.9).
        directions: ``both`` (the paper), or only ``rows`` (image-to-text) or ``columns`` (text-to-image).
        lr: AdamW learning rate (released 1e-3 effective).
        weight_decay: AdamW weight decay (released 1e-6).
        amsgrad: AdamW's amsgrad (released True).
        eval_items: validation/test items the faithfulness metrics use (the first ones; N^2 similarities).
        figure_items: items drawn in the concept-score figure (0: no figure).
        top_concepts: concepts per item in the figure.
    """

    def __init__(
        self,
        num_concepts: PositiveInt | None = None,
        embedding_dim: PositiveInt | None = None,
        temperature: PositiveFloat = 0.1,
        gamma1: PositiveFloat = 0.9,
        gamma2: PositiveFloat = 0.9,
        directions: Direction = "both",
        lr: PositiveFloat = 1e-3,
        weight_decay: NonNegativeFloat = 1e-6,
        amsgrad: bool = True,
        eval_items: PositiveInt = 2000,
        figure_items: NonNegativeInt = 4,
        top_concepts: PositiveInt = 8,
    ) -> None:
        super().__init__()
        check_arguments(ExplainR.__init__, locals())
        for name, gamma in (("gamma1", gamma1), ("gamma2", gamma2)):
            if gamma > 1:
                raise ValueError(f"ExplainR: {name}={gamma!r} is invalid, expected a number in (0, 1]")
        if directions not in ("both", "rows", "columns"):
            raise ValueError(f"ExplainR: directions={directions!r} is invalid, expected both, rows or columns")
        self.save_hyperparameters()
        plain_numbers(self.hparams)
        self.encoder: nn.Linear | None = None
        if num_concepts is not None and embedding_dim is not None:
            self.build()
        # per item and direction: log u (model's normaliser), log v (surrogate's); grown to the largest index
        # seen. Not in checkpoints: after a resume every item starts again from its first visit (gamma = 1).
        for name in ("log_u_rows", "log_v_rows", "log_u_columns", "log_v_columns"):
            self.register_buffer(name, torch.zeros(0), persistent=False)
        self._eval: dict[str, list[torch.Tensor]] = {}

    @property
    def weight(self) -> torch.Tensor:
        """W [K, D]: row k is concept k's direction."""
        return self.encoder.weight.T

    @property
    def bias(self) -> torch.Tensor:
        return self.encoder.bias

    def forward(self, concepts: torch.Tensor) -> torch.Tensor:
        """f(c) [B, D]."""
        return surrogate(concepts, self.weight, self.bias)

    def scores(self, concepts: torch.Tensor, keys: torch.Tensor | None = None) -> torch.Tensor:
        """:func:`concept_scores` of ``concepts`` under the current W, b."""
        return concept_scores(concepts.to(self.weight.dtype), self.weight, self.bias, keys)

    # --- checks -------------------------------------------------------------------------------------

    def build(self) -> None:
        """The linear map c -> c W + b, once K and D are known."""
        self.encoder = nn.Linear(int(self.hparams.num_concepts), int(self.hparams.embedding_dim))

    def setup(self, stage: str) -> None:
        """Take K and D from the data module where they were not given, else check that they agree."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        for name in ("num_concepts", "embedding_dim"):
            found = getattr(datamodule, name, None)
            if found is not None and self.hparams[name] is None:
                self.hparams[name] = int(found)
            elif found is not None and int(found) != self.hparams[name]:
                raise ValueError(
                    f"{type(datamodule).__name__}: {name}={int(found)}, but ExplainR has "
                    f"{name}={self.hparams[name]}: set model.init_args.{name}={int(found)} or leave it out"
                )
            elif self.hparams[name] is None:
                raise ValueError(f"ExplainR: {name} is not given and the data module does not say it")
        if self.encoder is None:
            self.build()

    def unpack(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(concepts, model queries e, keys) of a batch, checked; e and the keys unit-normalised (the loss,
        the KL and the faithfulness metrics are cosines; the keyed concept scores then sum to cosines)."""
        embeddings, concepts = batch["embeddings"], batch["concepts"]
        check_concepts(concepts, embeddings, "ExplainR batch")
        widths = (embeddings.shape[1], concepts.shape[1])
        if widths != (self.hparams.embedding_dim, self.hparams.num_concepts):
            raise ValueError(
                f"ExplainR: a batch of embeddings [B, {widths[0]}] and concepts [B, {widths[1]}], expected "
                f"[B, embedding_dim={self.hparams.embedding_dim}] and [B, num_concepts={self.hparams.num_concepts}]"
            )
        unit = nn.functional.normalize
        queries = unit(embeddings.to(self.weight.dtype), dim=-1)
        keys = unit(batch["keys"].to(self.weight.dtype), dim=-1) if "keys" in batch else queries
        return concepts.to(self.weight.dtype), queries, keys

    # --- training -----------------------------------------------------------------------------------

    def normalisers(self, direction: str, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """log u, log v of ``direction``, grown to ``size`` items with -inf (not seen yet)."""
        log_u, log_v = getattr(self, f"log_u_{direction}"), getattr(self, f"log_v_{direction}")
        if len(log_u) < size:
            pad = torch.full((size - len(log_u),), -torch.inf, device=log_u.device, dtype=log_u.dtype)
            log_u, log_v = torch.cat([log_u, pad]), torch.cat([log_v, pad])
            setattr(self, f"log_u_{direction}", log_u)
            setattr(self, f"log_v_{direction}", log_v)
        return log_u, log_v

    def directions(self) -> tuple[str, ...]:
        return ("rows", "columns") if self.hparams.directions == "both" else (self.hparams.directions,)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        concepts, queries, keys = self.unpack(batch)
        index = batch["index"].long().to(self.device)
        tau = self.hparams.temperature
        teacher, student = cosine_logits(queries, keys, tau), cosine_logits(self(concepts), keys, tau)
        objectives, kls, agreements = [], [], []
        for direction in self.directions():
            t, s = oriented(direction, teacher, student)
            log_u_state, log_v_state = self.normalisers(direction, int(index.max()) + 1)
            log_u = log_moving_average(log_u_state, index, log_mean_exp(t), self.hparams.gamma1)
            log_v = log_moving_average(log_v_state, index, log_mean_exp(s.detach()), self.hparams.gamma2)
            objectives.append(kd_objective(t, s, log_u, log_v))
            kls.append(similarity_kl(t, s.detach()))
            agreements.append((t.argmax(dim=-1) == s.argmax(dim=-1)).float().mean())
        loss = torch.stack(objectives).mean()
        self.log_dict(
            {
                "train/loss": loss.detach(),
                "train/kl": torch.stack(kls).mean(),
                "train/accuracy": torch.stack(agreements).mean(),
            }
        )
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            self.parameters(),
            lr=self.hparams.lr,
            weight_decay=self.hparams.weight_decay,
            amsgrad=self.hparams.amsgrad,
        )

    # --- validation and test ------------------------------------------------------------------------

    def eval_start(self) -> None:
        self._eval = {"concepts": [], "queries": [], "keys": [], "kl": [], "paired": []}

    @torch.no_grad()
    def eval_step(self, batch: dict[str, torch.Tensor]) -> None:
        concepts, queries, keys = self.unpack(batch)
        tau = self.hparams.temperature
        teacher, student = cosine_logits(queries, keys, tau), cosine_logits(self(concepts), keys, tau)
        kl = [similarity_kl(*oriented(direction, teacher, student)) for direction in self.directions()]
        self._eval["kl"].append(torch.stack(kl).mean())
        self._eval["paired"].append(torch.tensor("keys" in batch))
        seen = sum(len(c) for c in self._eval["concepts"])
        room = max(self.hparams.eval_items - seen, 0)
        for name, rows in (("concepts", concepts), ("queries", queries), ("keys", keys)):
            self._eval[name].append(rows[:room])

    def eval_end(self, prefix: str) -> dict[str, float]:
        if not self._eval.get("kl"):
            return {}
        concepts, queries, keys = (torch.cat(self._eval[name]) for name in ("concepts", "queries", "keys"))
        metrics = {"kl": float(torch.stack(self._eval["kl"]).mean())}
        if len(keys) >= 2:
            with torch.no_grad():
                paired = bool(torch.stack(self._eval["paired"]).any())
                metrics |= faithfulness(self(concepts), keys, queries if paired else None)
                deletion = deletion_agreement(concepts, self.weight, self.bias, keys)
            metrics |= {f"deletion_{name}": value for name, value in deletion.items()}
        self.log_dict({f"{prefix}/{name}": value for name, value in metrics.items()})
        return metrics

    def on_validation_epoch_start(self) -> None:
        self.eval_start()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self.eval_end("val")

    def on_test_epoch_start(self) -> None:
        self.eval_start()

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self.eval_end("test")

    # --- the figure ---------------------------------------------------------------------------------

    def on_fit_end(self) -> None:
        items = self.hparams.figure_items
        if items == 0 or not self._eval.get("concepts") or not self.trainer.is_global_zero:
            return
        concepts = torch.cat(self._eval["concepts"])[:items]
        names = getattr(getattr(self.trainer, "datamodule", None), "concept_names", None)
        path = concept_score_figure(
            self.scores(concepts).detach().cpu(),
            concepts.cpu(),
            names,
            self.hparams.top_concepts,
            Path(self.trainer.default_root_dir) / "explain_r_concepts.png",
        )
        from trustlit.figures import log_to_wandb

        log_to_wandb(self.trainer, "explain_r", images=[path])


def concept_score_figure(
    scores: torch.Tensor, concepts: torch.Tensor, names: Sequence[str] | None, top: int, path: Path
) -> Path:
    """One bar chart per item: its ``top`` active concepts by score v_i(k) (they sum to 1 over all k)."""
    from trustlit.figures import new_figure, save_png

    names = list(names) if names is not None else [f"concept {k}" for k in range(scores.shape[1])]
    figure, axes = new_figure(nrows=1, ncols=len(scores), figsize=(3.2 * len(scores), 3.0), squeeze=False)
    for item, axis in enumerate(axes[0]):
        active = concepts[item].nonzero().flatten()
        order = active[scores[item, active].argsort(descending=True)][:top]
        axis.barh([names[k] for k in order.tolist()][::-1], scores[item, order].tolist()[::-1], color="tab:blue")
        axis.set_title(f"item {item}", fontsize=9)
        axis.set_xlabel("concept score v_i(k)", fontsize=8)
        axis.tick_params(labelsize=7)
    return save_png(figure, path)
