"""The convergence tally of the Sinkhorn objectives (fusebench.objectives.solver_tally): counted per call, taken into
a run's per-epoch curves, kept across a resume, shown on the board and in its JSON. The expected counts are worked
out independently: from the solver's own per-call ``stats`` and from the warnings it emits for each call that hit
``max_iter``."""

from __future__ import annotations

import json
import math
from decimal import ROUND_UP, Decimal
import warnings
from pathlib import Path

import pytest
import torch

from fusebench import benchmarks, objectives
from fusebench.cells.execute import run_cell
from fusebench.engine.cell import check_checkpoint
from fusebench.engine.loop import RunError
from fusebench.objectives.solver_tally import CURVES, SolverTally, tally_of
from fusebench.spec.request import CellRequest, RunOptions

#: quickstart, tiny: 128 samples (2 batches of 64 per epoch), 3 epochs; M3G at a small eps with few iterations, so
#: some solves stop at max_iter
TINY = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 3, "pretrain.batch_size": 64,
        "downstream.epochs": 2, "downstream.batch_size": 64, "checkpoint_every": 1,
        "pretrain.per_objective.m3g.hparams": {"eps": 0.005, "max_iter": 3}}


def test_the_tally_by_hand() -> None:
    t = SolverTally()
    for converged, err in [(1.0, 1e-4), (0.0, 0.03), (1.0, 5e-4), (0.0, 0.01), (0.0, math.nan)]:
        t.add({"converged": converged, "marginal_error": err})
    assert t.state_dict() == {"calls": 5, "not_converged": 3, "worst": 0.03}  # NaN: counted, never the worst
    assert t.take() == {"solver_calls": 5.0, "solver_not_converged": 3.0, "solver_worst_marginal_error": 0.03}
    assert t.state_dict() == {"calls": 0, "not_converged": 0, "worst": 0.0}  # taken: counting starts again
    t.load_state_dict({"calls": 7, "not_converged": 2, "worst": 0.5})
    assert t.take()["solver_calls"] == 7.0
    assert set(CURVES) == {"solver_calls", "solver_not_converged", "solver_worst_marginal_error"}


@pytest.mark.parametrize("state, key", [({"calls": -1, "not_converged": 0, "worst": 0.0}, "calls"),
                                        ({"calls": 1.0, "not_converged": 0, "worst": 0.0}, "calls"),
                                        ({"calls": 1, "worst": 0.0}, "not_converged"),
                                        ({"calls": 1, "not_converged": 0, "worst": math.inf}, "worst"),
                                        ({"calls": 1, "not_converged": 0, "worst": True}, "worst"),
                                        ({"calls": 1, "not_converged": 2, "worst": 0.0}, "exceeds")])
