"""The k-views study (issue #22): nested seeded view subsets, the information-fixed copies arm, matched
budgets, paired gaps to the none / raw rows, the board (tables, summary, plot) read back from the records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio

from fusebench.studies import kviews
from fusebench.leaderboard import kviews as kviews_board
from fusebench.cli import study as kviews_cli
from fusebench.metrics import values_of

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# the cells
# ---------------------------------------------------------------------------------------------
def test_permutations_are_seeded_and_subsets_nested_and_distinct() -> None:
    for j in range(4):
        perm = kviews.view_permutation(6, j, subset_seed=2)
        assert sorted(perm) == list(range(6)) and perm == kviews.view_permutation(6, j, 2)
    assert kviews.view_permutation(6, 0, 0) != kviews.view_permutation(6, 1, 0)
    assert kviews.view_permutation(6, 0, 0) != kviews.view_permutation(6, 0, 1)

    cells = kviews.study_cells("toy", 6, [2, 3, 4, 5, 6], subsets=5, subset_seed=0, arms=("views",))
    by = {(c.k, c.draw): c for c in cells}
    # independently: draw j's k-subset is the set of its first k views; a set an earlier draw had at k is left out
    for k in range(2, 7):
        seen = []
        for j in range(5):
            perm = kviews.view_permutation(6, j, 0)
            subset = sorted(perm[:k])
            if subset in seen:
                assert (k, j) not in by
                continue
            seen.append(subset)
            cell = by[(k, j)]
            assert cell.views == subset and cell.permutation == perm and cell.name == f"toy-kv-views-k{k}d{j}"
        assert len(seen) == len({tuple(s) for s in seen}) == sum(1 for c in cells if c.k == k)
    assert [c.views for c in cells if c.k == 6] == [[0, 1, 2, 3, 4, 5]]  # the full set once
    for j in range(5):  # nested: a draw's k-1 subset is inside its k subset (when both were run)
        for k in range(3, 7):
            if (k - 1, j) in by and (k, j) in by:
                assert set(by[(k - 1, j)].views) < set(by[(k, j)].views)
    assert len({c.name for c in cells}) == len(cells)


def test_copies_cells_keep_the_base_and_seed_each_draw() -> None:
    cells = kviews.study_cells("mv-handwritten", 6, [2, 4], subsets=2, subset_seed=5, arms=("copies",))
    assert [(c.k, c.draw) for c in cells] == [(2, 0), (2, 1), (4, 0), (4, 1)]
    for c in cells:
        assert c.copies == {"base": [1], "copies": c.k, "noise": 0.5, "mask": 0.3, "seed": 5 + c.draw}
        assert c.dataset_override() == ("dataset.options.view_copies", c.copies)
    other = kviews.study_cells("other", 3, [3], 1, 0, ("copies",), noise=0.1, mask=0.0)
    assert other[0].copies == {"base": [0], "copies": 3, "noise": 0.1, "mask": 0.0, "seed": 0}


@pytest.mark.parametrize("kwargs, match", [
    ({"ks": [1]}, r"k = 1 is outside 2..6"),
    ({"ks": [7]}, r"k = 7 is outside 2..6"),
    ({"subsets": 0}, r"subsets=0 must be an integer >= 1"),
    ({"arms": ("view",)}, r"arms=\['view'\] must be a non-empty subset of \['views', 'copies'\]"),
    ({"copies_base": [6]}, r"copies_base=\[6\] must be distinct view indices in 0..5"),
])
def test_bad_study_arguments_are_one_clear_error(kwargs, match) -> None:
    args = {"benchmark": "toy", "num_views": 6, "ks": [2], "subsets": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        kviews.study_cells(**args)


def test_overrides_give_every_objective_and_k_the_same_budget() -> None:
    from fusebench import benchmarks

    ev = kviews.BUDGET["real"]["eval"]
    for cell in kviews.study_cells("multiview", 3, [2, 3], 1, 0):
        ov = kviews.study_overrides(cell, list(kviews.OBJECTIVES), 64, 7, 8, ev, 0, {"data": "d"})
        spec = benchmarks.load("multiview", overrides=ov)
        pt = spec.pretrain
        assert spec.name == cell.name and pt.grid == {} and pt.epochs == 7
        assert {spec.pretrain.settings(o).batch_size for o in kviews.OBJECTIVES} == {64}
        assert pt.objective_epochs == {} and pt.objective_micro_batch == {"m3g": 8}
        note = json.loads(spec.protocol_notes["kviews"])
        assert spec.protocol_notes["data"] == "d" and note["arm"] == cell.arm and note["k"] == cell.k
        if cell.arm == "views":
            assert spec.dataset.options["views"] == cell.views and note["permutation"] == cell.permutation
        else:
            assert spec.dataset.options["view_copies"] == cell.copies == note["view_copies"]


def test_run_study_refuses_rows_without_the_references(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must include the reference rows 'none' and 'raw'"):
        kviews.run_study(kviews.Study("multiview", objectives=("raw", "mv_infonce")), tmp_path, str(tmp_path))
    with pytest.raises(ValueError, match="at least one pretrained objective"):
        kviews.run_study(kviews.Study("multiview", objectives=("raw", "none")), tmp_path, str(tmp_path))
    with pytest.raises(ValueError, match="mv_infonse"):
        kviews.run_study(kviews.Study("multiview", objectives=("raw", "none", "mv_infonse")), tmp_path, str(tmp_path))
    # another reference row would be shown as a pretrained row (its width, "not selected" hyper-parameters)
    with pytest.raises(ValueError, match=r"the other reference row\(s\) \['raw_pca', 'raw_l2'\] are not part of it"):
        kviews.run_study(kviews.Study("multiview", objectives=("raw", "none", "raw_pca", "raw_l2", "mv_infonce")),
                         tmp_path, str(tmp_path))


# ---------------------------------------------------------------------------------------------
# a tiny study end to end
# ---------------------------------------------------------------------------------------------
def _views_mat(path: Path, n: int, widths: tuple[int, ...], seed: int, classes: int = 3) -> Path:
    """A multi-view .mat file (the ``X`` cell array of views, ``Y`` labels 1..classes) of ``n`` samples whose views
    of ``widths`` features carry the class in their means."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), n // classes)
    cell = np.empty((1, len(widths)), dtype=object)
    for v, d in enumerate(widths):
        cell[0, v] = rng.normal(size=(classes, d))[y] * 2 + rng.normal(size=(n, d))
    sio.savemat(path, {"X": cell, "Y": (y + 1).reshape(-1, 1)})
    return path


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("kviews")
    mat = _views_mat(tmp / "four.mat", 90, (5, 4, 6, 3), seed=0)
    runs = tmp / "runs"
    counts: dict[str, int] = {}
    args = dict(objectives=("raw", "none", "mv_infonce", "m3g"), seeds=(0, 1), ks=(2, 3), subsets=2, batch_size=16,
                epochs=1, m3g_micro_batch=4, eval_options={"l2_grid": [1.0], "cluster_on": "all", "n_init": 2,
                                                           "fewshot_shots": [1], "fewshot_draws": 2, "knn_grid": []})
    study = kviews.Study("multiview", **args)
    recs = kviews.run_study(study, runs, str(mat), counts=counts)
    md, png = kviews_board.render(runs, tmp / "board", "multiview")
    return runs, recs, counts, md, png, lambda c: kviews.run_study(study, runs, str(mat), counts=c)


