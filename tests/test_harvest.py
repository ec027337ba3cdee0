"""Activation harvesting (trustlit.llm.harvest) and the DataModule that serves it (trustlit.data.activations)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, quiet_trainer
from safetensors.torch import load_file

from trustlit.cli import main
from trustlit.data import ActivationDataModule, QADataModule
from trustlit.data.activations import memmap_tensor
from trustlit.llm import hooks
from trustlit.llm.anatomy import decoder_layers, mlp_down_projection, self_attention
from trustlit.llm.harvest import HarvestActivations
from trustlit.llm.module import CausalLMModule
from trustlit.llm.prompts import IGNORE_INDEX

SITES = ["residual", "mlp", "attention"]
SPLITS = ["forget10", "retain90"]
NUM_SAMPLES = 36  # 4 invented authors x 9 facts


@pytest.fixture(scope="module")
def module() -> CausalLMModule:
    lm = {"name_or_path": "tiny-llama", "tiny": {"hidden_size": 32, "num_layers": 2, "num_heads": 2}}
    return CausalLMModule(lm=lm, max_new_tokens=2)


def qa_data() -> QADataModule:
    return QADataModule(
        source="fictitious", train_split=None, eval_splits=SPLITS, batch_size=5, max_length=64,
        prompt_format="chat", fictitious={"num_authors": 4},
    )  # fmt: skip


def callback(directory: Path, **kwargs) -> HarvestActivations:
    arguments = {"layers": [0, -1], "sites": SITES, "positions": "all", "shard_size": 100, **kwargs}
    return HarvestActivations(output_dir=str(directory), **arguments)


def predict(module: CausalLMModule, *callbacks: HarvestActivations) -> list:
    predictions = quiet_trainer(callbacks=list(callbacks)).predict(module, datamodule=qa_data())
    assert "predict_step" not in module.__dict__, "the module's own predict_step is back after predict"
    return predictions


def harvested(directory: Path) -> dict[str, torch.Tensor]:
    index = json.loads((directory / "index.json").read_text())
    shards = [load_file(directory / shard["file"]) for shard in index["shards"]]
    return {key: torch.cat([shard[key] for shard in shards]) for key in shards[0]}


def expected_positions(batch: dict, positions: str) -> list[tuple[int, int]]:
    """(sample, token) pairs chosen from the batch's own fields (not the harvest's mask)."""
    pairs = []
    for i in range(len(batch["index"])):
        if positions == "all":
            tokens = range(int(batch["attention_mask"][i].sum()))
        elif positions == "answer":
            tokens = (batch["labels"][i] != IGNORE_INDEX).nonzero().flatten().tolist()
        else:  # the prompt alone, left-padded: its length - 1 is the last prompt token
            tokens = [int(batch["prompt_attention_mask"][i].sum()) - 1]
        pairs += [(i, t) for t in tokens]
    return pairs


@torch.no_grad()
def reference_rows(module: CausalLMModule, positions: str) -> dict[str, torch.Tensor]:
    """hidden_states of a plain forward with output_hidden_states, MLP/attention by a direct capture."""
    model = module.model.eval()
    blocks = decoder_layers(model)
    finders = {"mlp": mlp_down_projection, "attention": self_attention, "block": lambda block: block}
    modules = {f"{site}.{layer}": find(blocks[layer]) for layer in (0, 1) for site, find in finders.items()}
    data = qa_data()
    data.tokenizer = module.tokenizer
    data.setup("predict")
    rows: dict[str, list] = {}
    for loader_index, loader in enumerate(data.predict_dataloader()):
        for batch in loader:
            with hooks.capture(modules) as captured:
                out = model(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
                )
            values = {
                "residual.0": out.hidden_states[1],
                "final_norm.1": out.hidden_states[2],  # transformers normalises the last hidden state
                **captured,
            }
            samples, tokens = torch.tensor(expected_positions(batch, positions)).T
            for name, value in values.items():
                rows.setdefault(name, []).append(value[samples, tokens])
            rows.setdefault("sample_index", []).append(batch["index"][samples])
            rows.setdefault("token_position", []).append(tokens)
            rows.setdefault("dataloader_index", []).append(torch.full_like(tokens, loader_index))
    return {name: torch.cat(values) for name, values in rows.items()}


POSITIONS = ["all", "answer", "last_prompt"]


@pytest.fixture(scope="module")
def harvests(module, tmp_path_factory) -> dict[str, Path]:
    """One predict run, one harvest per positions mode (three callbacks side by side)."""
    root = tmp_path_factory.mktemp("harvest")
    predictions = predict(module, *(callback(root / positions, positions=positions) for positions in POSITIONS))
    # the module's predict_step (generation) was shadowed: one None per batch, 2 + 6 batches of 5
    assert [len(loader) for loader in predictions] == [2, 6] and {p for loader in predictions for p in loader} == {None}
    return {positions: root / positions for positions in POSITIONS}


@pytest.fixture(scope="module")
def all_tokens(harvests) -> Path:
    return harvests["all"]


@pytest.mark.parametrize("positions", POSITIONS)
def test_harvest_equals_hidden_states_and_hooked_outputs(module, harvests, positions):
    got, want = harvested(harvests[positions]), reference_rows(module, positions)
    for key in ("sample_index", "token_position", "dataloader_index"):
        assert torch.equal(got[key], want[key]), key
    torch.testing.assert_close(got["residual.0"], want["residual.0"], rtol=0, atol=1e-6)
    for site in ("mlp", "attention"):
        for layer in (0, 1):
            torch.testing.assert_close(got[f"{site}.{layer}"], want[f"{site}.{layer}"], rtol=0, atol=1e-6)
    # the last block: its output before the final norm (the residual stream), which the norm maps to hidden_states[-1]
    torch.testing.assert_close(got["residual.1"], want["block.1"], rtol=0, atol=1e-6)
    norm = module.model.model.norm
    with torch.no_grad():
        torch.testing.assert_close(norm(got["residual.1"]), want["final_norm.1"], rtol=1e-5, atol=1e-5)
    if positions == "last_prompt":
        assert len(got["sample_index"]) == NUM_SAMPLES


def test_index_describes_the_shards_and_the_batches(module, all_tokens):
    index = json.loads((all_tokens / "index.json").read_text())
    rows = harvested(all_tokens)
    assert index["format"] == "trustlit.activations" and index["trustlit_version"] == "0.1.0"
    assert index["model"] == "tiny-llama" and index["num_layers"] == 2 and index["layers"] == [0, 1]
    assert index["sites"] == SITES and index["positions"] == "all" and index["dtype"] == "float32"
    assert index["hidden_size"] == 32 and index["splits"] == SPLITS and index["num_samples"] == NUM_SAMPLES
    assert index["total_rows"] == len(rows["sample_index"]) == sum(s["rows"] for s in index["shards"])
    assert [s["rows"] for s in index["shards"][:-1]] == [100] * (len(index["shards"]) - 1)
    assert [s["file"] for s in index["shards"]] == [f"shard_{i:05d}.safetensors" for i in range(len(index["shards"]))]
    for shard in index["shards"]:
        tensors = load_file(all_tokens / shard["file"])
        assert all(len(value) == shard["rows"] for value in tensors.values())
        assert tensors["residual.1"].shape == (shard["rows"], 32) and tensors["residual.1"].dtype == torch.float32
    pairs = set(zip(rows["dataloader_index"].tolist(), rows["sample_index"].tolist(), strict=True))
    data = qa_data()
    data.tokenizer = module.tokenizer
    data.setup("predict")
    batches = {(d, int(i)) for d, loader in enumerate(data.predict_dataloader()) for b in loader for i in b["index"]}
    assert pairs == batches and len(pairs) == NUM_SAMPLES


def test_rerun_replaces_the_harvest_and_generate_keeps_predictions(module, all_tokens, tmp_path):
    for file in all_tokens.iterdir():  # a previous harvest of 14 shards
        (tmp_path / file.name).write_bytes(file.read_bytes())
    predictions = predict(module, callback(tmp_path, shard_size=2000, dtype="bfloat16", generate=True))
    assert all(isinstance(p, dict) and "generated" in p for loader in predictions for batch in loader for p in batch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "shard_00000.safetensors"]
    assert json.loads((tmp_path / "index.json").read_text())["dtype"] == "bfloat16"
    stored = load_file(tmp_path / "shard_00000.safetensors")["mlp.0"]
    assert stored.dtype == torch.bfloat16
    data = ready(ActivationDataModule(str(tmp_path), layer=0, site="mlp", val_fraction=0.0, batch_size=4096))
    batch = next(iter(data.train_dataloader()))
    assert batch["activations"].dtype == torch.float32 and torch.equal(
        batch["activations"], stored[batch["row"]].float()
    )


def test_bad_arguments_are_named(module):
    with pytest.raises(ValueError, match=r"sites=\['residual', 'keys'\] is invalid"):
        HarvestActivations(layers=[0], sites=["residual", "keys"])
    with pytest.raises(ValueError, match="shard_size=0 is invalid, expected an integer > 0"):
        HarvestActivations(layers=[0], shard_size=0)
    with pytest.raises(ValueError, match="layer 5 does not exist: the model has 2 layers"):
        predict(module, callback(Path("unused"), layers=[5]))


def ready(data: ActivationDataModule) -> ActivationDataModule:
    data.setup("fit")
    return data


def rows_in_order(data: ActivationDataModule, epoch: int = 0) -> list[int]:
    loader = data.train_dataloader()
    loader.sampler.set_epoch(epoch)
    return [row for batch in loader for row in batch["row"].tolist()]


def test_datamodule_serves_seeded_batches_split_by_sample(all_tokens):
    rows = harvested(all_tokens)
    data = ActivationDataModule(str(all_tokens), layer=-1, site="residual", val_fraction=0.25, batch_size=64, seed=0)
    data.setup("fit")
    assert data.hidden_size == 32
    batch = next(iter(data.train_dataloader()))
    assert batch["activations"].shape == (64, 32) and batch["activations"].dtype == torch.float32
    assert batch["index"].shape == (64,) and batch["index"].dtype == torch.long
    assert torch.equal(batch["activations"], rows["residual.1"][batch["row"]])
    assert torch.equal(batch["index"], rows["sample_index"][batch["row"]])
    assert torch.equal(batch["token_position"], rows["token_position"][batch["row"]])

    order = rows_in_order(data)
    assert order == rows_in_order(ready(ActivationDataModule(str(all_tokens), layer=1, val_fraction=0.25, seed=0)))
    assert order != rows_in_order(ready(ActivationDataModule(str(all_tokens), layer=1, val_fraction=0.25, seed=1)))
    assert order != rows_in_order(data, epoch=1) and order != sorted(order)

    val = [row for batch in data.val_dataloader() for row in batch["row"].tolist()]
    assert sorted(order + val) == list(range(len(rows["sample_index"])))
    sample = list(zip(rows["dataloader_index"].tolist(), rows["sample_index"].tolist(), strict=True))
    train_samples, val_samples = {sample[r] for r in order}, {sample[r] for r in val}
    assert not train_samples & val_samples and len(val_samples) == round(0.25 * NUM_SAMPLES)


def test_datamodule_serves_several_harvests_one_after_another(harvests, tmp_path):
    first, second = harvests["all"], harvests["answer"]
    rows = {key: torch.cat([harvested(first)[key], harvested(second)[key]]) for key in ("residual.0", "sample_index")}
    first_rows = len(harvested(first)["sample_index"])
    data = ready(ActivationDataModule([str(first), str(second)], layer=0, val_fraction=0.25, batch_size=10_000))
    train, val = next(iter(data.train_dataloader())), next(iter(data.val_dataloader()))
    for batch in (train, val):
        assert torch.equal(batch["activations"], rows["residual.0"][batch["row"]])
        assert torch.equal(batch["index"], rows["sample_index"][batch["row"]])
        assert torch.equal(batch["harvest"], (batch["row"] >= first_rows).long())
    assert sorted(train["row"].tolist() + val["row"].tolist()) == list(range(len(rows["sample_index"])))
    # sample 3 of one harvest and sample 3 of the other are two samples, split apart
    dataloader_index = torch.cat([harvested(directory)["dataloader_index"] for directory in (first, second)])

    def samples(batch: dict) -> set[tuple[int, int, int]]:
        keys = (batch["harvest"], dataloader_index[batch["row"]], batch["index"])
        return set(zip(*(key.tolist() for key in keys), strict=True))

    train_samples, val_samples = samples(train), samples(val)
    assert not train_samples & val_samples and len(train_samples | val_samples) > 1.5 * NUM_SAMPLES
    assert len(val_samples) == round(0.25 * len(train_samples | val_samples))
    held_out = [{(loader, index) for harvest, loader, index in val_samples if harvest == h} for h in (0, 1)]
    assert held_out[0] and held_out[1] and held_out[0] != held_out[1], "each harvest's samples are drawn apart"

    other = tmp_path / "other"
    other.mkdir()
    index = json.loads((second / "index.json").read_text())
    (other / "index.json").write_text(json.dumps({**index, "hidden_size": 64}))
    for shard in index["shards"]:
        (other / shard["file"]).write_bytes((second / shard["file"]).read_bytes())
    with pytest.raises(ValueError, match=rf"^harvests {first} and {other} differ in hidden_size \(32 vs 64\): only"):
        ActivationDataModule([str(first), str(other)], layer=0)
    with pytest.raises(ValueError, match=r"path=\[\] names no harvest"):
        ActivationDataModule([], layer=0)


def test_datamodule_leaves_out_rows_before_min_token_position(all_tokens):
    positions = harvested(all_tokens)["token_position"]
    every = ready(ActivationDataModule(str(all_tokens), layer=0, val_fraction=0.25, batch_size=10_000))
    later = ready(
        ActivationDataModule(str(all_tokens), layer=0, val_fraction=0.25, batch_size=10_000, min_token_position=1)
    )
    rows = {
        name: next(iter(loader()))
        for name, loader in (("train", later.train_dataloader), ("val", later.val_dataloader))
    }
    assert all((batch["token_position"] >= 1).all() for batch in rows.values())
    served = sorted(rows["train"]["row"].tolist() + rows["val"]["row"].tolist())
    assert served == torch.nonzero(positions >= 1).squeeze(1).tolist()
    assert set(rows["val"]["row"].tolist()) < set(next(iter(every.val_dataloader()))["row"].tolist()), "same split"


def test_datamodule_reads_the_shards_memory_mapped(all_tokens, tmp_path):
    directory = tmp_path / "copy"
    directory.mkdir()
    for file in all_tokens.iterdir():
        (directory / file.name).write_bytes(file.read_bytes())
    data = ready(ActivationDataModule(str(directory), layer=0, site="attention", val_fraction=0.0, batch_size=10_000))
    assert isinstance(data.train_dataset.activations.shard(0), np.memmap)
    first = next(iter(data.train_dataloader()))
    # overwrite shard 0's tensor on disk: a mapping sees the new bytes, a copy in memory would not
    on_disk = memmap_tensor(directory / "shard_00000.safetensors", "attention.0")
    writable = np.memmap(on_disk.filename, dtype=on_disk.dtype, mode="r+", offset=on_disk.offset, shape=on_disk.shape)
    writable[:] = 7.0
    writable.flush()
    again = next(iter(data.train_dataloader()))
    in_shard_0 = again["row"] < 100
    assert in_shard_0.any() and not torch.equal(first["activations"], again["activations"])
    assert torch.all(again["activations"][in_shard_0] == 7.0)


def test_datamodule_errors_name_what_is_wrong(all_tokens, tmp_path):
    with pytest.raises(
        FileNotFoundError, match=rf"no activation index at {tmp_path}/index.json: run `trustlit predict"
    ):
        ActivationDataModule(str(tmp_path), layer=0)
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(ValueError, match="malformed activation index, not valid JSON"):
        ActivationDataModule(str(tmp_path), layer=0)
    index = json.loads((all_tokens / "index.json").read_text())
    (tmp_path / "index.json").write_text(json.dumps({k: v for k, v in index.items() if k != "shards"}))
    with pytest.raises(ValueError, match="malformed activation index, missing key 'shards'"):
        ActivationDataModule(str(tmp_path), layer=0)
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"layer 3 was not harvested in .*: available layers \[0, 1\]"):
        ActivationDataModule(str(all_tokens), layer=3)
    with pytest.raises(FileNotFoundError, match=r"shard .*shard_00000.safetensors named by .* is missing"):
        ActivationDataModule(str(tmp_path), layer=0)
    (tmp_path / "index.json").write_text(json.dumps({**index, "sites": ["residual"]}))
    with pytest.raises(ValueError, match=r"site 'mlp' was not harvested in .*: available sites \['residual'\]"):
        ActivationDataModule(str(tmp_path), layer=0, site="mlp")


def test_tiny_recipe_runs_end_to_end(tmp_path):
    recipe = REPO_ROOT / "recipes" / "interpret" / "harvest_tiny.yaml"
    assert recipe.read_text().startswith("# ")
    main(["predict", "-c", str(recipe), f"--trainer.default_root_dir={tmp_path}"])
    data = ready(ActivationDataModule(str(tmp_path / "activations"), layer=-1, site="mlp", batch_size=16))
    batch = next(iter(data.train_dataloader()))
    assert batch["activations"].shape == (16, 32) and torch.isfinite(batch["activations"]).all()
    assert json.loads((tmp_path / "activations" / "index.json").read_text())["num_samples"] == NUM_SAMPLES