def test_a_bad_saved_tally_is_refused(state: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        SolverTally().load_state_dict(state)


@pytest.mark.parametrize("name, kwargs, k", [
    ("m3g", {"eps": 0.01, "max_iter": 6}, 3),  # the Gram-domain path (auto), stopped early
    ("m3g", {"eps": 0.01, "max_iter": 6, "backend": "eager"}, 3),
    ("m3g", {"eps": 0.01, "max_iter": 6, "solver": "reference"}, 3),  # the dense reference solver
    ("m3g", {"eps": 0.5}, 3),  # converges
    ("matching_gap", {"eps": 0.01, "max_iter": 4}, 2),
    ("matching_gap", {"eps": 0.5}, 2),
])
def test_every_solver_path_counts_its_calls(name: str, kwargs: dict, k: int) -> None:
    loss = objectives.build(name, **kwargs)
    torch.manual_seed(0)
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            v = torch.randn(k, 12, 6, requires_grad=True)
            loss(v).backward()
            seen.append((loss.stats["converged"], loss.stats["marginal_error"]))
    hit = [w for w in caught if "hit max_iter" in str(w.message)]
    tally = tally_of(loss)
    assert tally is not None
    assert tally.calls == 4
    assert tally.not_converged == sum(1 for c, _ in seen if not c) == len(hit)
    assert tally.worst == max(e for _, e in seen)
    assert (tally.not_converged == 4) == ("max_iter" in kwargs)


def test_the_largest_error_is_shown_on_its_side_of_the_tolerance() -> None:
    from fusebench.leaderboard.columns import shown_bound

    # every call converged (error < tol): rounded down, never shown as the tolerance
    assert shown_bound(0.0009996076) == "0.000999"  # tol = 0.001
    assert shown_bound(0.0319421) == "0.0319"
    assert shown_bound(0.25) == "0.25" and shown_bound(0.0) == "0" and shown_bound(1.0) == "1"
    assert shown_bound(0.3) == "0.3" and shown_bound(0.07) == "0.07"  # not 0.299 / 0.0699 by a float quotient
    # some call stopped at max_iter (error >= tol): rounded up, never shown below or at the tolerance it exceeds
    assert shown_bound(0.001006817213150227, up=True) == "0.00101"  # mv-scene15's M3G eps 0.02 trials, tol 0.001
    assert shown_bound(0.03194212798964305, up=True) == "0.032"  # 0.0320: the next 3-digit value above
    assert shown_bound(0.0018968008225783706, up=True) == "0.0019"
    assert shown_bound(0.09995, up=True) == "0.1"  # the carry into the next decade
    assert shown_bound(0.07, up=True) == "0.07" and shown_bound(0.3, up=True) == "0.3"  # exact: not 0.0701 / 0.301
    assert shown_bound(0.001, up=True) == "0.001" and shown_bound(0.0, up=True) == "0"
    assert shown_bound(5e-324) == shown_bound(5e-324, up=True) == "4.94e-324"  # a subnormal: no division by 0


def test_objectives_without_a_solver_have_no_tally() -> None:
    assert tally_of(objectives.build("infonce_pwe")) is None
    assert tally_of(object()) is None


def _up3(x: float) -> str:
    """``x`` rounded up to 3 significant digits in decimal arithmetic."""
    return f"{float(Decimal(repr(x)).quantize(Decimal(1).scaleb(math.floor(math.log10(x)) - 2), ROUND_UP)):.3g}"


def _run(tmp: Path, **options) -> dict:
    spec = benchmarks.load("quickstart", overrides=TINY)
    return run_cell(CellRequest(spec, "m3g", 0, tmp), RunOptions(progress=False, **options))


@pytest.mark.slow  # ~10 s: two tiny M3G cells
@pytest.mark.filterwarnings("ignore:.*hit max_iter")
def test_a_cell_records_its_solver_per_epoch_and_a_resume_counts_the_same(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = _run(tmp_path / "a")
    hit = sum(1 for w in caught if "hit max_iter" in str(w.message))
    curves = ref["curves"]
    steps = len(curves["pretrain_loss"])
    assert steps == 3 * 2  # 3 epochs of 2 batches
    assert len(curves["solver_calls"]) == len(curves["solver_not_converged"]) == 3  # one entry per epoch
    assert curves["solver_calls"] == [2.0, 2.0, 2.0]  # one solve per step: no micro-batches
    assert sum(curves["solver_not_converged"]) == hit > 0
    assert all(0 < e for e in curves["solver_worst_marginal_error"])

    # killed after 3 steps, in the middle of the second epoch, then resumed
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "b", max_steps=3)
    ckpt = torch.load(tmp_path / "b" / "quickstart" / "m3g" / "seed0" / "last.pt", weights_only=True)
    assert ckpt["solver_tally"]["calls"] == 1  # the second epoch's first step, not yet taken
    resumed = _run(tmp_path / "b", resume=True)
    for key in CURVES:
        assert resumed["curves"][key] == curves[key]

    # a damaged saved tally is one error naming the key, and the checkpoint is left as it was
    bad = dict(ckpt, solver_tally={"calls": 1, "not_converged": 5, "worst": 0.0})
    with pytest.raises(RunError, match="solver_tally"):
        check_checkpoint(tmp_path / "last.pt", bad)


@pytest.mark.slow  # ~8 s: one tiny M3G cell and a board
@pytest.mark.filterwarnings("ignore:.*hit max_iter")
def test_the_board_says_how_many_solves_did_not_converge(tmp_path: Path) -> None:
    from fusebench.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec = _run(tmp_path / "runs")
    calls = int(sum(rec["curves"]["solver_calls"]))
    missed = int(sum(rec["curves"]["solver_not_converged"]))
    worst = max(rec["curves"]["solver_worst_marginal_error"])
    assert main(["leaderboard", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "lb"),
                 "--format", "md", "json"]) == 0
    md = (tmp_path / "lb" / "quickstart.md").read_text()
    assert "**Solver did not converge**" in md
    assert missed > 0  # the largest error is shown rounded up: some calls stopped at max_iter (error >= tol)
    assert f"`m3g` {missed:,} of {calls:,} calls (largest marginal error {_up3(worst)})" in md
    row = json.loads((tmp_path / "lb" / "quickstart.json").read_text())["groups"][0]["rows"][0]
    assert row["objective"] == "m3g"
    assert row["solver"]["calls"] == calls == 6 and row["solver"]["not_converged"] == missed
    assert row["solver"]["runs"] == row["solver"]["of"] == 1