def _records(runs: Path) -> dict[tuple[str, str, int], dict]:
    return {(p.parts[-4], p.parts[-3], int(p.parts[-2][4:])): json.loads(p.read_text())
            for p in runs.glob("multiview-kv-*/*/seed*/run.json")}


def _row(text: str, section: str, objective: str, arm: str) -> list[str]:
    part = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    line = next(l for l in part.splitlines() if l.startswith(f"| `{objective}` | {arm} |"))
    return [c.strip() for c in line.strip("|").split("|")][2:]


def test_tiny_study_runs_nested_cells_with_recorded_permutations(tiny_study) -> None:
    runs, recs, counts, _, _, _ = tiny_study
    cells = kviews.study_cells("multiview", 4, [2, 3], 2, 0)
    assert counts == {"reused": 0, "run": len(cells) * 4 * 2, "failed": 0} and len(recs) == counts["run"]
    got = _records(runs)
    assert {name for name, _, _ in got} == {c.name for c in cells}
    for (name, obj, seed), rec in got.items():
        note = json.loads(rec["config"]["protocol_notes"]["kviews"])
        j = int(name.rsplit("d", 1)[1])
        if "-views-" in name:
            perm = kviews.view_permutation(4, j, 0)
            k = int(re.search(r"-k(\d+)d", name)[1])
            assert note["permutation"] == perm and rec["config"]["dataset"]["options"]["views"] == sorted(perm[:k])
            assert rec["dataset"]["splits"]["views"] == sorted(perm[:k])
        else:
            vc = rec["config"]["dataset"]["options"]["view_copies"]
            assert vc == note["view_copies"] == rec["dataset"]["splits"]["view_copies"] and vc["seed"] == j
            assert rec["config"]["dataset"]["modalities"] == [f"copy{c}" for c in range(vc["copies"])]
    # the same budget for every pretrained run: 54 train samples (60% of 90), batches of 16, the last partial
    # batch dropped -> 3 steps, 48 samples, one epoch; the reference rows pretrain nothing
    for (name, obj, seed), rec in got.items():
        b = rec["budget"]
        if obj in ("raw", "none"):
            assert b["optimizer_steps"] == 0
        else:
            assert (b["optimizer_steps"], b["samples_seen"], b["batch_size"]) == (3, 48, 16)
            assert b["micro_batch"] == (4 if obj == "m3g" else None)


