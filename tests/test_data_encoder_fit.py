"""A data / encoder mismatch is refused when the spec loads (so by ``fusebench run ... --plan``), not at the first step
of a cell: the adapter says what it will deliver (``MultimodalDataset.delivers``: its class count, the points of a
scene) and the encoder says what it cannot take of it (``Backbone.data_problems``).

* SUN RGB-D with fewer points per scene than the centres PointNet++'s first set-abstraction layer samples (VoteNet's
  backbone): before, ``fusebench run sunrgbd-det-real20 --set dataset.options.num_points=16`` failed at the first
  downstream step with "pointnet2: scenes need at least 64 points for this config, got 16".
* A head built for another class count than the dataset's: before, ``fusebench run nyuv2-seg --set
  encoder.config.num_classes=5`` failed in the cell with "nyuv2: the dataset has 40 classes but the encoder ESANet
  was built for num_classes=5".

The thresholds are the architectures' own numbers, written here by hand (not read from the code under test), and
each is tied to the failure it prevents: one point fewer fails in the network itself.
"""

from __future__ import annotations

import re

import pytest
import torch

from fusebench import benchmarks
from fusebench.spec.config import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

#: the centres the first set-abstraction layer samples by farthest point sampling: VoteNet's backbone (Qi et al.,
#: ICCV 2019, Sec. 4 / supp. A.1: SA1 with 2048 centres), and the "tiny" test preset (SA 64/32/16/8)
VOTENET_SA1_CENTRES = 2048
TINY_SA1_CENTRES = 64
#: points per scene the sunrgbd adapter samples when num_points is not set (VoteNet's 20k input points)
SUNRGBD_DEFAULT_POINTS = 20000
PRESETS = f"(the first layer's centres of each preset: tiny {TINY_SA1_CENTRES}, votenet {VOTENET_SA1_CENTRES})"


def _refused(bench: str, overrides: dict, synthetic: bool = False) -> str:
    with pytest.raises(ConfigError) as e:
        benchmarks.load(bench, overrides=overrides, synthetic=synthetic)
    return str(e.value)


def _points_message(bench: str, n: int, preset: str, need: int) -> str:
    return (f"{benchmarks.path(bench)}: dataset.options.num_points = {n}: fewer points per scene than the {need} "
            f"centres the first set-abstraction layer of encoder.config.config = {preset!r} samples (farthest point "
            f"sampling picks them among the scene's points); expected dataset.options.num_points >= {need} {PRESETS} "
            f"[with --set dataset.options.num_points={n}]")


# ---- every committed spec still loads ---------------------------------------------------------------------------
@pytest.mark.parametrize("synthetic", [False, True], ids=["real", "synthetic"])
@pytest.mark.parametrize("bench", benchmarks.builtin())
def test_every_committed_benchmark_spec_loads(bench: str, synthetic: bool) -> None:
    assert benchmarks.load(bench, synthetic=synthetic).name == bench


# ---- points per scene against PointNet++ / VoteNet's first set-abstraction layer ---------------------------------
def test_sunrgbd_num_points_16_is_refused_when_the_spec_loads() -> None:
    """The reproduction: the tiny VoteNet of sunrgbd-det-real20 samples 64 centres from 16 points."""
    assert _refused("sunrgbd-det-real20", {"dataset.options.num_points": 16}) == _points_message(
        "sunrgbd-det-real20", 16, "tiny", TINY_SA1_CENTRES)
    # sunrgbd-det's synthetic variant runs the tiny preset too; its real variant VoteNet's own
    assert _refused("sunrgbd-det", {"dataset.options.num_points": 16}, synthetic=True) == _points_message(
        "sunrgbd-det", 16, "tiny", TINY_SA1_CENTRES)
    assert _refused("sunrgbd-det", {"dataset.options.num_points": 16}) == _points_message(
        "sunrgbd-det", 16, "votenet", VOTENET_SA1_CENTRES)


@pytest.mark.parametrize("bench,synthetic,preset,need", [
    ("sunrgbd-det-real20", False, "tiny", TINY_SA1_CENTRES),
    ("sunrgbd-det", True, "tiny", TINY_SA1_CENTRES),
    ("sunrgbd-det", False, "votenet", VOTENET_SA1_CENTRES),
])
def test_the_fewest_points_that_fit_load_and_one_fewer_is_refused(bench, synthetic, preset, need) -> None:
    assert benchmarks.load(bench, overrides={"dataset.options.num_points": need}, synthetic=synthetic)
    assert _refused(bench, {"dataset.options.num_points": need - 1}, synthetic) == _points_message(
        bench, need - 1, preset, need)


@pytest.mark.parametrize("encoder_id", ["votenet", "pointnet2"])
def test_the_threshold_is_where_the_network_itself_fails(encoder_id: str) -> None:
    """The refused count is one the network cannot take: the tiny preset runs on 64 points and fails on 63."""
    from fusebench import encoders

    enc = encoders.build(encoder_id, config="tiny")
    cls = type(enc)
    with torch.no_grad():
        assert enc.embed(cls.example_batch({"config": "tiny"}, num_points=TINY_SA1_CENTRES)).shape[1] == 2
        with pytest.raises(ValueError, match=f"at least {TINY_SA1_CENTRES} points"):
            enc.embed(cls.example_batch({"config": "tiny"}, num_points=TINY_SA1_CENTRES - 1))


