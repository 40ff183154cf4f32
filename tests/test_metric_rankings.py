"""The cross-dataset ranking under each metric of the boards (``fusebench.leaderboard.metric_rankings``): the index
shows whether the choice of primary metric decides the ranking. Average ranks and Kendall's tau-b worked out by hand
below; the boards' per-metric means read back from a real board's metadata comment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fusebench.leaderboard.index import build_index, cross_dataset_ranking
from fusebench.leaderboard.meta import read_board_meta
from fusebench.leaderboard.metric_rankings import metric_rankings

ROOT = Path(__file__).resolve().parents[1]


def _boards() -> dict:
    # primary fs1: b1 a .5 > b .4 > c .3; b2 a .6 > c .5 > b .4; b3 b .7 > a .6 > c .5
    #   -> ranks a (1, 1, 2), b (2, 3, 1), c (3, 2, 3): averages a 4/3, b 2, c 8/3
    # acc (b1, b2 only; b3 does not report it): b1 c .9 > b .8 > a .7; b2 c .9 > a .8 = b .8
    #   -> ranks a (3, 2.5), b (2, 2.5), c (1, 1): averages a 2.75, b 2.25, c 1
    # tau-b between the average ranks (4/3, 2, 8/3) and (2.75, 2.25, 1): every pair discordant -> -1
    fs1 = {"b1": {"a": .5, "b": .4, "c": .3}, "b2": {"a": .6, "b": .4, "c": .5}, "b3": {"a": .6, "b": .7, "c": .5}}
    acc = {"b1": {"a": .7, "b": .8, "c": .9}, "b2": {"a": .8, "b": .8, "c": .9}}
    out = {}
    for n, m in fs1.items():
        g = {"kind": "real", "protocol": "embedding_eval", "direction": "higher", "primary": "fs1", "means": m,
             "metric_means": {"fs1": {"direction": "higher", "means": m}}}
        if n in acc:
            g["metric_means"]["acc"] = {"direction": "higher", "means": acc[n]}
        out[n] = {"groups": [g]}
    return out


def test_each_other_metric_is_ranked_over_the_boards_reporting_it_with_tau_against_the_primary() -> None:
    boards = _boards()
    ranking = cross_dataset_ranking(boards)
    assert ranking["avg"] == pytest.approx({"a": 4 / 3, "b": 2.0, "c": 8 / 3}, abs=1e-12)
    by = metric_rankings(boards, ranking, cross_dataset_ranking)
    assert list(by) == ["acc"]  # fs1 is every board's primary: not repeated
    acc = by["acc"]
    assert acc["boards"] == ["b1", "b2"] and acc["missing"] == ["b3"]
    assert acc["avg"] == pytest.approx({"a": 2.75, "b": 2.25, "c": 1.0}, abs=1e-12)
    assert acc["tau"] == pytest.approx(-1.0, abs=1e-12)
    md = build_index(boards, None, ranking)
    section = md.split("### Under each metric", 1)[1]
    assert "| objective | primary | `acc` |" in section
    assert "| `a` | 1.33 (1) | 2.75 (3) |" in section and "| `c` | 2.67 (3) | 1.00 (1) |" in section
    assert "| boards | 3 | 2 (not [b3](b3.md)) |" in section and "| tau-b with primary | 1 | -1.00 |" in section


def test_metrics_are_ordered_with_their_numbers_as_numbers_and_a_board_without_them_is_named() -> None:
    boards = _boards()
    for n, g in ((n, b["groups"][0]) for n, b in boards.items()):
        for m in ("fs10", "fs5"):
            g["metric_means"][m] = {"direction": "lower", "means": g["means"]}  # lower: the order reversed
    del boards["b1"]["groups"][0]["metric_means"]
    ranking = cross_dataset_ranking(boards)
    by = metric_rankings(boards, ranking, cross_dataset_ranking)
    assert list(by) == ["acc", "fs5", "fs10"]  # numbers as numbers; fs1, every board's primary, not repeated
    # fs10 (lower is better) on b2, b3: b2 b .4 < c .5 < a .6 -> a 3, b 1, c 2; b3 c .5 < a .6 < b .7 -> a 2, b 3,
    # c 1: averages a 2.5, b 2, c 1.5 against the primary's a 4/3, b 2, c 8/3: every pair discordant, tau-b = -1
    assert by["fs5"]["missing"] == ["b1"] and by["fs10"]["avg"] == pytest.approx({"a": 2.5, "b": 2.0, "c": 1.5})
    assert by["fs10"]["tau"] == pytest.approx(-1.0, abs=1e-12)
    # acc now on b2 alone: one board cannot be ranked, and the index says so
    assert "problem" in by["acc"]
    assert "Not ranked: `acc` (it needs at least 2 real-data boards" in build_index(boards, None, ranking)


def test_a_committed_board_carries_its_metric_means_and_a_damaged_entry_is_refused(tmp_path: Path) -> None:
    meta = read_board_meta(ROOT / "leaderboards" / "mv-bbc.md")
    g = meta["groups"][0]
    assert g["metric_means"]["fs1_best_acc"]["means"] == g["means"]  # the primary's entry is the ranked means
    assert {"acc", "knn_acc", "nmi", "fs5_acc"} <= set(g["metric_means"])
    text = (ROOT / "leaderboards" / "mv-bbc.md").read_text()
    for bad in ({"acc": {"direction": "up", "means": {}}}, {"acc": {"direction": "higher", "means": {"x": None}}},
                {"a`b": {"direction": "higher", "means": {}}}, {"acc": {"direction": "higher"}}):
        g2 = {**g, "metric_means": bad}
        comment = "<!-- fusebench-board " + json.dumps({**meta, "groups": [g2]}) + " -->"
        damaged = text[:text.rindex("<!-- fusebench-board ")] + comment + "\n"
        path = tmp_path / "mv-bbc.md"
        path.write_text(damaged)
        with pytest.raises(ValueError, match="'metric_means' must map metric ids"):
            read_board_meta(path)


# ------------------------------------------------------------------------------------ the test split's own noise
def _copy_runs(tmp_path: Path, edit=None) -> Path:
    """The committed mv-3sources records of two rows, copied (``edit`` applied to each record)."""
    runs = tmp_path / "runs"
    for obj in ("raw", "mv_infonce"):
        for src in sorted((ROOT / "leaderboards" / "runs" / "mv-3sources" / obj).glob("seed*/run.json")):
            rec = json.loads(src.read_text())
            if edit:
                edit(rec)
            dst = runs / "mv-3sources" / obj / src.parent.name / "run.json"
            dst.parent.mkdir(parents=True)
            dst.write_text(json.dumps(rec))
    return runs


def test_a_board_on_one_fixed_test_split_says_what_its_tests_leave_out(tmp_path: Path) -> None:
    from fusebench.leaderboard import write_leaderboards

    write_leaderboards(_copy_runs(tmp_path), tmp_path / "lb", plots=False, formats=("md",))
    md = (tmp_path / "lb" / "mv-3sources.md").read_text()
    # 3Sources: 34 test samples (20% of 169, stratified); sqrt(0.2 / 34) = 0.0767 -> 7.7 points
    assert "Every run is scored on the same test split of 34 samples" in md and "7.7 points at d = 0.2" in md

    def per_seed_split(rec: dict) -> None:  # a test split drawn per seed: the seeds do vary the test samples
        rec["dataset"]["splits"].pop("outer_test_seed")

    write_leaderboards(_copy_runs(tmp_path / "b", per_seed_split), tmp_path / "lb2", plots=False, formats=("md",))
    assert "Every run is scored on the same test split" not in (tmp_path / "lb2" / "mv-3sources.md").read_text()