def test_tiny_study_board_numbers_are_the_paired_gaps_of_the_records(tiny_study) -> None:
    runs, _, _, md, png, _ = tiny_study
    text = md.read_text()
    got = _records(runs)
    assert png.exists() and png.stat().st_size > 5000

    def cells_of(arm: str, k: int) -> list[str]:
        return sorted({name for name, _, _ in got if name.startswith(f"multiview-kv-{arm}-k{k}d")})

    def stat(vals: list[float], signed: bool) -> str:  # mean ± sample std (n); every cell here has n = 4
        assert len(vals) == 4
        mean, std = 100 * float(np.mean(vals)), 100 * float(np.std(vals, ddof=1))
        return f"{mean:{'+' if signed else ''}.2f} ± {std:.2f} ({len(vals)})"

    for metric, label in (("fs1_best_acc", "1-shot test accuracy (the row's few-shot probe)"),
                          ("acc", "test accuracy (linear probe)"), ("cluster_acc", "clustering accuracy (k-means)")):
        for arm in ("views", "copies"):
            for ref in ("none", "raw"):
                for obj in ("mv_infonce", "m3g"):
                    want = []
                    for i, k in enumerate((2, 3)):
                        gaps = [values_of(got[(c, obj, s)]["metrics"])[metric] - values_of(got[(c, ref, s)]["metrics"])[metric]
                                for c in cells_of(arm, k) for s in (0, 1)]
                        want.append(stat(gaps, True))
                    assert _row(text, f"{label}: pretrained - `{ref}` (points)", obj, arm) == want
            values = [stat([values_of(got[(c, "raw", s)]["metrics"])[metric] for c in cells_of(arm, k) for s in (0, 1)], False)
                      for k in (2, 3)]
            assert _row(text, f"{label} (%)", "raw", arm) == values
    # the summary, on the primary metric: `none` at k = 2 -> 3 in the copies arm, and the budget sentence
    assert "## Summary (1-shot test accuracy (the row's few-shot probe), computed from the runs)" in text
    none = [100 * np.mean([values_of(got[(c, "none", s)]["metrics"])["fs1_best_acc"] for c in cells_of("copies", k)
                           for s in (0, 1)]) for k in (2, 3)]
    assert f"**copies** arm, k = 2 -> 3: `none` {none[0]:.2f} -> {none[1]:.2f}" in text
    assert "input width grows with k" in text and "first protocol" not in text
    widths = {r["config"]["encoder"]["config"]["num_features"] for r in got.values()}  # the spec's, as recorded
    assert len(widths) == 1 and f"input width grows with k ({widths.pop()} features per view for the encoder rows" in text
    pretrained = sum(1 for key in got if key[1] in ("mv_infonce", "m3g"))
    assert (f"all {pretrained} pretrained runs took the same budget: 3 optimiser steps on batches of 16 (1 epoch), "
            "48 training samples seen") in text
    assert "`m3g` computed its loss on micro-batches of 4" in text


