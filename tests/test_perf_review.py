"""`fusebench bench ...`: what each bench prints (the machine it measured on, the settings, the ratios of the
same run) and the options it refuses rather than ignores. No assertion here reads a timing's value."""

from __future__ import annotations

import pytest


def _objectives_no_run(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every table `fusebench bench objectives` could start is recorded instead of measured."""
    from fusebench.perf import crossover, objectives, step_time, vs_ott

    started: list = []
    monkeypatch.setattr(step_time, "run", lambda ns: started.append(("step", ns)) or 0)
    monkeypatch.setattr(crossover, "run", lambda ns: started.append(("crossover", ns)) or 0)
    monkeypatch.setattr(vs_ott, "run", lambda ns: started.append(("vs", ns)) or 0)
    monkeypatch.setattr(objectives, "bench_pairwise", lambda *a: started.append(("pairwise", a)) or [])
    monkeypatch.setattr(objectives, "_run", lambda ns, names: started.append(("tables", ns)) or 0)
    return started


@pytest.mark.parametrize("argv, said", [
    (["--vs", "ott", "--quick", "--k", "3"], "--k and --quick: --vs ott --quick runs its own configurations"),
    (["--vs", "ott", "--quick", "--n", "8", "--eps", "0.1"], "--n, --eps and --quick"),
    (["--quick", "--repeats", "3"], "--repeats 3 and --quick: --quick times 1 call per cell"),
    (["--pairwise", "--quick", "--repeats", "3"], "--repeats 3 and --quick"),
    (["--step-time", "--quick", "--rounds", "5"], "--rounds 5 and --quick: --quick only sets --step-time's default"),
])
def test_bench_objectives_quick_refuses_the_options_it_would_override(argv: list[str], said: str, monkeypatch,
                                                                       capsys) -> None:
    """--quick ran its own configurations / counts and dropped --k, --n, --eps (--vs ott), --repeats (the default
    tables, --pairwise) without a word; with --step-time and --rounds it was --quick that changed nothing."""
    from fusebench.perf import objectives

    started = _objectives_no_run(monkeypatch)
    with pytest.raises(SystemExit) as e:
        objectives.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and said in err and err.count("error:") == 1, err
    assert started == []


@pytest.mark.parametrize("argv, kind, check", [
    (["--vs", "ott", "--quick"], "vs", lambda ns: ns.k is None and ns.quick),
    (["--vs", "ott", "--k", "3", "--n", "8"], "vs", lambda ns: ns.k == [3] and ns.n == [8]),
    (["--quick", "--only", "infonce_pwe"], "tables", lambda ns: ns.quick),
    (["--repeats", "3", "--only", "infonce_pwe"], "tables", lambda ns: ns.repeats == 3),
    (["--step-time", "--quick"], "step", lambda ns: ns.rounds == 30),
    (["--step-time", "--rounds", "4"], "step", lambda ns: ns.rounds == 4),
    (["--crossover", "--quick"], "crossover", lambda ns: ns.quick),
])
def test_bench_objectives_quick_alone_or_the_counts_alone_still_run(argv, kind, check, monkeypatch) -> None:
    from fusebench.perf import objectives

    started = _objectives_no_run(monkeypatch)
    assert objectives.main(argv) == 0
    assert [k for k, _ in started] == [kind] and check(started[0][1])


def test_bench_objectives_pairwise_prints_the_machine(monkeypatch, capsys) -> None:
    """The --pairwise table printed its two solvers' times with no line saying which machine they came from."""
    from fusebench.machine import cpu_model
    from fusebench.perf import objectives

    monkeypatch.setattr(objectives, "bench_pairwise", lambda repeats: ["| k | n |"])
    assert objectives.main(["--pairwise", "--quick"]) == 0
    out = capsys.readouterr().out
    assert f"CPU: {cpu_model()}" in out and "torch threads: 1" in out, out


def test_bench_cells_repeat_alternates_and_gives_medians_and_the_ratio_range(tmp_path, monkeypatch, capsys) -> None:
    """One run per checkout made the new / old ratio one noisy sample, and the table named no machine. With
    --repeat the checkouts alternate (old, new, new, old) and the ratio is that of the medians, the per-round
    ratios' range beside it; the values below are worked out by hand."""
    from fusebench.machine import cpu_model
    from fusebench.perf import cells

    old = tmp_path / "old"
    (old / "fusebench").mkdir(parents=True)
    (old / "fusebench" / "__init__.py").write_text("")
    cpu = {"old": iter([2.0, 4.0]), "new": iter([1.0, 3.0])}
    order: list[str] = []

    def fake_run(root, args, out, threads):
        label = "new" if root is None else "old"
        order.append(label)
        return {"cpu_s": next(cpu[label]), "wall_s": 9.0, "records": {"quickstart/x/seed0/run.json": {"acc": 0.5}}}

    monkeypatch.setattr(cells, "run_case", fake_run)
    assert cells.main(["--old", str(old), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert order == ["old", "new", "new", "old"]
    assert f"machine: {cpu_model()}; " in out and "median of 2 runs per checkout" in out, out
    # medians: old (2 + 4) / 2 = 3.0, new (1 + 3) / 2 = 2.0; ratio 2 / 3; per round 1 / 2 = 0.50 and 3 / 4 = 0.75
    assert "| quickstart cell | 3.0 (9.0) | 2.0 (9.0) | 1 / 1 | 0.67 (0.50-0.75) | yes |" in out, out


def test_bench_cells_a_failed_run_is_one_error_not_a_traceback(monkeypatch, capsys) -> None:
    from fusebench.perf import cells

    def failing(root, args, out, threads):
        raise RuntimeError("python -m fusebench run quickstart ... failed (2):\nfusebench run: boom")

    monkeypatch.setattr(cells, "run_case", failing)
    assert cells.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusebench bench cells: python -m fusebench run quickstart") and "boom" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, said", [(["--repeat", "0"], "--repeat must be >= 1, got 0"),
                                        (["--data-root", "EMPTY"], "holds no HW2sources.mat")])
def test_bench_cells_bad_repeat_or_a_data_root_without_the_file_is_refused_before_any_run(argv, said, tmp_path,
                                                                                         monkeypatch, capsys) -> None:
    from fusebench.perf import cells

    started: list = []
    monkeypatch.setattr(cells, "run_case", lambda *a: started.append(a))
    with pytest.raises(SystemExit) as e:
        cells.main([str(tmp_path) if a == "EMPTY" else a for a in argv])
    assert e.value.code == 2 and said in capsys.readouterr().err and started == []


@pytest.mark.parametrize("matched, code", [(True, 0), (False, 1)])
def test_bench_leaderboard_checks_that_its_warm_runs_met_the_manifest(matched: bool, code: int, tmp_path,
                                                                      monkeypatch, capsys) -> None:
    """The warm row was labelled 'the manifest matches' without looking: a warm run that re-read every record
    (an input changed while the bench ran: fusebench's code, a record) was timed and printed as the manifest's
    figure against the issue's 1 s target. The timed commands' output now says which it was."""
    from fusebench.perf import leaderboard as perf_leaderboard

    boards = tmp_path / "boards"
    (boards / "runs").mkdir(parents=True)
    said_by_warm = ("unchanged x\n0 file(s) written, 1 unchanged in x (records, ...: nothing re-read; --force "
                    "regenerates)\n" if matched else "wrote x\n1 file(s) written, 0 unchanged in x\n")
    calls: list[list[str]] = []

    def fake_run(cmd, env, cwd, said=None):
        calls.append(cmd)
        if said is not None:
            said.append(said_by_warm)
        return 0.5

    monkeypatch.setattr(perf_leaderboard, "_run", fake_run)
    assert perf_leaderboard.main(["--boards", str(boards), "--skip-cold", "--repeat", "2"]) == code
    out, err = capsys.readouterr()
    assert ("did not match" in err) == (not matched), err
    warm_row = next(line for line in out.splitlines() if line.startswith("| warm (unchanged runs"))
    assert ("the manifest did not match in 2 of 2" in warm_row) == (not matched), warm_row


def test_bench_leaderboard_a_failed_regeneration_is_one_error(tmp_path, monkeypatch, capsys) -> None:
    from fusebench.perf import leaderboard as perf_leaderboard

    boards = tmp_path / "boards"
    (boards / "runs").mkdir(parents=True)

    def failing(cmd, env, cwd, said=None):
        raise RuntimeError("python -m fusebench leaderboard ... exited with 2:\nfusebench leaderboard: bad record")

    monkeypatch.setattr(perf_leaderboard, "_run", failing)
    assert perf_leaderboard.main(["--boards", str(boards), "--skip-cold"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusebench bench leaderboard: python -m fusebench leaderboard") and "Traceback" not in err
    assert not list(tmp_path.glob("fusebench-bench-leaderboard-*"))


def test_bench_data_prints_the_machine(monkeypatch, capsys) -> None:
    """Its samples/s against the issue's targets (stated for 2 cores) came with the torch threads alone, no CPU."""
    import os

    from fusebench.machine import cpu_model
    from fusebench.perf import data as perf_data

    monkeypatch.setattr(perf_data, "bench_adapter", lambda *a: {"id": "quickstart", "error": "not measured here"})
    assert perf_data.main(["--datasets", "quickstart", "--quick"]) == 1  # a row not measured: exit 1
    out = capsys.readouterr().out
    assert f"machine: {cpu_model()}; {os.cpu_count()} logical cores" in out, out


def test_bench_gpu_issue_table_gives_the_precisions_ratios_of_the_same_run() -> None:
    """The precisions were timed side by side with no ratio printed: a reader divided figures by hand (or against
    another run's). Rows made by hand: 8 ms at fp32, 6 ms at TF32, 2 ms at bf16 -> 0.75 and 0.25."""
    from fusebench.perf import gpu

    def row(prec: str, ms: float) -> dict:
        return {"encoder": "esanet", "batch": 8, "precision": prec, "step_ms": ms, "tflops": 1.0, "peak_mib": 10.0}

    text = gpu.format_issue_table([row("32", 8.0), row("tf32", 6.0), row("bf16-mixed", 2.0)])
    header = [c.strip() for c in text.splitlines()[0].strip("|").split("|")]
    cells = dict(zip(header, [c.strip() for c in text.splitlines()[2].strip("|").split("|")]))
    assert (cells["TF32 / fp32"], cells["bf16 / fp32"]) == ("0.75", "0.25"), cells
    # without an fp32 row there is nothing to divide by
    text = gpu.format_issue_table([row("bf16-mixed", 2.0)])
    cells = dict(zip(header, [c.strip() for c in text.splitlines()[2].strip("|").split("|")]))
    assert cells["bf16 / fp32"] == "—" and cells["TF32 / fp32"] == "—"


def test_bench_gpu_exits_1_when_a_row_was_not_measured(monkeypatch, capsys) -> None:
    """A row that failed (e.g. out of memory) was a line in the table and exit status 0, as if all were measured."""
    from fusebench.perf import gpu

    def oom(name, *a, **k):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(gpu, "bench_row", oom)
    assert gpu.main(["--device", "cpu", "--small", "--encoders", "eeg_conv", "--precision", "32"]) == 1
    out, err = capsys.readouterr()
    assert "not measured: RuntimeError: CUDA out of memory" in out
    assert err == "fusebench bench gpu: 1 of 1 row(s) not measured: eeg_conv batch 2 32\n"


@pytest.mark.parametrize("argv, said", [
    (["--vs", "ott", "--block-sweeps", "4"], "--block-sweeps set(s) our GPU solver"),
    (["--vs", "ott", "--no-graphs"], "--no-graphs set(s) our GPU solver"),
    (["--vs", "ott", "--device", "cpu", "--block-sweeps", "4", "--no-graphs"], "--block-sweeps, --no-graphs set(s)"),
    (["--vs", "ott", "--threads", "2", "--no-pin"], "--no-pin: the process is pinned to one CPU only"),
])
def test_bench_vs_ott_options_a_cpu_run_does_not_use_are_refused(argv: list[str], said: str, monkeypatch,
                                                                 capsys) -> None:
    """--block-sweeps / --no-graphs only set the blocked GPU solver (the CPU keeps the per-sweep loop), and
    --no-pin only undoes a pin made at one thread on the CPU: elsewhere they were accepted and changed nothing."""
    from fusebench.perf import objectives

    started = _objectives_no_run(monkeypatch)
    with pytest.raises(SystemExit) as e:
        objectives.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and said in err, err
    assert started == []


def test_bench_vs_ott_no_pin_at_one_cpu_thread_still_runs(monkeypatch) -> None:
    from fusebench.perf import objectives

    started = _objectives_no_run(monkeypatch)
    assert objectives.main(["--vs", "ott", "--no-pin", "--k", "3", "--n", "8"]) == 0
    assert started[0][0] == "vs" and started[0][1].no_pin and started[0][1].threads == 1
