"""Hostile-input review of the readers of official files (round 6): damaged copies of the REAL fixtures, built
in tmp_path, must give one DatasetError naming the file, the key / field and what was expected, never a bare
ValueError / TypeError / AttributeError from h5py or numpy, and never "does not exist" for a path that is there
(a folder or a looping link where a data file is expected)."""

from __future__ import annotations

import os
import pickle
import shutil

import h5py
import numpy as np
import pytest

from fusebench.datasets import DatasetError, build, safe_pickle

# -- 1. CMU-MOSI computational sequence (labels) ---------------------------------------------------------
# CMU_MOSI_Opinion_Labels.csd (real): root group 'Opinion Segment Labels', 93 videos under data/, the first in
# sorted order '03bSnISJMiM' with 13 segments: features (13, 1) float32, intervals (13, 2) float32.
CSD = "CMU_MOSI_Opinion_Labels.csd"
VID = "03bSnISJMiM"


def _csd_copy(fixtures_dir, tmp_path, edit):
    path = tmp_path / CSD
    shutil.copyfile(fixtures_dir / "mosi" / CSD, path)
    path.chmod(0o644)
    with h5py.File(path, "a") as f:
        video = f["Opinion Segment Labels"]["data"][VID]
        assert video["features"].shape == (13, 1) and video["intervals"].shape == (13, 2)  # the layout above
        edit(video)
    return path


def _mosi(root):
    return build("mosi", root=root, modalities=[], use_cache=False)


@pytest.mark.parametrize("key,strings", [("features", [[b"a"]] * 13), ("intervals", [[b"0", b"1"]] * 13)])
def test_csd_labels_or_intervals_stored_as_strings_refused(tmp_path, fixtures_dir, key, strings):
    # before: float(b'a') raised a bare ValueError from the adapter's label loop (features: the labels)
    def to_strings(video):
        del video[key]
        video[key] = np.array(strings)

    _csd_copy(fixtures_dir, tmp_path, to_strings)
    with pytest.raises(DatasetError, match=rf"{CSD}: video '{VID}': '{key}' has dtype \|S1; expected real numbers "
                                           r"\(float or integer\)"):
        _mosi(tmp_path)


def test_csd_features_that_are_a_group_refused(tmp_path, fixtures_dir):
    # before: h5py's "TypeError: Accessing a group is done with bytes or str, not <class 'tuple'>"
    def to_group(video):
        del video["features"]
        video.create_group("features")

    _csd_copy(fixtures_dir, tmp_path, to_group)
    with pytest.raises(DatasetError, match=rf"{CSD}: video '{VID}' must hold 'features' and 'intervals' datasets, "
                                           r"found \['features \(Group\)', 'intervals \(Dataset\)'\]"):
        _mosi(tmp_path)


def test_csd_path_that_is_a_folder_or_a_link_loop(tmp_path, fixtures_dir):
    (tmp_path / CSD).mkdir()  # before: "computational sequence file does not exist", which it does
    with pytest.raises(DatasetError, match=rf"{CSD}: is a folder, not a file; expected a computational sequence "
                                           r"file \(HDF5\)"):
        _mosi(tmp_path)
    (tmp_path / CSD).rmdir()
    os.symlink(tmp_path / CSD, tmp_path / CSD)
    with pytest.raises(DatasetError, match=rf"{CSD}: is a symbolic link that loops"):
        _mosi(tmp_path)


def test_csd_copy_of_the_real_file_still_reads(tmp_path, fixtures_dir):
    _csd_copy(fixtures_dir, tmp_path, lambda video: None)
    ds = _mosi(tmp_path)
    assert len(ds) == 1284  # the standard MOSI train/valid/test folds of the 93 videos: train 1284 segments


# -- 2. NYUv2 MTAN .npy: a .npz archive under a .npy name ------------------------------------------------
def test_mtan_npz_under_an_npy_name_refused(tmp_path, fixtures_dir):
    # np.load reads a .npz whatever the name and returns an NpzFile; before: AttributeError 'NpzFile' ... 'dtype'
    shutil.copytree(fixtures_dir / "nyuv2" / "mtan", tmp_path, dirs_exist_ok=True)
    path = tmp_path / "val" / "depth" / "0.npy"
    depth = np.load(path)
    path.chmod(0o644)
    with open(path, "wb") as fh:
        np.savez(fh, depth=depth)
    with pytest.raises(DatasetError, match=r"nyuv2: .*val/depth/0.npy is a .npz archive \(arrays \['depth'\]\), not a "
                                           r"\.npy array"):
        build("nyuv2", root=tmp_path, split="test", modalities=["depth"], use_cache=False)[0]