def test_rerun_reuses_every_cell_and_render_only_cli(tiny_study, tmp_path: Path, capsys) -> None:
    runs, _, first, md, _, rerun = tiny_study
    counts: dict[str, int] = {}
    rerun(counts)
    assert counts == {"reused": first["run"], "run": 0, "failed": 0}
    board = tmp_path / "board"
    assert kviews_cli.main(["--benchmark", "multiview", "--render-only", "--out", str(runs), "--board", str(board),
                        "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert Path(out["markdown"]).read_text() == md.read_text()  # deterministic from the records


def test_render_without_new_records_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no run records of mv-handwritten-kv-<arm>-k<k>d<draw> .*run the study"):
        kviews_board.render(tmp_path, tmp_path / "b")
    for bad in ("../x", "a/b", ".hidden"):  # the benchmark names the files written: an id only, nothing written
        with pytest.raises(ValueError, match="is not an id"):
            kviews_board.render(tmp_path, tmp_path / "b", bad)
    assert not (tmp_path / "b").exists()
    legacy = ROOT / "leaderboards" / "runs-kviews"
    if legacy.is_dir() and any(kviews.LEGACY_CELL_NAME.match(p.name) for p in legacy.iterdir()):
        with pytest.raises(ValueError, match=r"of the superseded design .* rerun `fusebench study kviews`"):
            kviews_board.render(legacy, tmp_path / "b")


def test_an_interrupted_render_leaves_the_pair_as_it_was_and_the_next_render_removes_its_leftovers(
        tmp_path: Path, monkeypatch) -> None:
    """The markdown used to be written before the plot was drawn: Ctrl-C (or a crash) while drawing left a new .md
    beside the old .png, or, on a first render, a .md whose plot link is broken. Both are now written to temporary
    files and renamed into place once both are whole."""
    import os
    import time

    from fusebench.leaderboard.writer import STALE_TEMP_S

    runs = ROOT / "leaderboards" / "runs-kviews"
    if not any(kviews.CELL_NAME.match(p.name) for p in runs.iterdir()):
        pytest.skip(f"no k-views run records of the current design under {runs}")
    md, png = "mv-handwritten-kviews.md", "mv-handwritten-kviews.png"

    def interrupted(*args, **kwargs):  # the plot is drawn once the markdown's text is complete
        raise KeyboardInterrupt

    # a first render interrupted: neither file appears, no temporary file is left
    fresh = tmp_path / "fresh"
    monkeypatch.setattr(kviews_board, "_plot", interrupted)
    with pytest.raises(KeyboardInterrupt):
        kviews_board.render(runs, fresh)
    assert sorted(p.name for p in fresh.iterdir()) == []
    # a render over an existing pair interrupted: the pair keeps its bytes
    board = tmp_path / "board"
    board.mkdir()
    (board / md).write_text("old board\n")
    (board / png).write_bytes(b"old plot")
    with pytest.raises(KeyboardInterrupt):
        kviews_board.render(runs, board)
    assert sorted(p.name for p in board.iterdir()) == [md, png]
    assert (board / md).read_text() == "old board\n" and (board / png).read_bytes() == b"old plot"
    monkeypatch.undo()
    # what a killed render (SIGKILL: nothing cleans up) left: removed by the next render once older than
    # STALE_TEMP_S; a young one may be a concurrent render's and stays
    old = time.time() - STALE_TEMP_S - 60
    stale = [board / f".{md}.k1ll3d.tmp", board / f".{png}.k1ll3d.tmp"]
    for p in stale:
        p.write_bytes(b"partial")
        os.utime(p, (old, old))
    young = board / f".{png}.l1v3.tmp"
    young.write_bytes(b"partial")
    got = kviews_board.render(runs, board)
    assert got == (board / md, board / png)
    assert sorted(p.name for p in board.iterdir()) == sorted([md, png, young.name])
    assert (board / md).read_bytes() == (ROOT / "leaderboards" / md).read_bytes()  # the committed board
    assert (board / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({png})" in (board / md).read_text()


# ---------------------------------------------------------------------------------------------
# hyper-parameters: chosen once on validation in the selection cell, used in every other cell
# ---------------------------------------------------------------------------------------------
def test_the_study_selects_once_in_the_full_view_cell_and_every_cell_uses_the_choice(tmp_path: Path) -> None:
    mat = _views_mat(tmp_path / "three.mat", 60, (5, 4, 6), seed=1)
    runs = tmp_path / "runs"
    grid = [0.1, 1.0]
    study = kviews.Study("multiview", objectives=("raw", "none", "mv_infonce", "m3g"), seeds=(0,), ks=(2, 3),
                         subsets=1, arms=("views", "copies"), batch_size=16, epochs=1, m3g_micro_batch=4,
                         eval_options={"l2_grid": [1.0], "cluster_on": "all", "n_init": 1, "fewshot_shots": [1],
                                       "fewshot_draws": 2, "knn_grid": []},
                         extra_overrides={"pretrain.per_objective.mv_infonce.grid": {"tau": grid},
                                          "pretrain.per_objective.m3g.grid": {},  # one objective without a grid
                                          "pretrain.selection_seeds": [1000, 1001]})
    kviews.run_study(study, runs, str(mat))
    chooser = "multiview-kv-views-k3d0"  # the largest k of the first arm, first draw: all three views
    assert kviews.selection_cell(kviews.study_cells("multiview", 3, [2, 3], 1, 0)).name == chooser
    # the trials ran once, in that cell only: one per grid point and selection seed
    trials = sorted(p.relative_to(runs / ".selection").parts[:3] + (p.parts[-2],)
                    for p in (runs / ".selection").rglob("run.json"))
    assert trials == [(chooser, "mv_infonce", f"trial{i}-tau{t}", f"seed{s}")
                      for i, t in enumerate(grid) for s in (1000, 1001)]
    # the choice: the best mean validation fs1_best_acc of the two seeds, worked out here from the trials
    means = []
    for i, t in enumerate(grid):
        vals = [json.loads(p.read_text())["selection"]["val_metrics"]["fs1_best_acc"]
                for p in (runs / ".selection" / chooser / "mv_infonce").glob(f"trial{i}-*/**/run.json")]
        assert len(vals) == 2
        means.append(sum(vals) / 2)
    best = grid[max(range(len(grid)), key=lambda i: (means[i], -i))]
    frozen = json.loads((runs / chooser / "_selection" / "mv_infonce.json").read_text())
    assert frozen["choice"] == {"tau": best}
    recs = _records(runs)
    assert {name for name, _, _ in recs} == {c.name for c in kviews.study_cells("multiview", 3, [2, 3], 1, 0)}
    for (name, obj, seed), rec in recs.items():
        note = rec["config"]["protocol_notes"]["hparams"]
        if obj == "mv_infonce":
            assert rec["hparams"] == {"tau": best}, name
            assert (rec.get("hparam_selection") is not None) == (name == chooser), name
        if obj == "m3g":
            assert rec["hparams"] == {"eps": 0.2}  # no grid: the spec's own, in every cell
        if name == chooser:
            assert note.startswith("each objective with a grid: chosen once on validation in this cell"), note
            assert "(an objective without a grid: the spec's values)" in note, note  # m3g: not chosen here
        else:
            assert f"in cell {chooser}" in note and f"mv_infonce tau={best}" in note, note
            assert rec["config"]["pretrain"]["grid"] == {} and rec["config"]["pretrain"]["selection_seeds"] == []
    # the board says which values every run used and where they were chosen
    text = kviews_board.render(runs, tmp_path / "board", "multiview")[0].read_text()
    n = {o: sum(1 for (_, oo, _) in recs if oo == o) for o in ("mv_infonce", "m3g")}
    assert (f"`mv_infonce` tau = {best} in all {n['mv_infonce']} runs, chosen on validation in `{chooser}`"
            in text), text
    assert f"`m3g` eps = 0.2 in all {n['m3g']} runs, not selected on validation (the spec's values)" in text
    # the selection cell's records of mv_infonce gone: the other cells' note still says where its value was chosen
    import shutil

    shutil.copytree(runs, tmp_path / "partial")
    shutil.rmtree(tmp_path / "partial" / chooser / "mv_infonce")
    text = kviews_board.render(tmp_path / "partial", tmp_path / "board2", "multiview")[0].read_text()
    assert (f"`mv_infonce` tau = {best} in all {n['mv_infonce'] - 1} runs, chosen on validation in `{chooser}` (the "
            "other cells' protocol note; that cell's records of it are not here)") in text, text
    assert f"`m3g` eps = 0.2 in all {n['m3g']} runs, not selected on validation (the spec's values)" in text
    # without selection the spec's default in every cell, and no trial
    plain = kviews.Study(**{**study.__dict__, "select": False, "extra_overrides": None, "arms": ("views",)})
    kviews.run_study(plain, tmp_path / "plain", str(mat))
    assert not (tmp_path / "plain" / ".selection").exists()
    assert {r["hparams"]["tau"] for (_, o, _), r in _records(tmp_path / "plain").items() if o == "mv_infonce"} == {0.2}


def test_an_objective_the_selection_cell_cannot_run_is_refused_before_any_work(tmp_path: Path) -> None:
    # the 2-view matching gap runs at k = 2 but not in the k = 3 selection cell: its grid would never be searched
    mat = _views_mat(tmp_path / "three.mat", 60, (5, 4, 6), seed=1)
    study = kviews.Study("multiview", objectives=("raw", "none", "matching_gap"), seeds=(0,), ks=(2, 3), subsets=1,
                         arms=("views",), batch_size=16, epochs=1,
                         extra_overrides={"pretrain.per_objective.matching_gap.grid": {"eps": [0.1, 1.0]}})
    with pytest.raises(ValueError, match="matching_gap cannot run in the selection cell multiview-kv-views-k3d0"):
        kviews.run_study(study, tmp_path / "runs", str(mat))
    assert not (tmp_path / "runs").exists()


def test_a_grid_the_other_cells_would_keep_and_an_empty_study_are_refused_before_any_work(tmp_path: Path) -> None:
    """A grid given in a nested form of ``extra_overrides`` (not the flat keys the selection cell takes over) would
    stay in every cell after the selection cell, where the chosen values and the grid conflict: refused when the
    study is planned, before any run (the selection cell's trials included). A study with no cell (no k >= 2) is one
    ValueError, not an IndexError."""
    mat = _views_mat(tmp_path / "three.mat", 60, (5, 4, 6), seed=1)
    runs = tmp_path / "runs"
    study = kviews.Study("multiview", objectives=("raw", "none", "mv_infonce"), seeds=(0,), ks=(2, 3), subsets=1,
                         arms=("views",), batch_size=16, epochs=1,
                         extra_overrides={"pretrain.per_objective.mv_infonce": {"grid": {"tau": [0.1, 1.0]}},
                                          "pretrain.selection_seeds": [1000, 1001]})
    with pytest.raises(ValueError, match=r"leave a grid for mv_infonce in cell multiview-kv-views-k2d0, which only "
                                         r"the selection cell multiview-kv-views-k3d0 searches"):
        kviews.run_study(study, runs, str(mat))
    assert not runs.exists() or not any(runs.rglob("run.json"))
    with pytest.raises(ValueError, match="the study has no cell"):
        kviews.selection_cell([])
