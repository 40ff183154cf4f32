"""Downstream tasks gather predictions batch by batch and score them in their metric form."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fusebench import tasks
from fusebench.registry import UnknownNameError


def test_flat_task_scores_all_batches_together() -> None:
    t = tasks.for_dataset(SimpleNamespace(task="classification", num_classes=3, id="toy"))
    t.add(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 1]))
    t.add(torch.tensor([2]), torch.tensor([2]))
    # by hand: 3 of 4 right; the macro-F1 of classes {0: 1, 1: 2/3, 2: 2/3}
    out = t.score(["acc", "mf1"])
    assert out["acc"] == pytest.approx(0.75) and out["mf1"] == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)


def test_segmentation_task_ignores_unlabelled_pixels() -> None:
    t = tasks.for_dataset(SimpleNamespace(task="segmentation", num_classes=2, id="toy"))
    t.add(torch.tensor([[[0, 1], [1, 1]]]), torch.tensor([[[0, 1], [-1, 0]]]))
    # labelled pixels: (0,0) right, (1,1) right, (0,1) wrong -> pixel accuracy 2/3
    assert t.score(["pixel_acc"])["pixel_acc"] == pytest.approx(2 / 3)


def test_detection_task_needs_the_class_count_and_unknown_tasks_are_named() -> None:
    t = tasks.for_dataset(SimpleNamespace(task="detection", num_classes=None, id="toy"))
    with pytest.raises(ValueError, match="toy: a detection dataset must declare num_classes"):
        t.score(["map_0.25"])
    with pytest.raises(UnknownNameError, match=r"unknown task 'clustering'.*Valid task ids: classification, "
                                               r"detection, regression, segmentation"):
        tasks.for_dataset(SimpleNamespace(task="clustering"))


def test_task_describes_its_metrics_and_refuses_another_familys():
    """The dataset's task says which metrics it reports, with unit and direction (values from the
    metric definitions: MAE is a raw error, lower is better; accuracies are fractions, higher is better)."""
    from fusebench.tasks import TASKS

    assert TASKS.get("regression").describe_metrics(["mae", "corr", "acc7"]) == [
        ("mae", "raw", "lower"), ("corr", "raw", "higher"), ("acc7", "fraction", "higher")]
    assert TASKS.get("classification").describe_metrics(["acc", "kappa"]) == [
        ("acc", "fraction", "higher"), ("kappa", "raw", "higher")]
    assert TASKS.get("segmentation").describe_metrics(["miou"]) == [("miou", "fraction", "higher")]
    # k-means on the embeddings adds the clustering metrics, and only under the protocol that declares them
    from fusebench.components.protocols import PROTOCOLS

    added = PROTOCOLS.get("embedding_eval").metric_families
    assert added == ("clustering",) and PROTOCOLS.get("linear_probe").metric_families == ()
    assert TASKS.get("classification").describe_metrics(["acc", "nmi"], added)[1] == ("nmi", "fraction", "higher")
    with pytest.raises(ValueError, match=r"metric 'nmi' scores clustering and task 'classification' reports classification"):
        TASKS.get("classification").describe_metrics(["acc", "nmi"], PROTOCOLS.get("linear_probe").metric_families)
    with pytest.raises(ValueError, match=r"'miou' scores segmentation and task 'regression'"):
        TASKS.get("regression").describe_metrics(["mae", "miou"])
    with pytest.raises(ValueError, match=r"unknown metric 'maee'. Did you mean 'mae'"):
        TASKS.get("regression").describe_metrics(["maee"])


def test_spec_with_a_metric_its_dataset_cannot_report_is_refused_at_load():
    from fusebench import benchmarks
    from fusebench.spec.config import ConfigError

    for name in benchmarks.builtin():  # every shipped spec reports metrics of its dataset's task
        benchmarks.load(name)
    with pytest.raises(ConfigError, match=r"quickstart.yaml: metrics: metric 'mae' scores regression and task "
                                          r"'classification'"):
        benchmarks.load("quickstart", overrides={"metrics": ["acc", "mae"]})
