"""DEGauss and its pipeline: view weights, farthest-view sampling, the fidelity constraint, procedural scenes and
their edits, the stand-in editor, the iterative dataset update and the scene fit (tiny: 16x16, few Gaussians)."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import quiet_trainer

import trustlit.protection.degauss as degauss_module
from trustlit.metrics.images import psnr
from trustlit.protection.degauss import (
    DEGaussConfig,
    DEGaussDefense,
    degauss,
    dual_discrepancy_losses,
    farthest_view_sampling,
    min_psnr,
    perturbed,
    project_fidelity,
    protect,
    view_focal_weights,
)
from trustlit.protection.editor import (
    EditPairsDataModule,
    InstructionEditor,
    edit_loss,
    iterative_dataset_update,
    structured_code,
)
from trustlit.protection.scenes import (
    PALETTE,
    Edit,
    GaussianSceneFit,
    ProceduralSceneDataModule,
    SceneViewsDataModule,
    apply_edit,
    procedural_scene,
    render_views,
    ring_views,
    scene_from_item,
    scene_item,
)
from trustlit.protection.splatting import Gaussians, camera_ring

SIZE = 16


@pytest.fixture(scope="module")
def tiny():
    """A one-object scene (12 + 9 Gaussians), 6 training views and an untrained tiny stand-in editor."""
    torch.manual_seed(0)
    scene = procedural_scene(num_objects=1, gaussians_per_object=12, floor_gaussians=9, seed=3)
    return scene, ring_views(6), InstructionEditor(encoder="structured", channels=8).eval()


def test_view_focal_weights_closed_form():
    weights = view_focal_weights(torch.tensor([0.0, 0.9]), tau=0.1, gamma=2.0)
    assert weights.tolist() == pytest.approx([0.01 / 1.01, 1 / 1.01])
    assert view_focal_weights(torch.tensor([0.3, 1.7, 0.0]), tau=0.5, gamma=0.0).tolist() == pytest.approx([1 / 3] * 3)
    losses = torch.tensor([0.2, 0.5, 1.0])
    assert torch.all(view_focal_weights(losses, 0.1, 3.0).diff() > 0)  # the weakest views weigh most
    with pytest.raises(ValueError, match=r"tau=0\.0, gamma=2\.0 are invalid"):
        view_focal_weights(losses, tau=0.0)
    with pytest.raises(ValueError, match="numbers >= 0"):
        view_focal_weights(torch.tensor([-0.1, 1.0]))


def test_farthest_view_sampling_on_a_ring():
    positions = torch.stack([camera.position for camera in camera_ring(8)])
    assert farthest_view_sampling(positions, 4, start=0) == [0, 4, 2, 6]
    assert farthest_view_sampling(positions, 2, start=3) == [3, 7]
    assert sorted(farthest_view_sampling(positions, 8, start=5)) == list(range(8))
    with pytest.raises(ValueError, match="count=9, start=0 are invalid for 8 views"):
        farthest_view_sampling(positions, 9)


def test_line_search_stops_just_inside_the_constraint(tiny):
    scene, cameras, _ = tiny
    references = render_views(scene.gaussians, cameras, SIZE)
    delta = {"colours": 0.5 * torch.randn(scene.gaussians.colours.shape, generator=torch.Generator().manual_seed(1))}
    scale = project_fidelity(scene.gaussians, delta, references, cameras, 30.0)
    assert 0 < scale < 1
    assert min_psnr(perturbed(scene.gaussians, delta, scale), references, cameras) >= 30.0
    assert min_psnr(perturbed(scene.gaussians, delta, 1.01 * scale), references, cameras) < 30.0


def test_degauss_keeps_the_fidelity_constraint_and_lowers_its_loss(tiny):
    """At δ = 0 every per-view loss is exactly λ_sem + λ_dir = 2; after DEGauss it is lower on the training views
    while every training view stays at PSNR >= 30 dB (the projection)."""
    scene, cameras, editor = tiny
    instruction = Edit("remove", *scene.objects[0]).instruction
    references = render_views(scene.gaussians, cameras, SIZE)
    assert dual_discrepancy_losses(editor, references, references, instruction).tolist() == pytest.approx([2.0] * 6)
    config = DEGaussConfig(steps=4, views_per_step=2, lr=0.05)
    result = degauss(scene.gaussians, cameras, editor, [instruction], SIZE, config)
    protected, history = result.scene, result.history
    assert result.rejected_steps == 0
    assert min_psnr(protected, references, cameras) >= 30.0
    assert min_psnr(protected, references, cameras) < 60.0  # it did perturb
    after = dual_discrepancy_losses(editor, render_views(protected, cameras, SIZE), references, instruction)
    assert after.mean() < 2.0 - 1e-3 and len(history) == 4


def test_a_failed_line_search_undoes_only_its_own_step(tiny, monkeypatch):
    """The line search is made to fail from the third step on: the result is the feasible scene after two steps
    (bit for bit, the same seed), not the original scene, and the undone steps are counted."""
    scene, cameras, editor = tiny
    instruction = Edit("remove", *scene.objects[0]).instruction
    two_steps = degauss(scene.gaussians, cameras, editor, [instruction], SIZE, DEGaussConfig(steps=2, lr=0.05))
    calls, real = [], degauss_module.project_fidelity

    def failing_after_two(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs) if len(calls) <= 2 else None

    monkeypatch.setattr(degauss_module, "project_fidelity", failing_after_two)
    result = degauss(scene.gaussians, cameras, editor, [instruction], SIZE, DEGaussConfig(steps=5, lr=0.05))
    assert result.rejected_steps == 3 and len(result.history) == 5
    assert torch.equal(result.scene.colours, two_steps.scene.colours)
    assert torch.equal(result.scene.means, two_steps.scene.means)
    references = render_views(scene.gaussians, cameras, SIZE)
    assert 30.0 <= min_psnr(result.scene, references, cameras) < 60.0


@pytest.mark.parametrize("method", ["degauss", "random"])
def test_protected_colours_stay_in_the_unit_interval(tiny, method):
    """Large steps under a loose 10 dB floor would push colours past [0, 1]; the protected scene keeps them in."""
    scene, cameras, editor = tiny
    config = DEGaussConfig(steps=3, views_per_step=2, lr=0.5, ratios=(1.0, 2.0, 0.0), psnr_floor=10.0)
    protected = protect(method, scene.gaussians, cameras, editor, ["remove the red cube"], SIZE, config).scene
    assert protected.colours.min() >= 0 and protected.colours.max() <= 1
    assert (protected.colours - scene.gaussians.colours).abs().max() > 0.1  # it did move them a lot


@pytest.mark.parametrize("method", ["uniform", "photoguard", "random"])
def test_baselines_keep_the_fidelity_constraint(tiny, method):
    scene, cameras, editor = tiny
    config = DEGaussConfig(steps=3, views_per_step=2, photoguard_steps=3)
    protected = protect(method, scene.gaussians, cameras, editor, ["remove the red cube"], SIZE, config).scene
    references = render_views(scene.gaussians, cameras, SIZE)
    assert 30.0 <= min_psnr(protected, references, cameras) < 60.0
    if method == "random":  # scaled onto the constraint's boundary
        assert min_psnr(protected, references, cameras) == pytest.approx(30.0, abs=0.05)


def test_edits_change_only_their_object():
    scene = procedural_scene(num_objects=3, seed=5)
    colour, shape = scene.objects[1]
    removed = apply_edit(scene, Edit("remove", colour, shape))
    assert len(removed) == len(scene.gaussians) - int((scene.labels == 1).sum())
    other = next(c for c in PALETTE if c != colour)
    recoloured = apply_edit(scene, Edit("recolour", colour, shape, other))
    changed = (recoloured.colours != scene.gaussians.colours).any(dim=1)
    assert torch.equal(changed, scene.labels == 1)
    assert Edit.parse(f"turn the {colour} {shape} {other}") == Edit("recolour", colour, shape, other)
    with pytest.raises(ValueError, match="is not in the edit family"):
        Edit.parse("make it pretty")
    with pytest.raises(ValueError, match="names no object of the scene"):
        apply_edit(scene, Edit("remove", next(c for c in PALETTE if c not in dict(scene.objects)), "cube"))
    with pytest.raises(ValueError, match="target=None is invalid for kind='recolour'"):
        Edit("recolour", "red", "cube")


def test_structured_instruction_code():
    code = structured_code("turn the green sphere purple")
    assert code.sum() == 4 and code[0] == 1 and code[2 + 1] == 1 and code[2 + 5 + 0] == 1 and code[2 + 5 + 2 + 4] == 1
    assert structured_code("remove the red cube").tolist()[:2] == [0.0, 1.0]


def test_stand_in_editor_learns_on_tiny_pairs():
    """15 epochs on 16 generated 16x16 pairs halve the training loss (end to end through a Trainer)."""
    torch.manual_seed(0)
    data = EditPairsDataModule(pairs=16, val_pairs=4, image_size=SIZE, instruction_encoder="structured", batch_size=16)
    editor = InstructionEditor(encoder="structured", channels=8, lr=1e-2)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    with torch.no_grad():
        start = float(edit_loss(editor(batch["before"], batch["embedding"]), batch["before"], batch["after"]))
    quiet_trainer(max_epochs=15).fit(editor, data)
    with torch.no_grad():
        end = float(edit_loss(editor(batch["before"], batch["embedding"]), batch["before"], batch["after"]))
    assert end < 0.5 * start
    edited = editor.edit(batch["before"][:2], "remove the red cube")
    assert edited.shape == (2, 3, SIZE, SIZE) and edited.min() >= 0 and edited.max() <= 1


class GreyEditor:
    """An editor that answers every instruction with a mid-grey image."""

    def edit(self, images: torch.Tensor, instruction: str) -> torch.Tensor:
        return torch.full_like(images, 0.5)


def test_iterative_dataset_update_carries_edits_into_the_scene(tiny):
    scene, cameras, _ = tiny
    grey = torch.full((len(cameras), 3, SIZE, SIZE), 0.5)
    before = float(((render_views(scene.gaussians, cameras, SIZE) - grey) ** 2).mean())
    edited = iterative_dataset_update(scene.gaussians, cameras, GreyEditor(), "x", SIZE, rounds=2, fit_steps=15)
    after = float(((render_views(edited, cameras, SIZE) - grey) ** 2).mean())
    assert after < 0.5 * before
    with pytest.raises(ValueError, match=r"views_per_round=7 is invalid, expected 1\.\.6"):
        iterative_dataset_update(scene.gaussians, cameras, GreyEditor(), "x", SIZE, views_per_round=7)


@pytest.mark.slow
def test_fitted_scene_reproduces_its_views(tmp_path):
    """GaussianSceneFit (64 free Gaussians) on one object's 8 views at 16x16: after 30 Adam steps the training
    views are above 25 dB (the free start is near 12 dB) and the held-out views above 22 dB."""
    torch.manual_seed(0)
    data = SceneViewsDataModule(num_objects=1, gaussians_per_object=24, floor_gaussians=16, views=8, image_size=SIZE,
                                batch_size=8)  # fmt: skip
    model = GaussianSceneFit(num_gaussians=64, lr=0.03)
    data.setup("fit")
    train, held_out = data.splits["train"], data.splits["held_out"]
    assert psnr(render_views(model.gaussians().detach(), train.cameras, SIZE), train.images).mean() < 15.0
    quiet_trainer(max_steps=30, default_root_dir=str(tmp_path)).fit(model, data)
    assert Gaussians.load(tmp_path / "gaussians.pt").means.shape == (64, 3)  # written where the fit ends
    fitted = model.gaussians().detach()
    assert psnr(render_views(fitted, train.cameras, SIZE), train.images).mean() > 25.0
    assert psnr(render_views(fitted, held_out.cameras, SIZE), held_out.images).mean() > 22.0


@pytest.mark.slow
def test_analysis_module_end_to_end(tmp_path):
    """DEGaussDefense under `trainer.test` on one tiny scene with a tiny in-process editor: every method's row,
    the constraint met, and the JSON and PNG written."""
    data = ProceduralSceneDataModule(scenes=1, num_objects=2, gaussians_per_object=10, floor_gaussians=9, views=4,
                                     image_size=SIZE)  # fmt: skip
    module = DEGaussDefense(steps=2, views_per_step=2, photoguard_steps=2, attack_rounds=1, attack_fit_steps=2,
                            editor_encoder="structured", editor_pairs=8, editor_epochs=1)  # fmt: skip
    quiet_trainer(default_root_dir=str(tmp_path)).test(module, data)
    methods = [row["method"] for row in module.results["rows"]]
    assert methods == ["none", "degauss", "uniform", "photoguard", "random"]
    assert all(row["train_min_psnr"] >= 30.0 for row in module.results["rows"][1:])
    assert math.isinf(module.results["rows"][0]["train_min_psnr"]) or module.results["rows"][0]["train_min_psnr"] > 100
    assert (tmp_path / "degauss.json").is_file() and (tmp_path / "degauss.png").is_file()


def test_scene_item_without_a_gaussian_attribute_is_refused():
    scene = procedural_scene(num_objects=1, gaussians_per_object=4, floor_gaussians=4, seed=1)
    item = scene_item(scene, Edit("remove", *scene.objects[0]), views=2, image_size=SIZE)
    del item["opacity_logits"], item["means"]
    with pytest.raises(ValueError, match=r"lacks Gaussian attributes \['means', 'opacity_logits'\]"):
        scene_from_item(item)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="methods=\\['photoshop'\\] is invalid"):
        DEGaussDefense(methods=["photoshop"])
    with pytest.raises(ValueError, match="steps=0 is invalid"):
        DEGaussConfig(steps=0)
    with pytest.raises(ValueError, match="encoder='clip' is invalid"):
        InstructionEditor(encoder="clip")
    with pytest.raises(ValueError, match="image_size=18 is invalid, expected a multiple of 4"):
        EditPairsDataModule(image_size=18)
