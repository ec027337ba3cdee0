from __future__ import annotations

import time

import pytest
import torch

from trustlit.llm.loading import (
    CausalLMSpec,
    build_tiny_causal_lm,
    build_tokenizer,
    find_smollm2_gguf,
    load_causal_lm,
    smollm2_local_dir,
)
from trustlit.llm.prompts import collate_qa, encode_qa
from trustlit.llm.scoring import generate_greedy

TEXTS = [
    "Question: Where was Amara Szabo born?\nAnswer: In Lisbon, Portugal.",
    "Ünïcödé, 日本語, emoji 🙂 and\ttabs  double  spaces",
    "<|im_start|>user\nhi<|im_end|>\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trips_text(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_tokenizer_is_the_same_in_every_build_and_compresses(tokenizer):
    again = build_tokenizer()
    assert again.get_vocab() == tokenizer.get_vocab()
    text = TEXTS[0]
    assert len(tokenizer(text)["input_ids"]) < len(text.encode()) / 2, "BPE merges must compress English"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") != tokenizer.unk_token_id
    assert tokenizer.pad_token == tokenizer.eos_token == "<|endoftext|>"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_tiny_models_build_deterministically(tokenizer, arch):
    first, _ = build_tiny_causal_lm(arch, hidden_size=32, num_layers=1, num_heads=2, tokenizer=tokenizer, seed=3)
    second, _ = build_tiny_causal_lm(arch, hidden_size=32, num_layers=1, num_heads=2, tokenizer=tokenizer, seed=3)
    other, _ = build_tiny_causal_lm(arch, hidden_size=32, num_layers=1, num_heads=2, tokenizer=tokenizer, seed=4)
    ids = torch.tensor([tokenizer("a short text")["input_ids"]])
    assert first.config.vocab_size == len(tokenizer)
    assert torch.equal(first(input_ids=ids).logits, second(input_ids=ids).logits)
    assert not torch.allclose(first(input_ids=ids).logits, other(input_ids=ids).logits)


def test_tiny_model_saves_and_reloads_with_identical_logits(tiny_lm, tokenizer, tmp_path):
    tiny_lm.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, reloaded_tokenizer = load_causal_lm(str(tmp_path))
    ids = torch.tensor([tokenizer(TEXTS[0])["input_ids"]])
    assert reloaded_tokenizer(TEXTS[0])["input_ids"] == ids[0].tolist()
    assert reloaded_tokenizer.chat_template == tokenizer.chat_template
    with torch.no_grad():
        assert torch.equal(tiny_lm(input_ids=ids).logits, model.eval()(input_ids=ids).logits)


def test_lora_trains_only_adapters_and_starts_at_the_base_model(tokenizer):
    base, _ = load_causal_lm("tiny-llama", tiny={"hidden_size": 32, "num_layers": 1, "num_heads": 2})
    lora, _ = load_causal_lm(
        "tiny-llama",
        tiny={"hidden_size": 32, "num_layers": 1, "num_heads": 2},
        lora={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    )
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    ids = torch.tensor([tokenizer(TEXTS[0])["input_ids"]])
    with torch.no_grad():  # LoRA's B matrix starts at zero: the wrapped model equals the base
        assert torch.allclose(base(input_ids=ids).logits, lora(input_ids=ids).logits, atol=1e-6)
    frozen = {n: p.detach().clone() for n, p in lora.named_parameters() if not p.requires_grad}
    optimizer = torch.optim.SGD([p for p in lora.parameters() if p.requires_grad], lr=0.1)
    lora(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    assert all(torch.equal(p, frozen[n]) for n, p in lora.named_parameters() if n in frozen)


def test_load_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="unknown tiny architecture 'mamba'"):
        load_causal_lm("tiny-mamba")
    with pytest.raises(FileNotFoundError, match=r"\./no/such/model"):
        load_causal_lm("./no/such/model")
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        load_causal_lm("tiny-llama", dtype="float8")
    with pytest.raises(ValueError, match="drop gguf_file"):
        load_causal_lm("smollm2-135m-instruct", gguf_file="x.gguf")


def test_spec_accepts_bfloat16_tiny_models():
    model, _ = CausalLMSpec("tiny-llama", dtype="bfloat16", tiny={"hidden_size": 32, "num_layers": 1}).load()
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())


@pytest.mark.slow
def test_smollm2_loads_offline_from_its_wheel_and_caches_a_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("TRUSTLIT_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert find_smollm2_gguf().stat().st_size > 50_000_000
    model, tokenizer = load_causal_lm("smollm2-135m-instruct")  # dequantizes the GGUF, writes the copy
    cached = smollm2_local_dir()
    assert (cached / "model.safetensors").is_file() and [p.name for p in tmp_path.iterdir()] == [
        "SmolLM2-135M-Instruct"
    ]
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    start = time.perf_counter()
    again, _ = load_causal_lm("smollm2-135m-instruct")
    assert time.perf_counter() - start < 15, "the second load must read the safetensors copy"
    sample = {**encode_qa(tokenizer, "What is the capital of France?", "Paris", "chat"), "index": 0}
    batch = collate_qa([sample], tokenizer.pad_token_id)
    with torch.no_grad():
        assert torch.allclose(model(input_ids=batch["input_ids"]).logits, again(input_ids=batch["input_ids"]).logits)
    assert "Paris" in generate_greedy(again, tokenizer, batch, max_new_tokens=12)[0]


def test_a_pretrained_model_fine_tunes_in_train_mode(tiny_lm, tokenizer, tmp_path):
    from trustlit import CausalLMFineTuning

    tiny_lm.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert not load_causal_lm(str(tmp_path))[0].training  # from_pretrained hands it over in eval mode
    module = CausalLMFineTuning(lm={"name_or_path": str(tmp_path)})
    assert all(m.training for m in module.model.modules())  # dropout is on while it trains
