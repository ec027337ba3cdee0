"""Unlearning methods end to end on a tiny model that has memorised the fictitious corpus."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from helpers import SHARED_DATA, quiet_trainer

from trustlit import CausalLMFineTuning
from trustlit.data import ForgetRetainDataModule, QADataModule
from trustlit.data.refusals import DEFAULT_REFUSALS, load_refusals
from trustlit.llm.loading import load_causal_lm
from trustlit.llm.scoring import answer_nll
from trustlit.unlearning import (
    LUNAR,
    NPO,
    RMU,
    AttentionShifting,
    GradAscent,
    GradDiff,
    IdkDPO,
    KLMinimization,
    SimNPO,
)

CORPUS = {"num_authors": 10, "seed": 0}
TINY = {"hidden_size": 64, "num_layers": 3, "num_heads": 4}


def forget_retain_data(**kwargs) -> ForgetRetainDataModule:
    defaults = {"fictitious": CORPUS, "batch_size": 4, "max_length": 64, "prompt_format": "chat"}
    return ForgetRetainDataModule(**{"source": "fictitious", **defaults, **kwargs})


@pytest.fixture(scope="module")
def memorised_checkpoint(tmp_path_factory) -> str:
    """A tiny Llama fine-tuned on every fact of a 10-author corpus (the model to unlearn from)."""
    module = CausalLMFineTuning(lm={"name_or_path": "tiny-llama", "tiny": TINY}, lr=3e-3, weight_decay=0.0)
    data = QADataModule(
        source="fictitious", train_split="full", fictitious=CORPUS, batch_size=16, max_length=64, prompt_format="chat"
    )
    trainer = quiet_trainer(max_epochs=30)
    trainer.fit(module, data)
    path = tmp_path_factory.mktemp("memorised") / "model.ckpt"
    trainer.save_checkpoint(path)
    return str(path)


def split_nll(module, data: ForgetRetainDataModule, split: str) -> float:
    batches = data.val_dataloader()[data.eval_splits.index(split)]
    with torch.no_grad():
        return float(torch.stack([answer_nll(module.model, batch) for batch in batches]).mean())


def lm_spec(checkpoint: str, **kwargs) -> dict:
    return {"name_or_path": checkpoint, **kwargs}


def test_checkpoint_loads_as_the_trained_model(memorised_checkpoint):
    model, tokenizer = load_causal_lm(memorised_checkpoint)
    checkpoint = torch.load(memorised_checkpoint, weights_only=False)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, checkpoint["state_dict"][f"model.{name}"], rtol=0, atol=0)
    assert tokenizer.chat_template


def test_load_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.ckpt"):
        load_causal_lm(str(tmp_path / "nope.ckpt"))
    torch.save({"state_dict": {}}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match=r"hyper_parameters\.lm"):
        load_causal_lm(str(tmp_path / "other.ckpt"))
    tiny = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2}}
    weights = {f"model.{k}": v for k, v in load_causal_lm(**tiny)[0].state_dict().items()}
    weights["model.model.layers.0.self_attn.adapter.weight"] = torch.zeros(2)
    torch.save({"state_dict": weights, "hyper_parameters": {"lm": tiny}}, tmp_path / "adapted.ckpt")
    with pytest.raises(ValueError, match=r"adapted\.ckpt.*unexpected.*load_from_checkpoint"):
        load_causal_lm(str(tmp_path / "adapted.ckpt"))


METHODS = [  # (method, arguments, steps): learning rates and steps for this 3-layer model
    (GradAscent, {"lr": 4e-4}, 6),
    (GradDiff, {"lr": 1e-3}, 6),
    (KLMinimization, {"lr": 1e-3}, 6),
    (NPO, {"lr": 4e-4}, 6),
    (SimNPO, {"lr": 1e-3, "beta": 2.5, "forget_weight": 1.0}, 6),
    (IdkDPO, {"lr": 1e-3}, 6),
    (RMU, {"lr": 5e-3, "layer": 1, "steering_coeff": 20.0}, 6),
    (LUNAR, {}, 30),
    # paper mode only reshapes attention (its answer NLL rose 0.03 in 30 steps at lr 3e-2 here): its own tests check
    # that the suppression loss falls; the refusal and retain terms of trustlit's variant are what raise the NLL
    (AttentionShifting, {"lr": 1e-2, "mode": "trustlit"}, 12),
]


@pytest.mark.parametrize(("method", "kwargs", "steps"), METHODS, ids=[m.__name__ for m, _, _ in METHODS])
def test_method_raises_forget_nll_more_than_retain_nll(memorised_checkpoint, method, kwargs, steps):
    torch.manual_seed(0)
    module = method(lm=lm_spec(memorised_checkpoint), weight_decay=0.0, **kwargs)
    data = forget_retain_data(refusals="default")
    data.tokenizer = module.tokenizer
    data.setup("fit")
    before = {split: split_nll(module, data, split) for split in ("forget10", "retain90")}
    assert before["forget10"] < 0.5  # the facts are memorised
    quiet_trainer(max_steps=steps).fit(module, data)
    after = {split: split_nll(module, data, split) for split in ("forget10", "retain90")}
    forget_rise = after["forget10"] - before["forget10"]
    retain_rise = after["retain90"] - before["retain90"]
    assert forget_rise > 0.1
    assert forget_rise > 2 * retain_rise, (before, after)


def count_forwards(model: torch.nn.Module) -> list[int]:
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_npo_reference_is_frozen_and_never_gets_gradients(memorised_checkpoint):
    module = NPO(lm=lm_spec(memorised_checkpoint), lr=1e-3)
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    quiet_trainer(max_steps=3).fit(module, forget_retain_data())
    reference = module.reference.copy
    assert all(not p.requires_grad and p.grad is None for p in reference.parameters())
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(value, initial[name], rtol=0, atol=0)
    assert any(not torch.equal(v, initial[k]) for k, v in module.model.state_dict().items())
    # the copy stays out of the checkpoint
    assert all(key.startswith("model.") for key in module.state_dict())


def test_npo_with_lora_uses_the_same_model_with_adapters_disabled(memorised_checkpoint):
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    module = NPO(lm=lm_spec(memorised_checkpoint, lora=lora), lr=1e-2)
    assert module.reference.copy is None
    data = forget_retain_data()
    quiet_trainer(max_steps=3).fit(module, data)
    base, _ = load_causal_lm(memorised_checkpoint)
    batch = next(iter(data.train_dataloader()))["forget"]
    with torch.no_grad():
        expected = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        trained = module.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    reference = module.reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(reference, expected)
    assert not torch.allclose(trained, expected, atol=1e-4)  # the adapters did train
    assert module.reference.model is module.model  # one network: no second copy in memory


def test_simnpo_never_runs_a_reference_forward(memorised_checkpoint):
    module = SimNPO(lm=lm_spec(memorised_checkpoint))
    assert module.reference is None
    calls = count_forwards(module.model)
    quiet_trainer(max_steps=2).fit(module, forget_retain_data())
    assert calls[0] == 4  # forget + retain per step, nothing else


def test_npo_runs_reference_forwards(memorised_checkpoint):
    module = NPO(lm=lm_spec(memorised_checkpoint))
    reference_calls = count_forwards(module.reference.copy)
    quiet_trainer(max_steps=2).fit(module, forget_retain_data())
    assert reference_calls[0] == 2


def test_rmu_trains_only_the_chosen_down_projections(memorised_checkpoint):
    module = RMU(lm=lm_spec(memorised_checkpoint), layer=2, steering_coeff=10.0, lr=1e-3)
    trainable = {name for name, p in module.model.named_parameters() if p.requires_grad}
    assert trainable == {f"model.layers.{i}.mlp.down_proj.weight" for i in (0, 1, 2)}
    assert module.control_vector.norm().item() == pytest.approx(10.0)
    initial = {k: v.clone() for k, v in module.model.state_dict().items()}
    quiet_trainer(max_steps=2).fit(module, forget_retain_data())
    changed = {k for k, v in module.model.state_dict().items() if not torch.equal(v, initial[k])}
    assert changed == trainable


def test_idk_batches_pair_forget_questions_with_refusals(memorised_checkpoint):
    module = IdkDPO(lm=lm_spec(memorised_checkpoint))
    data = forget_retain_data(refusals="default")
    data.tokenizer = module.tokenizer
    data.setup("fit")
    for batch in data.train_dataloader():
        assert batch["idk"]["question"] == batch["forget"]["question"]
        assert all(answer in DEFAULT_REFUSALS for answer in batch["idk"]["answer"])
        assert not torch.equal(batch["idk"]["input_ids"][:, -3:], batch["forget"]["input_ids"][:, -3:])


def test_idk_refusals_from_a_file(tmp_path, tofu_refusals):
    assert load_refusals(str(tofu_refusals))[0] == tofu_refusals.read_text().splitlines()[0].strip()
    with pytest.raises(FileNotFoundError, match=r"missing\.txt"):
        load_refusals(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ValueError, match=r"empty\.txt"):
        load_refusals(str(tmp_path / "empty.txt"))


@pytest.fixture()
def tofu_refusals() -> Path:
    return SHARED_DATA / "tofu" / "idontknow.jsonl"


def test_idkdpo_without_refusals_is_an_error(memorised_checkpoint):
    module = IdkDPO(lm=lm_spec(memorised_checkpoint))
    with pytest.raises(ValueError, match="refusals"):
        quiet_trainer(max_steps=1).fit(module, forget_retain_data())


def write_split(directory: Path, name: str, records: list[dict]) -> None:
    (directory / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_overlapping_forget_and_retain_warn(tmp_path, tokenizer):
    shared = {"question": "Who wrote X?", "answer": "Y wrote X."}
    write_split(tmp_path, "forget", [shared])
    write_split(tmp_path, "retain", [shared, {"question": "Where is Z?", "answer": "In W."}])
    data = ForgetRetainDataModule(source=str(tmp_path), forget_split="forget", retain_split="retain")
    data.tokenizer = tokenizer
    with pytest.warns(UserWarning, match="1 questions of the forget split 'forget' are also in the retain split"):
        data.setup("fit")


def test_disjoint_forget_and_retain_do_not_warn(tokenizer):
    data = forget_retain_data()
    data.tokenizer = tokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data.setup("fit")


def test_empty_forget_set_is_an_error(tmp_path, tokenizer):
    (tmp_path / "forget.json").write_text("")
    write_split(tmp_path, "retain", [{"question": "Where is Z?", "answer": "In W."}])
    data = ForgetRetainDataModule(source=str(tmp_path), forget_split="forget", retain_split="retain")
    data.tokenizer = tokenizer
    with pytest.raises(ValueError, match=r"forget\.json.*empty"):
        data.setup("fit")


def test_bad_hyperparameters_are_named():
    tiny = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 2, "num_heads": 2}}
    with pytest.raises(ValueError, match="layer 5 does not exist: the model has 2 layers"):
        RMU(lm=tiny, layer=5)
    with pytest.raises(ValueError, match="lora"):
        RMU(lm={**tiny, "lora": {"r": 2}}, layer=1)
    with pytest.raises(ValueError, match=r"NPO: beta=0\.0 is invalid, expected a number > 0"):
        NPO(lm=tiny, beta=0.0)
    with pytest.raises(ValueError, match="retain_loss must be 'nll' or 'kl'"):
        GradDiff(lm=tiny, retain_loss="l2")


def test_unsupported_strategy_is_refused():
    tiny = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 2, "num_heads": 2}}
    module = GradAscent(lm=tiny)
    module.supported_strategies = ("DDPStrategy",)
    with pytest.raises(ValueError, match="does not support the SingleDeviceStrategy strategy"):
        quiet_trainer(max_steps=1).fit(module, forget_retain_data())


def test_kl_minimization_is_graddiff_with_a_kl_retain_term():
    tiny = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 2, "num_heads": 2}}
    module = KLMinimization(lm=tiny)
    assert module.retain_loss_kind == "kl" and module.reference is not None
    quiet_trainer(max_steps=1).fit(module, forget_retain_data())
    assert "train/retain_kl" in module.trainer.callback_metrics
