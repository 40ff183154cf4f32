"""Review kviews/02: an undefined metric (null -> NaN) is no pair; the summary's mean over the pretrained rows uses
the same rows at both ends of k; a study of records without a pretrained budget says so."""
import math

from fusebench.leaderboard import kviews as board


def _study(values):
    return board.StudyRuns(values=values, budgets=[], cells={}, records=1)


def test_an_undefined_metric_is_no_pair_and_the_summary_uses_the_same_rows_at_both_ends() -> None:
    m = "fs1_best_acc"
    values = {"views": {
        2: {"c-kv-views-k2d0": {"none": {0: {m: 0.5}, 1: {m: 0.5}}, "raw": {0: {m: 0.6}, 1: {m: 0.6}},
                                "a": {0: {m: 0.7}, 1: {m: math.nan}}, "b": {0: {m: 0.9}, 1: {m: 0.9}}}},
        3: {"c-kv-views-k3d0": {"none": {0: {m: 0.5}, 1: {m: 0.5}}, "raw": {0: {m: 0.6}, 1: {m: 0.6}},
                                "a": {0: {m: 0.8}, 1: {m: 0.8}}}}}}  # b has no run at k = 3
    s = _study(values)
    assert board.pairs(s, "views", 2, "a", "none", m) == [0.7 - 0.5]  # seed 1 undefined: left out, not NaN
    assert board.pairs(s, "views", 2, "a", None, m) == [0.7]
    (line,) = board._summary(s, ["a", "b"], m)
    # by hand: only `a` has gaps at k = 2 and k = 3: +20.00 -> +30.00 to none (b's +40 at k = 2 is not averaged in)
    assert "pretrained - `none` (mean over the 1 pretrained rows) +20.00 -> +30.00 points" in line
    assert "nan" not in line


def test_no_pretrained_budget_is_not_called_unequal() -> None:
    text = board._budget_text(_study({}))
    assert "NOT" not in text
    assert text == "no pretrained run took an optimiser step (no budget with a batch size in the records)"


def test_zero_epochs_are_refused_before_any_run(tmp_path) -> None:
    import pytest

    from fusebench.studies import kviews

    with pytest.raises(ValueError, match="epochs"):
        kviews.run_study(kviews.Study(epochs=0, objectives=("raw", "none", "mv_infonce")), tmp_path / "runs",
                         synthetic=True)
    assert not (tmp_path / "runs").exists()


def test_render_only_refuses_run_options(tmp_path, capsys) -> None:
    from fusebench.cli import study

    assert study.main(["--render-only", "--out", str(tmp_path), "--board", str(tmp_path), "--seeds", "0"]) == 2
    assert "--seeds" in capsys.readouterr().err
