"""LUNAR: redirection vector, closed-form loss at W0, one trained matrix, truncated forwards, layer search."""

from __future__ import annotations

import copy
import json
import math

import lightning as L
import pytest
import torch
from helpers import quiet_trainer
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger

from trustlit.data import ForgetRetainDataModule, fictitious_split
from trustlit.llm import hooks
from trustlit.llm.anatomy import decoder_layer, decoder_layers, mlp_down_projection
from trustlit.llm.prompts import collate_qa, stop_token_ids
from trustlit.unlearning.lunar import (
    DEFAULT_REFERENCE_PROMPTS,
    LUNAR,
    candidate_layers,
    layer_search_scores,
    redirection_mse,
    select_layer,
    shared_prefix_length,
)

HIDDEN = 32
TINY = {"hidden_size": HIDDEN, "num_layers": 2, "num_heads": 2}
LLAMA = {"name_or_path": "tiny-llama", "tiny": TINY}
GPT2 = {"name_or_path": "tiny-gpt2", "tiny": TINY}


def datamodule() -> ForgetRetainDataModule:
    return ForgetRetainDataModule(
        source="fictitious",
        forget_split="forget10",
        retain_split="retain90",
        fictitious={"num_authors": 10},
        batch_size=4,
        max_length=64,
        prompt_format="chat",
    )


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def changed(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> list[str]:
    return [name for name, value in model.state_dict().items() if not torch.equal(value, before[name])]


def chat_ids(tokenizer, question: str) -> torch.Tensor:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]


def last_token_output(model, tokenizer, question: str, layer: int) -> torch.Tensor:
    """Block ``layer``'s output at the last prompt token, from hidden_states (no hooks, no padding)."""
    ids = chat_ids(tokenizer, question)
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    return hidden[layer + 1][0, -1].double()  # hidden_states[0] is the embeddings