def test_the_pointnet2_encoder_checks_the_points_of_a_scene_too() -> None:
    """The plain PointNet++ encoder (no benchmark uses it) declares the same check; its preset is 'votenet' by
    default, named as such when encoder.config does not set it."""
    from fusebench import encoders
    from fusebench.datasets.base import Delivered

    fact = Delivered(100, "dataset.options.num_points = 100", "dataset.options.num_points")
    assert encoders.ENCODERS.get("pointnet2").data_problems({}, {"points_per_sample": fact}) == [
        f"dataset.options.num_points = 100: fewer points per scene than the {VOTENET_SA1_CENTRES} centres the first "
        f"set-abstraction layer of encoder.config.config (not set: 'votenet') samples (farthest point sampling picks "
        f"them among the scene's points); expected dataset.options.num_points >= {VOTENET_SA1_CENTRES} {PRESETS}"]
    assert encoders.ENCODERS.get("pointnet2").data_problems({"config": "tiny"}, {"points_per_sample": fact}) == []


def test_sunrgbd_delivers_its_default_points_where_num_points_is_not_set() -> None:
    """The default is the adapter's (20000), and the scenes really have that many points (a synthetic scene of 300
    points is sampled up to it); None (every point) is not known before the data is read."""
    from fusebench.datasets import DATASETS, build

    sunrgbd = DATASETS.get("sunrgbd")
    fact = sunrgbd.delivers({})["points_per_sample"]
    assert (fact.value, fact.source, fact.key) == (
        SUNRGBD_DEFAULT_POINTS, f"dataset.options.num_points (not set: the sunrgbd adapter's default "
                                f"{SUNRGBD_DEFAULT_POINTS})", "dataset.options.num_points")
    assert "points_per_sample" not in sunrgbd.delivers({"num_points": None})
    ds = build("sunrgbd", root=None, synthetic=True, split="train", use_cache=False,
               synthetic_spec={"num_samples": 4, "seed": 0, "options": {"points_per_scene": 300}})
    assert ds[0]["modalities"]["points"].shape == (SUNRGBD_DEFAULT_POINTS, 3)


# ---- the head's class count against the dataset's ----------------------------------------------------------------
def test_nyuv2_with_an_esanet_head_of_5_classes_is_refused_when_the_spec_loads() -> None:
    """The reproduction: nyuv2-seg's labels are 40 classes (dataset.options.classes: 40)."""
    message = (f"{benchmarks.path('nyuv2-seg')}: encoder.config.num_classes = 5, but dataset.options.classes = 40: the "
               f"head would predict 5 classes and the targets are class ids 0..39; expected encoder.config.num_classes "
               f"= 40 (the dataset's count) [with --set encoder.config.num_classes=5]")
    assert _refused("nyuv2-seg", {"encoder.config.num_classes": 5}) == message
    assert _refused("nyuv2-seg", {"encoder.config.num_classes": 5}, synthetic=True) == message


@pytest.mark.parametrize("overrides", [
    {"encoder.config.num_classes": 40},  # the dataset's count, said twice
    {"dataset.options.classes": 13},  # the encoder is built with the dataset's count (not set in encoder.config)
    {"dataset.options.classes": 13, "encoder.config.num_classes": 13},
])
def test_nyuv2_class_counts_that_agree_load(overrides: dict) -> None:
    assert benchmarks.load("nyuv2-seg", overrides=overrides).name == "nyuv2-seg"


def test_nyuv2_13_classes_against_an_esanet_head_of_40() -> None:
    assert _refused("nyuv2-seg", {"dataset.options.classes": 13, "encoder.config.num_classes": 40}) == (
        f"{benchmarks.path('nyuv2-seg')}: encoder.config.num_classes = 40, but dataset.options.classes = 13: the head "
        f"would predict 40 classes and the targets are class ids 0..12; expected encoder.config.num_classes = 13 (the "
        f"dataset's count) [with --set dataset.options.classes=13, encoder.config.num_classes=40]")


def test_nyuv2_delivers_the_class_count_of_its_options() -> None:
    """``classes`` where set; else the layout's default where ``layout`` names it (the MTAN release: 13 classes);
    else it depends on the layout found under the data root: not known before the data is read."""
    from fusebench.datasets import DATASETS

    nyuv2 = DATASETS.get("nyuv2")
    assert nyuv2.delivers({"classes": 894})["num_classes"].value == 894
    mtan = nyuv2.delivers({"layout": "mtan"})["num_classes"]
    assert (mtan.value, mtan.source) == (13, "dataset.options.classes (not set: 13 with dataset.options.layout = "
                                             "'mtan')")
    assert nyuv2.delivers({"layout": "official"})["num_classes"].value == 40
    assert nyuv2.delivers({}) == {}


