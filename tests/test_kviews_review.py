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


def test_a_cell_of_another_configuration_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch) -> None:
    """The study re-run with other settings into the same --out meets a record of another configuration: the sweep's
    ConfigMismatchError (a RunError, not a ValueError) is the command's one line and exit status 2, as for `run`."""
    from fusebench.cli import study
    from fusebench.engine.cell import ConfigMismatchError

    def refused(*args, **kwargs):
        raise ConfigMismatchError(f"{tmp_path}/runs/x/run.json was made with another configuration")

    monkeypatch.setattr(study, "run_study", refused)
    code = study.main(["--out", str(tmp_path / "runs"), "--board", str(tmp_path), "--synthetic", "--k", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip() == f"fusebench study kviews: {tmp_path}/runs/x/run.json was made with another configuration"


def test_a_benchmark_the_study_cannot_vary_is_named_as_that(tmp_path) -> None:
    """quickstart (no views option, a linear probe) was reported as "k = 2 is outside 2..0"; nyuv2-seg blamed --set
    values nobody passed."""
    import pytest

    from fusebench.studies import kviews

    for name, dataset, protocol in (("quickstart", "quickstart", "linear_probe"), ("nyuv2-seg", "nyuv2", "finetune")):
        with pytest.raises(ValueError, match=rf"^kviews: benchmark '{name}' cannot be studied: .* and '{name}' has "
                                             rf"dataset '{dataset}' and protocol '{protocol}'; study a multi-view "
                                             r"\.mat benchmark"):
            kviews.run_study(kviews.Study(benchmark=name, ks=(2,)), tmp_path / "runs", synthetic=True)
    assert not (tmp_path / "runs").exists()


def test_record_text_in_the_cells_table_is_escaped() -> None:
    """The Cells table showed a cell's protocol note (record text) as it was: a ``|`` in a view name broke the
    table and a tag reached the page as markup. Numbers and lists of numbers show as before (the committed
    board regenerates byte for byte); anything else is escaped like every record text on a board."""
    s = board.StudyRuns(values={}, budgets=[], cells={
        "views": {2: {"b-kv-views-k2d0": {"views": [2, 3], "permutation": [3, 2, 0, 1]},
                      "b-kv-views-k2d1": {"views": ["a|b", "<i>x</i>"], "permutation": "# p | q"}}},
        "copies": {2: {"b-kv-copies-k2d0": {"view_copies": {"base": [1], "noise": 0.5, "mask": 0.3, "seed": 0}},
                       "b-kv-copies-k2d1": {"view_copies": {"base": "<b>", "noise": "|", "mask": 0.3, "seed": 1}}}}},
        records=1)
    assert board._cells_text(s, "views", 2) == ("d0: {2, 3} of [3, 2, 0, 1]; "
                                                "d1: {a\\|b, &lt;i&gt;x&lt;/i&gt;} of \\# p \\| q")
    assert board._cells_text(s, "copies", 2) == ("d0: base [1], noise 0.5, mask 0.3, seed 0; "
                                                 "d1: base &lt;b&gt;, noise \\|, mask 0.3, seed 1")