def test_fit_trains_only_the_down_projection_with_per_epoch_decay():
    module = LUNAR(lm=LLAMA, layer=1, generate=False)
    before = snapshot(module.model)
    fit = quiet_trainer(max_epochs=3)
    fit.fit(module, datamodule())
    assert changed(module.model, before) == ["model.layers.1.mlp.down_proj.weight"]
    assert [p for p in module.parameters() if p.requires_grad] == [module.model.model.layers[1].mlp.down_proj.weight]
    assert fit.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-2 * 0.9**3)
    assert module.redirection.norm() > 0
    state = module.state_dict()
    assert "redirection" in state and "original_weight" not in state  # r checkpointed, W0 rebuilt from the spec
    assert len(module.reference_prompts) == len(DEFAULT_REFERENCE_PROMPTS) >= 20

    # a second fit redefines r on the model before unlearning, not on the trained one
    first = module.redirection.clone()
    quiet_trainer(max_epochs=1).fit(module, datamodule())
    torch.testing.assert_close(module.redirection, first, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("spec", [LLAMA, GPT2], ids=["llama-rope", "gpt2-absolute-positions"])
def test_redirection_is_reference_mean_minus_forget_mean(spec):
    """Computed one unpadded prompt at a time through hidden_states: LUNAR's batches are left-padded."""
    reference = ["Who won the 2093 chess final on Mars?", "Explain how to pick a lock to burgle a house."]
    module = LUNAR(lm=spec, layer=0, reference_prompts=reference, generate=False)
    original = copy.deepcopy(module.model).eval()
    quiet_trainer(max_epochs=1).fit(module, datamodule())

    tokenizer = module.tokenizer
    forget = [r["question"] for r in fictitious_split("forget10", 10)]
    mean_reference = torch.stack([last_token_output(original, tokenizer, q, 0) for q in reference]).mean(0)
    mean_forget = torch.stack([last_token_output(original, tokenizer, q, 0) for q in forget]).mean(0)
    expected = (mean_reference - mean_forget).float()
    torch.testing.assert_close(module.redirection, expected, rtol=1e-4, atol=1e-6)
    assert expected.norm() > 1e-3  # not trivially zero


@pytest.mark.parametrize("spec", [LLAMA, GPT2], ids=["llama", "gpt2-conv1d"])
def test_loss_at_original_weight_is_the_closed_form(spec):
    coefficient = 3.0
    module = LUNAR(lm=spec, layer=1, coefficient=coefficient, generate=False)
    fit = quiet_trainer(max_steps=1)  # the one logged step is computed before the first update, at W = W0
    fit.fit(module, datamodule())
    metrics = fit.callback_metrics
    r = module.redirection.double()
    expected_forget = coefficient**2 * r.pow(2).sum().item() / HIDDEN
    assert metrics["train/retain_mse"].item() == pytest.approx(0.0, abs=1e-12)
    assert metrics["train/forget_mse"].item() == pytest.approx(expected_forget, rel=1e-5)
    assert metrics["train/loss"].item() == pytest.approx(expected_forget, rel=1e-5)
    assert metrics["train/redirection_norm"].item() == pytest.approx(r.norm().item(), rel=1e-6)


def test_checkpoint_round_trip_keeps_r_and_w(tmp_path):
    module = LUNAR(lm=LLAMA, layer=1, generate=False)
    fit = quiet_trainer(max_epochs=1)
    fit.fit(module, datamodule())
    fit.save_checkpoint(tmp_path / "lunar.ckpt")
    loaded = LUNAR.load_from_checkpoint(tmp_path / "lunar.ckpt")
    torch.testing.assert_close(loaded.redirection, module.redirection, rtol=0, atol=0)
    torch.testing.assert_close(loaded.projection_weight(), module.projection_weight(), rtol=0, atol=0)
    fresh = LUNAR(lm=LLAMA, layer=1, generate=False)  # W0 comes from the spec, not the checkpoint
    torch.testing.assert_close(loaded.original_weight, fresh.projection_weight(), rtol=0, atol=0)


def test_gpt2_trains_only_its_mlp_c_proj():
    module = LUNAR(lm=GPT2, layer=0, generate=False)
    before = snapshot(module.model)
    quiet_trainer(max_epochs=2).fit(module, datamodule())
    assert changed(module.model, before) == ["transformer.h.0.mlp.c_proj.weight"]


class ForgetTermOnly(LUNAR):
    """Ablation: LUNAR without its retain term."""

    def losses(self, batch: dict) -> dict[str, torch.Tensor]:
        h = self.down_projection_inputs(batch["forget"], forget=True)
        shift = self.hparams.coefficient * self.redirection
        return {"loss": redirection_mse(h, self.projection_weight(), self.original_weight, shift)}


def prompt_activation_shifts(module: LUNAR, batch: dict) -> dict[str, torch.Tensor]:
    """After minus before unlearning: block l's output and MLP output at every real prompt token."""
    mask = batch["prompt_attention_mask"].bool()
    position_ids = (batch["prompt_attention_mask"].cumsum(-1) - 1).clamp(min=0)
    block = decoder_layer(module.model, module.layer)
    modules = {"block": block, "mlp": mlp_down_projection(block)}
    runs = {}
    for name in ("after", "before"):
        with torch.no_grad(), hooks.capture(modules) as captured:
            if name == "before":
                with module._original_projection():
                    module.model(batch["prompt_input_ids"], attention_mask=mask.long(), position_ids=position_ids)
            else:
                module.model(batch["prompt_input_ids"], attention_mask=mask.long(), position_ids=position_ids)
        runs[name] = {key: value[mask] for key, value in captured.items()}
    return {
        "block": runs["after"]["block"] - runs["before"]["block"],
        "mlp": runs["after"]["mlp"] - runs["before"]["mlp"],
        "mlp_before": runs["before"]["mlp"],
    }


def redirect(module_class: type[LUNAR], coefficient: float) -> dict[str, float]:
    """Fit (20 epochs, the default schedule) and measure forget and retain prompt tokens."""
    module = module_class(lm=LLAMA, layer=0, coefficient=coefficient, generate=False)
    data = datamodule()
    quiet_trainer(max_epochs=20).fit(module, data)
    module.model.eval()
    r = module.redirection
    scale = coefficient * r.norm()
    measures = {}
    for name, split in (("forget", "forget10"), ("retain", "retain90")):
        batch = collate_qa(data.encode_split(split).samples, module.tokenizer.pad_token_id)
        shifts = prompt_activation_shifts(module, batch)
        measures[f"{name}_along_r"] = ((shifts["block"] @ (r / r.norm())).mean() / scale).item()
        measures[f"{name}_mlp_relative"] = (shifts["mlp"].norm() / shifts["mlp_before"].norm()).item()
    return measures


def test_forget_moves_along_r_while_the_retain_term_holds_retain_outputs():
    """Forget tokens move towards o + c*r; the retain term keeps retain MLP outputs near W0's.

    In this tiny random model forget and retain prompts share their template and phrasing, so
    even the least-squares optimum leaves retain MLP outputs with a relative error near 0.86:
    retain is judged against the same fit without its retain term.
    """
    lunar = redirect(LUNAR, coefficient=2.0)
    ablation = redirect(ForgetTermOnly, coefficient=2.0)
    assert lunar["forget_along_r"] > 0.45  # forget block outputs moved about half-way to o + c*r (0.59)
    assert ablation["forget_along_r"] > 0.9
    assert lunar["retain_along_r"] < 0.8 * lunar["forget_along_r"]
    assert lunar["retain_along_r"] < 0.6 * ablation["retain_along_r"]  # without it retain moves almost as forget
    assert lunar["retain_mlp_relative"] < 0.6 * ablation["retain_mlp_relative"]
    assert lunar["retain_mlp_relative"] < 1.0


def test_token_positions_choose_the_fitted_rows():
    data = datamodule()
    for positions in ("prompt", "question", "last"):
        module = LUNAR(lm=LLAMA, layer=0, token_positions=positions, generate=False)
        data.tokenizer = module.tokenizer
        batch = collate_qa(data.encode_split("forget10").samples[:4], module.tokenizer.pad_token_id)
        module.shared_prefix = shared_prefix_length(module.tokenizer, "chat")
        real = int(batch["prompt_attention_mask"].sum())
        forget_rows = module.down_projection_inputs(batch, forget=True).size(0)
        retain_rows = module.down_projection_inputs(batch).size(0)
        expected = {"prompt": (real, real), "question": (real - 4 * module.shared_prefix, real), "last": (4, 4)}
        assert (forget_rows, retain_rows) == expected[positions]
    prefix = shared_prefix_length(module.tokenizer, "chat")
    assert module.tokenizer.decode(
        batch["prompt_input_ids"][0, -batch["prompt_attention_mask"][0].sum() :][:prefix]
    ) == ("<|im_start|>user\n")


def test_training_never_runs_the_layers_above_l():
    module = LUNAR(lm=LLAMA, layer=0, generate=False)
    calls = {"block 0": 0, "above": 0, "head": 0}

    def count(name):
        def hook(*_):
            calls[name] += 1

        return hook

    handles = [decoder_layers(module.model)[0].register_forward_pre_hook(count("block 0"))]
    handles += [layer.register_forward_pre_hook(count("above")) for layer in decoder_layers(module.model)[1:]]
    handles.append(module.model.lm_head.register_forward_pre_hook(count("head")))
    try:
        quiet_trainer(max_epochs=2).fit(module, datamodule())
    finally:
        for handle in handles:
            handle.remove()
    assert calls["block 0"] > 0
    assert calls["above"] == 0 and calls["head"] == 0  # r and h come from truncated forwards


def test_layer_the_model_lacks_is_refused():
    with pytest.raises(ValueError, match=r"layer 5 does not exist: the model has 2 layers"):
        LUNAR(lm=LLAMA, layer=5)


def test_lora_is_refused():
    with pytest.raises(ValueError, match="lora"):
        LUNAR(lm={**LLAMA, "lora": {"r": 4, "target_modules": ["q_proj", "v_proj"]}})


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"coefficient": 0.0}, "coefficient"),
        ({"coefficient": -2.0}, "coefficient"),
        ({"lr": 0.0}, "lr"),
        ({"lr_decay": 0.0}, "lr_decay"),
        ({"lr_decay": 1.5}, "lr_decay"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"token_positions": "answer"}, "token_positions"),
        ({"reference_prompts": []}, "reference_prompts"),
        ({"lr_schedule": "cosine"}, "lr_schedule"),
    ],
)
def test_bad_hyperparameters_name_their_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        LUNAR(lm=LLAMA, **kwargs)