@pytest.mark.slow  # ~15 s: a 2-point eps grid on 2 selection seeds, one evaluation cell, a board
@pytest.mark.filterwarnings("ignore:.*hit max_iter")
def test_the_selection_counts_its_trials_solves_and_the_board_names_the_points_that_did_not_converge(
        tmp_path: Path) -> None:
    import fusebench
    from fusebench.cli import main
    from fusebench.sweep import selection

    eps = [0.005, 5.0]  # with max_iter = 3: the small eps stops at max_iter; at eps 5 the plan is near-uniform
    overrides = {**TINY, "pretrain.per_objective.m3g.hparams": {"max_iter": 3},
                 "pretrain.grid": {"m3g": {"eps": eps}}, "pretrain.selection_seeds": [1000, 1001]}
    out = tmp_path / "runs"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec, = fusebench.run("quickstart", objective="m3g", seeds=[0], out=out, overrides=overrides, progress=False)
    frozen = json.loads((out / "quickstart" / "_selection" / "m3g.json").read_text())
    assert rec["hparam_selection"]["scores"] == frozen["scores"]
    # each point's tally, summed here from its two trials' records
    expected = []
    for i, e in enumerate(eps):
        calls = missed = 0
        worst = 0.0
        for seed in (1000, 1001):
            trial, = (out / ".selection" / "quickstart" / "m3g").glob(f"trial{i}-*/seed{seed}/**/run.json")
            curves = json.loads(trial.read_text())["curves"]
            calls += sum(curves["solver_calls"])
            missed += sum(curves["solver_not_converged"])
            worst = max([worst, *curves["solver_worst_marginal_error"]])
        expected.append({"calls": int(calls), "not_converged": int(missed), "worst_marginal_error": worst})
    assert [s["solver"] for s in frozen["scores"]] == expected
    assert expected[0]["calls"] == 2 * 6 and expected[0]["not_converged"] > 0  # 2 seeds x 3 epochs x 2 steps
    chosen = frozen["scores"][[e["hparams"] for e in frozen["scores"]].index(frozen["choice"])]["solver"]
    line = selection.selection_line(frozen, out / "quickstart" / "_selection" / "m3g.json")
    assert (f"its trials' Sinkhorn solves stopped at max_iter in {chosen['not_converged']:,} of {chosen['calls']:,} "
            "calls" in line) == (chosen["not_converged"] > 0), line
    assert main(["leaderboard", "--runs", str(out), "--out", str(tmp_path / "lb"), "--format", "md"]) == 0
    md = (tmp_path / "lb" / "quickstart.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("**Selection trials' solver did not converge**"))
    chosen = frozen["choice"]["eps"]
    converged = sum(t["not_converged"] == 0 for t in expected)
    assert (f"every call of its other {converged} grid point(s) converged" in line) == (0 < converged < len(eps))
    for e, t in zip(eps, expected):
        shown = f"eps = {e}: {t['not_converged']:,} of {t['calls']:,} calls"
        assert (shown in line) == (t["not_converged"] > 0), line
        segment = line.split(shown)[1].split(";")[0] if shown in line else ""
        assert (segment.startswith(" (largest marginal error") and ", the chosen point" in segment
                ) == (t["not_converged"] > 0 and e == chosen), line
        if t["not_converged"]:  # above the tolerance: rounded up
            assert segment.startswith(f" (largest marginal error {_up3(t['worst_marginal_error'])})"), line


def test_a_bad_solver_tally_in_a_selection_score_is_refused() -> None:
    from fusebench.records.schema import RecordError, _validate_selection_score

    good = {"hparams": {"eps": 0.1}, "val": 0.5,
            "solver": {"calls": 4, "not_converged": 1, "worst_marginal_error": 0.01}}
    _validate_selection_score(good, "run.json", "hparam_selection.scores[0]")
    for bad, key in [({"calls": 4, "not_converged": 5, "worst_marginal_error": 0.0}, "not_converged"),
                     ({"calls": -1, "not_converged": 0, "worst_marginal_error": 0.0}, "calls"),
                     ({"calls": 4, "not_converged": 1.0, "worst_marginal_error": 0.0}, "not_converged"),
                     ({"calls": 4, "not_converged": 1, "worst_marginal_error": float("nan")}, "worst_marginal_error"),
                     ({"calls": 4, "not_converged": 1}, "worst_marginal_error")]:
        with pytest.raises(RecordError, match=rf"hparam_selection\.scores\[0\]\.solver\.{key}"):
            _validate_selection_score({**good, "solver": bad}, "run.json", "hparam_selection.scores[0]")