# -- 3. SUN RGB-D info pickles: integer fields --------------------------------------------------------------
# mmdet3d_v0_trainval/sunrgbd_infos_train.pkl (real): 2 entries; entry 0 point_cloud = {num_features: 6,
# lidar_idx: 1}. mmdet3d_tests/sunrgbd_infos.pkl (real, v2): data_list[0] with 3 instances (labels 0, 7, 6).
def _v0(fixtures_dir, tmp_path, edit):
    shutil.copytree(fixtures_dir / "sunrgbd" / "mmdet3d_v0_trainval", tmp_path, dirs_exist_ok=True)
    path = tmp_path / "sunrgbd_infos_train.pkl"
    infos = safe_pickle.load(path)
    assert infos[0]["point_cloud"] == {"num_features": 6, "lidar_idx": 1}
    edit(infos[0])
    path.chmod(0o644)
    path.write_bytes(pickle.dumps(infos))
    return build("sunrgbd", root=tmp_path, split="train", layout="infos", use_cache=False, augment=False,
                 val_fraction=0.0)


@pytest.mark.parametrize("field,value,message", [
    ("lidar_idx", "abc", r"info entry 0.point_cloud.lidar_idx must be an integer >= 0, got 'abc'"),  # was ValueError
    ("lidar_idx", None, r"info entry 0.point_cloud.lidar_idx must be an integer >= 0, got None"),  # was TypeError
    ("lidar_idx", 1.5, r"info entry 0.point_cloud.lidar_idx must be an integer >= 0, got 1.5"),  # was frame 1
    ("num_features", 0, r"info entry 0.point_cloud.num_features must be an integer >= 3, got 0"),
])
def test_v0_info_integer_fields_refused(tmp_path, fixtures_dir, field, value, message):
    with pytest.raises(DatasetError, match=r"sunrgbd_infos_train.pkl: " + message):
        _v0(fixtures_dir, tmp_path, lambda e: e["point_cloud"].__setitem__(field, value))


def test_v0_info_frame_stored_as_numpy_or_whole_float_reads_frame_1(tmp_path, fixtures_dir):
    for i, value in enumerate((np.int64(1), 1.0)):  # the infos layout reads lidar/000001.npz for frame 1
        ds = _v0(fixtures_dir, tmp_path / str(i), lambda e: e["point_cloud"].__setitem__("lidar_idx", value))
        assert ds[0]["meta"]["frame"] == 1 and ds[0]["meta"]["points_file"] == "000001.npz"


def test_v0_info_boxes_of_strings_refused(tmp_path, fixtures_dir):
    with pytest.raises(DatasetError, match=r"info entry 0.annos.gt_boxes_upright_depth must be a \[K, 7\] array of "
                                           r"numbers, got \[\['a'"):
        _v0(fixtures_dir, tmp_path, lambda e: e["annos"].__setitem__("gt_boxes_upright_depth", [["a"] * 7]))


@pytest.mark.parametrize("where,key,value,message", [
    ("instance", "bbox_label_3d", "bed", r"data_list\[0\].instances\[0\].bbox_label_3d must be an integer, got 'bed'"),
    ("instance", "bbox_3d", ["a"] * 7, r"data_list\[0\].instances\[0\].bbox_3d must be 7 finite numbers, got \['a'"),
    ("lidar_points", "num_pts_feats", None, r"data_list\[0\].lidar_points.num_pts_feats must be an integer >= 3, "
                                            r"got None"),
])
def test_v2_info_fields_refused(tmp_path, fixtures_dir, where, key, value, message):
    shutil.copytree(fixtures_dir / "sunrgbd" / "mmdet3d_tests", tmp_path, dirs_exist_ok=True)
    path = tmp_path / "sunrgbd_infos.pkl"
    infos = safe_pickle.load(path)
    entry = infos["data_list"][0]
    (entry["instances"][0] if where == "instance" else entry[where])[key] = value
    path.chmod(0o644)
    path.write_bytes(pickle.dumps(infos))
    with pytest.raises(DatasetError, match=r"sunrgbd_infos.pkl: " + message):
        build("sunrgbd", root=tmp_path, split="train", info_file="sunrgbd_infos.pkl", use_cache=False,
              augment=False, val_fraction=0.0)


# -- 4. Sleep-EDF: a folder or a looping link where an EDF is expected ---------------------------------------
PAIR = [("short_psg.edf", "SC4001EC-Hypnogram.edf")]


def test_sleep_edf_folder_or_link_loop_named_as_such(tmp_path, fixtures_dir):
    shutil.copyfile(fixtures_dir / "sleep_edf" / "SC4001EC-Hypnogram.edf", tmp_path / "SC4001EC-Hypnogram.edf")
    (tmp_path / "short_psg.edf").mkdir()  # before: "short_psg.edf does not exist"
    with pytest.raises(DatasetError, match=r"sleep_edf: .*short_psg.edf is a folder, not a file; expected an EDF "
                                           r"file"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
    (tmp_path / "short_psg.edf").rmdir()
    os.symlink(tmp_path / "short_psg.edf", tmp_path / "short_psg.edf")
    with pytest.raises(DatasetError, match=r"short_psg.edf is a symbolic link that loops"):
        build("sleep_edf", root=tmp_path, pairs=PAIR, use_cache=False)