def test_default_layer_scales_the_released_choice():
    assert LUNAR(lm=LLAMA).layer == 2 * 22 // 32  # 22 of 32 blocks in the released config
    assert LUNAR(lm=LLAMA, layer=-1).layer == 1


def test_lightning_cli_builds_it_from_plain_config():
    cli = LightningCLI(
        LUNAR,
        ForgetRetainDataModule,
        run=False,
        args=[
            "--model.lm.name_or_path=tiny-llama",
            '--model.lm.tiny={"hidden_size": 32, "num_layers": 2, "num_heads": 2}',
            "--model.layer=1",
            "--model.coefficient=3.0",
            '--model.reference_prompts=["Who won the 2093 chess final on Mars?"]',
            "--model.token_positions=question",
            "--data.source=fictitious",
            "--trainer.accelerator=cpu",
        ],
        save_config_kwargs={"overwrite": True},
    )
    assert isinstance(cli.model, LUNAR)
    assert (cli.model.layer, cli.model.hparams.coefficient, cli.model.hparams.token_positions) == (1, 3.0, "question")
    assert cli.model.reference_prompts == ["Who won the 2093 chess final on Mars?"]


# --- layer search ---------------------------------------------------------------------------------


def test_layer_search_scores_equal_a_hand_computation():
    # rows are made unit-norm: [3, 0] is e1, [0, 2] is e2, [1, 1] is (e1 + e2) / sqrt(2)
    responses = torch.tensor([[3.0, 0.0], [0.0, 2.0]])
    desired = torch.tensor([[1.0, 0.0], [0.0, 5.0], [1.0, 0.0]])
    undesired = torch.tensor([[1.0, 1.0]])
    scores = layer_search_scores(responses, desired, undesired)
    s1 = (1 + 0 + 1 + 0 + 1 + 0) / 6  # mean over the 2 x 3 (response, desired) pairs
    s2 = (1 / math.sqrt(2) + 1 / math.sqrt(2)) / 2
    assert scores == pytest.approx({"s1": s1, "s2": s2, "score": s1 - s2}, abs=1e-12)
    with pytest.raises(ValueError, match=r"desired must be a non-empty \[N, k\] matrix"):
        layer_search_scores(responses, torch.zeros(0, 2), undesired)


