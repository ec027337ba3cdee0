"""The fMRI decoding data (trustlit/data/fmri.py: NSD-style files, simulated stimuli) and the decoding analysis
(trustlit/neuro/decoding.py) run by a Trainer."""

from __future__ import annotations

import csv
import json

import h5py
import nibabel
import numpy as np
import pytest
from helpers import SHARED_DATA, quiet_trainer
from scipy.io import savemat

from trustlit.data.concepts import concept_items, held_out_groups
from trustlit.data.fmri import FMRIDecodingDataModule, data_from_batch, load_nsd
from trustlit.neuro.decoding import SemanticBottleneckDecoding

SHAPE = (5, 4, 3)  # X, Y, Z


def write_nsd(tmp_path, trials_per_stimulus=2, stimuli=6, nifti=False, shape=SHAPE):
    """A tiny NSD layout: int16 betas (x 300) of `stimuli` stimuli shown `trials_per_stimulus` times, a mask, a CSV
    design, concept annotations and embeddings; returns the paths and the true mean response per stimulus."""
    rng = np.random.default_rng(0)
    mask = np.zeros(shape)
    mask[1:4, 1:3, :] = 1
    mask[0, 0, 0] = -1  # nsdgeneral's "outside the brain" value
    order = np.tile(np.arange(stimuli), trials_per_stimulus)
    volumes = rng.integers(-3000, 3000, size=(len(order), *shape)).astype(np.int16)
    np.save(tmp_path / "mask.npy", mask)
    if nifti:
        betas = tmp_path / "betas_session01.nii.gz"
        nibabel.save(nibabel.Nifti1Image(np.moveaxis(volumes, 0, -1), np.eye(4)), str(betas))
    else:
        betas = tmp_path / "betas_session01.hdf5"
        with h5py.File(betas, "w") as handle:  # NSD's MATLAB order: [trials, Z, Y, X]
            handle["betas"] = volumes.transpose(0, 3, 2, 1)
    with (tmp_path / "design.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["stimulus_id", "split"])
        writer.writerows([f"s{i}", "test" if i < 2 else "train"] for i in order)
    concepts = (np.arange(stimuli)[:, None] >> np.arange(3)) & 1
    with (tmp_path / "concepts.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["stimulus_id", "is there a person", "is it outdoors", "is there text"])
        writer.writerows([f"s{i}", *row] for i, row in reversed(list(enumerate(concepts.tolist()))))
    np.save(tmp_path / "embeddings.npy", np.arange(stimuli)[::-1, None] * np.ones((1, 4)))
    expected = np.stack([volumes[order == i][:, mask > 0].mean(0) / 300 for i in range(stimuli)])
    paths = {k: str(tmp_path / f) for k, f in [("mask", "mask.npy"), ("design", "design.csv")]}
    paths |= {"concepts": str(tmp_path / "concepts.csv"), "embeddings": str(tmp_path / "embeddings.npy")}
    return [str(betas)], paths, expected, concepts


@pytest.mark.parametrize("nifti", [False, True])
def test_nsd_files_are_masked_scaled_and_averaged_per_stimulus(tmp_path, nifti):
    betas, paths, expected, concepts = write_nsd(tmp_path, nifti=nifti)
    data = load_nsd(betas, **paths)
    np.testing.assert_allclose(data.voxels, expected, rtol=1e-5)  # stimuli in order of first trial: s0..s5
    np.testing.assert_array_equal(data.concepts, concepts)
    np.testing.assert_array_equal(data.embeddings[:, 0], np.arange(6))  # rows follow the concept CSV's ids
    np.testing.assert_array_equal(data.test, [True, True, False, False, False, False])
    assert data.concept_names == ["is there a person", "is it outdoors", "is there text"]
    assert data.voxels.shape[1] == 18 and data.grid == SHAPE


def test_nsd_expdesign_mat_maps_trials_to_subject_images(tmp_path):
    betas, paths, expected, _ = write_nsd(tmp_path, trials_per_stimulus=1, stimuli=6)
    # masterordering (1-based) picks column of subjectim; subject 2's images 1..6 are nsdIds s0..s5 (1-based + 1)
    subjectim = np.zeros((8, 10), dtype=np.int64)
    subjectim[1, 1000:] = 0
    subjectim[1, :6] = np.arange(1, 7)
    savemat(tmp_path / "nsd_expdesign.mat", {"masterordering": np.arange(1, 7), "subjectim": subjectim})
    with (tmp_path / "concepts.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows([["stimulus_id", "c"], *[[str(i), i % 2] for i in range(6)]])
    paths["design"] = str(tmp_path / "nsd_expdesign.mat")
    data = load_nsd(betas, **paths, subject=2)
    np.testing.assert_allclose(data.voxels, expected, rtol=1e-5)
    assert data.test.all()  # masterordering <= 1000: the shared images


def test_symmetric_grids_need_the_beta_order(tmp_path):
    """With X == Z, [trials, X, Y, Z] and NSD's MATLAB [trials, Z, Y, X] both fit the mask: the loader refuses to
    guess, and reads the file right when told its order (write_nsd writes the MATLAB order)."""
    betas, paths, expected, _ = write_nsd(tmp_path, shape=(4, 3, 4))
    with pytest.raises(ValueError, match=r"X == Z\): pass beta_order='xyz' or 'zyx'$"):
        load_nsd(betas, **paths)
    np.testing.assert_allclose(load_nsd(betas, **paths, beta_order="zyx").voxels, expected, rtol=1e-5)
    assert not np.allclose(load_nsd(betas, **paths, beta_order="xyz").voxels, expected, rtol=1e-5)
    with pytest.raises(ValueError, match="beta_order='zxy' is invalid"):
        load_nsd(betas, **paths, beta_order="zxy")


def test_an_explicit_beta_order_must_match_the_mask(tmp_path):
    betas, paths, expected, _ = write_nsd(tmp_path)  # (5, 4, 3) stored as [trials, 3, 4, 5]
    np.testing.assert_allclose(load_nsd(betas, **paths, beta_order="zyx").voxels, expected, rtol=1e-5)
    with pytest.raises(ValueError, match=r"do not match the mask \(5, 4, 3\) as beta_order='xyz'"):
        load_nsd(betas, **paths, beta_order="xyz")


def test_held_out_groups_keep_every_group_on_one_side():
    groups = np.repeat([f"author-{i}" for i in range(20)], 3)
    test = held_out_groups(groups, 0.25, seed=4)
    assert set(groups[test]).isdisjoint(groups[~test]) and len(set(groups[test])) == 5
    assert np.array_equal(test, held_out_groups(groups, 0.25, seed=4))
    assert held_out_groups(np.arange(30), 0.01, seed=0).sum() == 2  # at least two groups


@pytest.mark.parametrize("source", ["fictitious", "tofu"])
def test_text_stimuli_hold_out_whole_authors(source):
    """Author texts: the test texts are all the texts of a fifth of the authors (no author on both sides)."""
    tofu_dir = str(SHARED_DATA / "tofu") if source == "tofu" else None
    sizes = {"num_authors": 10, "variants_per_author": 3, "seed": 2}
    data = FMRIDecodingDataModule(items=source, **sizes, grid=(6, 6, 4), tofu_dir=tofu_dir)
    data.setup("test")
    items = concept_items(source, **sizes, tofu_dir=tofu_dir)
    authors = np.array([item.rsplit("-", 1)[0] for item in items.ids])
    np.testing.assert_array_equal(data.data.concepts, items.concepts)  # rows are the items in order
    test = data.data.test
    assert set(authors[test]).isdisjoint(authors[~test]) and len(set(authors[test])) == 2
    assert test.sum() == 2 * np.sum(authors == authors[test][0])


def test_nsd_bad_files_raise_clear_errors(tmp_path):
    betas, paths, _, _ = write_nsd(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"mask='.*missing\.npy': no such file"):
        load_nsd(betas, **{**paths, "mask": str(tmp_path / "missing.npy")})
    np.save(tmp_path / "small_mask.npy", np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match=r"do not match the mask \(2, 2, 2\)"):
        load_nsd(betas, **{**paths, "mask": str(tmp_path / "small_mask.npy")})
    np.save(tmp_path / "short.npy", np.ones((2, 4)))
    with pytest.raises(ValueError, match="2 rows, the concept CSV"):
        load_nsd(betas, **{**paths, "embeddings": str(tmp_path / "short.npy")})
    with pytest.raises(ValueError, match="source='nsd' needs betas, mask"):
        FMRIDecodingDataModule(source="nsd", design="x.csv", concepts="c.csv", embeddings="e.npy")


def test_decoding_analysis_runs_under_a_trainer(tmp_path):
    data = FMRIDecodingDataModule(num_stimuli=200, num_concepts=8, grid=(10, 10, 4), seed=1)
    module = SemanticBottleneckDecoding()
    quiet_trainer(default_root_dir=str(tmp_path)).test(module, datamodule=data)
    results = json.loads((tmp_path / "decoding.json").read_text())
    assert results["method"] == "SemanticBottleneckDecoding" and results["test_stimuli"] == 40
    # a simulated brain whose voxels carry the concepts: both decoders identify far above chance (0.5)
    assert results["bottleneck/two_way"] > 0.8 and results["direct/two_way"] > 0.8
    assert results["region_auc_mean"] > 0.6 and len(results["region_auc"]) == 8
    assert (tmp_path / "decoding.png").stat().st_size > 0
    batch = next(iter(data.test_dataloader()))
    assert data_from_batch(batch).region_masks.shape == (4, 400)