def test_the_refused_class_count_is_one_the_task_refuses_when_it_builds_the_head() -> None:
    from fusebench import encoders, tasks

    backbone = encoders.build("esanet", modalities=["rgb", "depth"], size="tiny", num_classes=5)
    with pytest.raises(ValueError, match=re.escape("the dataset has 40 classes but the encoder ESANet was built for "
                                                   "num_classes=5")):
        tasks.create("segmentation", num_classes=40).build_head(backbone)


@pytest.mark.parametrize("bench,dataset,count,given", [
    ("sunrgbd-det", "sunrgbd", 10, 5),  # SUN RGB-D's 10 classes are the adapter's own (no option sets them)
    ("quickstart", "quickstart", 4, 3),
])
def test_a_head_of_another_class_count_than_the_datasets_is_refused(bench, dataset, count, given) -> None:
    assert _refused(bench, {"encoder.config.num_classes": given}) == (
        f"{benchmarks.path(bench)}: encoder.config.num_classes = {given}, but dataset {dataset}'s num_classes = "
        f"{count}: the head would predict {given} classes and the targets are class ids 0..{count - 1}; expected "
        f"encoder.config.num_classes = {count} (the dataset's count) [with --set encoder.config.num_classes={given}]")


def test_an_encoders_default_class_count_is_checked_where_the_task_does_not_give_the_dataset_one() -> None:
    """Detection builds VoteNet with its own default (10, with its per-class mean box sizes), not the dataset's."""
    from fusebench import encoders
    from fusebench.datasets.base import Delivered

    votenet = encoders.ENCODERS.get("votenet")
    assert votenet.data_problems({}, {"num_classes": Delivered(5, "dataset mine's num_classes = 5")}) == [
        "encoder.config.num_classes (not set: the encoder's default 10), but dataset mine's num_classes = 5: the head "
        "would predict 10 classes and the targets are class ids 0..4; expected encoder.config.num_classes = 5 (the "
        "dataset's count), with encoder.config.mean_sizes: one [l, w, h] per class (5 rows; the built-in mean sizes "
        "are SUN RGB-D's 10 classes)"]


def test_a_multiview_file_says_its_class_count_only_when_read() -> None:
    """multiview_mat's class count follows its file's labels: not checked when the spec loads."""
    from fusebench.datasets import DATASETS

    assert DATASETS.get("multiview_mat").delivers({}) == {}


def test_a_default_or_a_count_nobody_declared_is_not_checked() -> None:
    """Only what a component declares is compared: a plugin encoder's default ``num_classes`` (its own classifier,
    which the task does not compare) and a plugin adapter's class attribute (its count may follow its options)
    refuse nothing; VoteNet's default is its head's count, so it is checked (test above)."""
    from fusebench.datasets.base import Delivered, MultimodalDataset
    from fusebench.encoders.base import Backbone

    class OwnClassifier(Backbone):
        def __init__(self, modalities=None, num_classes: int = 40) -> None:
            super().__init__()

    assert OwnClassifier.data_problems({}, {"num_classes": Delivered(10, "dataset d's num_classes = 10")}) == []
    assert OwnClassifier.data_problems({"num_classes": 40}, {"num_classes": Delivered(10, "dataset d's num_classes = "
                                                                                     "10")})  # set: compared

    class Coarse(MultimodalDataset):  # 12 classes, 6 with an option: it does not say which
        id = "coarse"
        num_classes = 12

    assert Coarse.delivers({"coarse": True}) == {}


def test_votenet_with_another_class_count_needs_its_mean_sizes_when_the_spec_loads() -> None:
    """The advice 'expected encoder.config.num_classes = N' led to the constructor's 'mean_sizes ... is required' in
    the cell; the check says it: VoteNet's built-in mean box sizes are SUN RGB-D's 10 classes."""
    from fusebench import encoders
    from fusebench.datasets.base import Delivered

    votenet = encoders.ENCODERS.get("votenet")
    eighteen = {"num_classes": Delivered(18, "dataset d's num_classes = 18")}
    assert votenet.data_problems({}, eighteen) == [
        "encoder.config.num_classes (not set: the encoder's default 10), but dataset d's num_classes = 18: the head "
        "would predict 10 classes and the targets are class ids 0..17; expected encoder.config.num_classes = 18 (the "
        "dataset's count), with encoder.config.mean_sizes: one [l, w, h] per class (18 rows; the built-in mean sizes "
        "are SUN RGB-D's 10 classes)"]
    assert votenet.data_problems({"num_classes": 18}, eighteen) == [
        "encoder.config.num_classes = 18 needs encoder.config.mean_sizes: one [l, w, h] per class (18 rows; the "
        "built-in mean sizes are SUN RGB-D's 10 classes)"]
    assert votenet.data_problems({"num_classes": 18, "mean_sizes": [[1.0, 1.0, 1.0]] * 18}, eighteen) == []
    with pytest.raises(ValueError, match="mean_sizes"):  # what the cell said before
        votenet(num_classes=18, config="tiny")