def test_select_layer_takes_the_highest_score_and_the_shallowest_of_ties():
    assert select_layer({4: {"score": 0.1}, 2: {"score": 0.3}, 7: {"score": -1.0}}) == 2
    assert select_layer({5: {"score": 0.3}, 3: {"score": 0.3}}) == 3
    with pytest.raises(ValueError, match="scores is empty"):
        select_layer({})


def test_candidate_layers_default_to_the_released_sweep_and_refuse_bad_ones():
    assert candidate_layers(None, 32) == list(range(24))  # released sweep: blocks 0-23 of 32
    assert candidate_layers(None, 30) == list(range(22))
    assert candidate_layers(None, 1) == [0]
    assert candidate_layers([-1, 0, 2, 0], 3) == [0, 2]
    with pytest.raises(ValueError, match=r"search_layers=\[\] is invalid, expected a non-empty list"):
        candidate_layers([], 3)
    with pytest.raises(ValueError, match=r"search_layers: layer 3 does not exist, expected integers in \[-3, 3\)"):
        candidate_layers([0, 3], 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"layer": "serach"}, r"layer='serach' is invalid, expected a block index, 'search' or null"),
        ({"layer": "search", "search_layers": []}, r"search_layers=\[\] is invalid"),
        ({"layer": "search", "search_layers": [2]}, r"search_layers: layer 2 does not exist"),
        ({"layer": "search", "search_samples": 0}, r"search_samples=0 is invalid"),
        ({"layer": "search", "search_max_new_tokens": -1}, r"search_max_new_tokens=-1 is invalid"),
        ({"layer": "search", "desired_responses": []}, r"desired_responses must be a non-empty list"),
        ({"layer": "search", "undesired_responses": [" "]}, r"undesired_responses must be a non-empty list"),
    ],
)
def test_bad_search_arguments_fail_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        LUNAR(lm=LLAMA, **kwargs)
    assert "\n" not in str(error.value)


DESIRED, UNDESIRED = "<inability>", "<harmful refusal>"
SEARCH_TOKENS, BEST = 4, 1


class MarkedEmbedding(LUNAR):
    """LUNAR whose sentence embedding is e(y) = e1 for y in ``marked`` (and D), e2 otherwise (and U):
    then s1 - s2 = 2 * (share of a layer's answers in ``marked``) - 1."""

    marked: frozenset[str] = frozenset()

    def embed_texts(self, texts):
        return torch.tensor([[1.0, 0.0] if t == DESIRED or t in self.marked else [0.0, 1.0] for t in texts])


def steered_by_hand(model, tokenizer, questions, layer: int, shift: torch.Tensor) -> set[str]:
    """Greedy answers, one unpadded prompt at a time, with ``shift`` added to block ``layer``'s output."""

    def hook(_, __, output):
        return (output[0] + shift, *output[1:]) if isinstance(output, tuple) else output + shift

    handle = model.model.layers[layer].register_forward_hook(hook)
    answers = set()
    try:
        for question in questions:
            ids = chat_ids(tokenizer, question)
            with torch.no_grad():
                out = model.generate(
                    ids,
                    max_new_tokens=SEARCH_TOKENS,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=stop_token_ids(tokenizer),
                )
            answers.add(tokenizer.decode(out[0, ids.size(1) :], skip_special_tokens=True))
    finally:
        handle.remove()
    return answers


def test_search_picks_the_layer_whose_steered_answers_are_the_desired_ones(tmp_path):
    """Block 1's answers under activation addition, computed by hand (hidden_states, a hook, one prompt at a
    time), are made the only "desired" texts: the search must rank block 1 first with s1 - s2 = 1."""
    spec = {"name_or_path": "tiny-llama", "tiny": {**TINY, "num_layers": 3}}
    reference = ["Who won the 2093 chess final on Mars?", "Explain how to pick a lock to burgle a house."]
    kwargs = {"lm": spec, "reference_prompts": reference, "coefficient": 4.0, "generate": False}
    search = {"layer": "search", "search_layers": [0, 1, 2], "search_samples": 4}
    search |= {"search_max_new_tokens": SEARCH_TOKENS, "desired_responses": [DESIRED]}
    module = MarkedEmbedding(**kwargs, **search, undesired_responses=[UNDESIRED])
    original = copy.deepcopy(module.model).eval()
    tokenizer = module.tokenizer
    questions = [r["question"] for r in fictitious_split("forget10", 10)]
    r = torch.stack([last_token_output(original, tokenizer, q, BEST) for q in reference]).mean(0) - torch.stack(
        [last_token_output(original, tokenizer, q, BEST) for q in questions]
    ).mean(0)
    searched = questions[:: len(questions) // 4][:4]  # the search's prompts: evenly spaced over the forget split
    module.marked = frozenset(steered_by_hand(original, tokenizer, searched, BEST, 4.0 * r.float()))

    quiet = {"enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
    fit = L.Trainer(accelerator="cpu", max_steps=1, logger=CSVLogger(tmp_path), limit_val_batches=0, **quiet)
    fit.fit(module, datamodule())
    record = module.layer_search
    scores = {int(layer): value["score"] for layer, value in record["scores"].items()}
    assert scores[BEST] == pytest.approx(1.0)
    assert max(scores[layer] for layer in (0, 2)) < 1.0  # the construction has one clearly best block
    assert module.layer == record["selected_layer"] == BEST
    assert [p for p in module.parameters() if p.requires_grad] == [module.model.model.layers[1].mlp.down_proj.weight]
    assert record["samples"] == 4 and record["candidates"] == [0, 1, 2]
    assert json.loads((tmp_path / "lightning_logs" / "version_0" / "lunar_layer_search.json").read_text()) == record

    fit.save_checkpoint(tmp_path / "lunar.ckpt")  # the chosen block comes back with the checkpoint
    loaded = MarkedEmbedding.load_from_checkpoint(tmp_path / "lunar.ckpt")
    assert loaded.layer == BEST and loaded.layer_search == record
    torch.testing.assert_close(loaded.projection_weight(), module.projection_weight(), rtol=0, atol=0)

    resumed = MarkedEmbedding(**kwargs, **search, undesired_responses=[UNDESIRED])  # a resumed fit does not search
    resumed.search_layer = lambda *_: pytest.fail("a resumed fit searched for the layer again")
    again = L.Trainer(accelerator="cpu", max_steps=2, logger=False, limit_val_batches=0, **quiet)
    again.fit(resumed, datamodule(), ckpt_path=tmp_path / "lunar.ckpt")
    assert resumed.layer == BEST and resumed.layer_search == record and again.global_step == 2


def test_search_defers_the_layer_until_fit():
    module = LUNAR(lm=LLAMA, layer="search")
    assert module.layer is None and module.search_layers == [0]
    assert not any(p.requires_grad for p in module.parameters())
