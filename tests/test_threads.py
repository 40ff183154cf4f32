"""Issue #32, item 1: no thread trap. The threads of a cell are chosen by one pure function,
``threads_for(cpus_allowed, workers, model_kind, env)``, checked here for given CPU allowances (affinity
sets, cgroup v2 / v1 quota strings, SLURM and torchrun variables) against counts worked out by hand;
a cell computes with the number chosen (restored after), says it on its start line, and its results do
not depend on it (a cell at 1 and at 2 threads gives the same record numbers)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import fusebench
from fusebench.cli import main
from fusebench.cells import execute
from fusebench.typed import ConfigError
from fusebench.engine.threads import (LARGE, SMALL, CpuAllowance, allowed_cpus, model_kind, quota_cpus,
                                        read_allowance, thread_plan, threads_for)

TINY = {"pretrain.epochs": 1, "downstream.epochs": 1, "dataset.synthetic_spec": {"num_samples": 128, "seed": 0}}
#: TINY for runs of reference rows only: they read no pretrain.* setting, and one given to them is refused
TINY_REF = {k: v for k, v in TINY.items() if not k.startswith("pretrain.")}
NO_ENV: dict[str, str] = {}


def aff(n: int) -> CpuAllowance:
    return CpuAllowance(affinity=frozenset(range(n)))


@pytest.mark.parametrize("cpus, workers, kind, env, want", [
    # a small model: one thread whatever the machine
    (aff(64), 1, SMALL, NO_ENV, 1),
    (aff(1), 1, SMALL, NO_ENV, 1),
    # a large model: its share of the affinity mask
    (aff(16), 1, LARGE, NO_ENV, 16),
    (aff(16), 4, LARGE, NO_ENV, 4),
    (aff(16), 3, LARGE, NO_ENV, 5),   # 16 // 3
    (aff(16), 32, LARGE, NO_ENV, 1),  # more cells than CPUs: still one thread each
    (CpuAllowance(affinity=frozenset({3, 7})), 1, LARGE, NO_ENV, 2),  # taskset -c 3,7 on a big machine
    # cgroup v2 cpu.max: quota / period, rounded down, at least 1
    (CpuAllowance(affinity=frozenset(range(64)), cgroup_quota="200000 100000"), 1, LARGE, NO_ENV, 2),
    (CpuAllowance(affinity=frozenset(range(64)), cgroup_quota="250000 100000"), 1, LARGE, NO_ENV, 2),
    (CpuAllowance(affinity=frozenset(range(64)), cgroup_quota="600000 100000"), 2, LARGE, NO_ENV, 3),
    (CpuAllowance(affinity=frozenset(range(64)), cgroup_quota="50000 100000"), 1, LARGE, NO_ENV, 1),
    (CpuAllowance(affinity=frozenset(range(64)), cgroup_quota="max 100000"), 1, LARGE, NO_ENV, 64),
    (CpuAllowance(affinity=frozenset(range(4)), cgroup_quota="800000 100000"), 1, LARGE, NO_ENV, 4),  # mask smaller
    # cgroup v1 cfs_quota_us cfs_period_us
    (CpuAllowance(affinity=frozenset(range(64)), cgroup_quota="150000 100000"), 1, LARGE, NO_ENV, 1),
    (CpuAllowance(affinity=frozenset(range(64)), cgroup_quota="-1 100000"), 1, LARGE, NO_ENV, 64),
    # affinity unknown (not Linux): the CPU count
    (CpuAllowance(affinity=None, cpu_count=8), 2, LARGE, NO_ENV, 4),
    # SLURM: the job's CPUs per task, shared by the cells of --workers
    (aff(64), 1, LARGE, {"SLURM_CPUS_PER_TASK": "4"}, 4),
    (aff(64), 2, LARGE, {"SLURM_CPUS_PER_TASK": "4"}, 2),
    (aff(2), 1, LARGE, {"SLURM_CPUS_PER_TASK": "8"}, 2),  # the mask is smaller still
    # torchrun: its processes on the node share the CPUs
    (aff(8), 1, LARGE, {"LOCAL_WORLD_SIZE": "2"}, 4),
    # the count given as an int
    (12, 5, LARGE, NO_ENV, 2),
    # OMP_NUM_THREADS overrides the rule, for either kind (OpenMP's nested form: its first level)
    (aff(64), 1, SMALL, {"OMP_NUM_THREADS": "3"}, 3),
    (aff(2), 4, LARGE, {"OMP_NUM_THREADS": "6"}, 6),
    (aff(64), 1, SMALL, {"OMP_NUM_THREADS": "4,2"}, 4),
    (aff(16), 1, LARGE, {"OMP_NUM_THREADS": ""}, 16),  # empty: not set
])
def test_threads_for_a_given_cpu_allowance(cpus, workers, kind, env, want) -> None:
    assert threads_for(cpus, workers, kind, env) == want


def test_threads_flag_beats_the_environment_and_the_rule() -> None:
    assert threads_for(aff(64), 1, SMALL, {"OMP_NUM_THREADS": "3"}, requested=5) == 5
    assert thread_plan(aff(64), 1, SMALL, {}, requested=2) == (2, "--threads")
    assert thread_plan(aff(64), 1, SMALL, {"OMP_NUM_THREADS": "3"})[1] == "OMP_NUM_THREADS"


@pytest.mark.parametrize("env, name", [({"OMP_NUM_THREADS": "abc"}, "OMP_NUM_THREADS"),
                                       ({"OMP_NUM_THREADS": "0"}, "OMP_NUM_THREADS"),
                                       ({"OMP_NUM_THREADS": "-2"}, "OMP_NUM_THREADS"),
                                       ({"SLURM_CPUS_PER_TASK": "four"}, "SLURM_CPUS_PER_TASK")])
def test_a_bad_variable_is_one_error_naming_it(env, name) -> None:
    with pytest.raises(ValueError, match=name):
        threads_for(aff(8), 1, LARGE, env)


def test_more_threads_than_the_cpus_allowed_are_refused_where_the_cells_run() -> None:
    with pytest.raises(ConfigError, match=r"--threads: 5 torch threads per cell, but this process may use 4 CPU\(s\)"
                                          r".*give at most 4"):
        thread_plan(aff(4), 1, SMALL, {}, requested=5)
    with pytest.raises(ConfigError, match="give at most 2"):  # the fewest of affinity, quota and SLURM's count
        thread_plan(aff(4), 1, LARGE, {"SLURM_CPUS_PER_TASK": "2"}, requested=3)
    assert thread_plan(aff(4), 1, SMALL, {}, requested=4) == (4, "--threads")
    # a sweep that submits its cells to other machines does not judge their CPUs by its own; each job does
    assert thread_plan(aff(4), 1, SMALL, {}, requested=5, bounded=False) == (5, "--threads")


def test_a_sweep_that_submits_its_cells_elsewhere_does_not_bound_threads_by_its_own_cpus(monkeypatch) -> None:
    from fusebench.engine import threads

    monkeypatch.setattr(threads, "read_allowance", lambda root=None: aff(2))  # the login node: 2 CPUs
    assert threads.cell_threads("mlp", "cpu", requested=8, bounded=False) == (8, "--threads")
    with pytest.raises(ConfigError, match="give at most 2"):
        threads.cell_threads("mlp", "cpu", requested=8)


def test_a_cell_checks_threads_against_its_own_cpus(tmp_path) -> None:
    """What a job does on its node (the sweep that submitted it did not check): the cell refuses before it runs."""
    from fusebench import benchmarks
    from fusebench.cells.execute import run_cell
    from fusebench.spec.request import CellRequest, RunOptions

    spec = benchmarks.load("quickstart", overrides={"dataset.synthetic_spec": {"num_samples": 64, "seed": 0}})
    too_many = len(os.sched_getaffinity(0)) + 1  # at least the true limit + 1, whatever allowed_cpus says
    with pytest.raises(ConfigError, match=f"--threads: {too_many} torch threads per cell"):
        run_cell(CellRequest(spec, "none", 0, tmp_path), RunOptions(progress=False, threads=too_many))
    assert not list(tmp_path.rglob("run.json"))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="model kind"):
        threads_for(aff(8), 1, "huge", {})
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="--threads"):
            threads_for(aff(8), 1, SMALL, {}, requested=bad)


def test_quota_strings() -> None:
    assert quota_cpus("250000 100000") == 2.5
    assert quota_cpus("max 100000") is None and quota_cpus("-1 100000") is None and quota_cpus(None) is None
    assert quota_cpus("garbage") is None and quota_cpus("") is None and quota_cpus("0 100000") is None
    assert quota_cpus("300000") == 3.0  # no period written: the kernel's default 100000
    assert allowed_cpus(CpuAllowance(affinity=frozenset(range(8)), cgroup_quota="garbage"), {}) == 8


def test_read_allowance_reads_cgroup_v2_and_v1_files(tmp_path) -> None:
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("300000 100000\n")
    got = read_allowance(str(v2))
    assert got.cgroup_quota == "300000 100000" and allowed_cpus(CpuAllowance(64, got.cgroup_quota), {}) == 3
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("150000\n")
    (v1 / "cpu.cfs_period_us").write_text("50000\n")
    assert quota_cpus(read_allowance(str(tmp_path / "v1")).cgroup_quota) == 3.0
    assert read_allowance(str(tmp_path / "absent")).cgroup_quota is None
    if hasattr(os, "sched_getaffinity"):
        assert read_allowance(str(tmp_path / "absent")).affinity == frozenset(os.sched_getaffinity(0))


def test_model_kind_from_the_encoder_and_the_device() -> None:
    assert model_kind("mlp") == SMALL and model_kind("identity") == SMALL and model_kind("") == SMALL
    assert model_kind("esanet") == LARGE and model_kind("pointnet2") == LARGE and model_kind("votenet") == LARGE
    assert model_kind("mlp", "cuda:0") == LARGE  # a GPU cell's CPU work gets its share of the CPUs


def _spy_threads(monkeypatch) -> list[int]:
    """torch's thread count while each cell's pipeline runs."""
    seen: list[int] = []
    original = execute.pipeline_of

    class Spy:
        def __init__(self, pipe):
            self.pipe = pipe

        def __getattr__(self, name):
            return getattr(self.pipe, name)

        def run_cell(self, *args, **kwargs):
            seen.append(torch.get_num_threads())
            return self.pipe.run_cell(*args, **kwargs)

    monkeypatch.setattr(execute, "pipeline_of", lambda spec: Spy(original(spec)))
    return seen


def test_a_cell_computes_with_the_chosen_threads_and_says_so(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    # a machine with 8 CPUs for this process: --threads 3 is then a choice the runner takes (more threads than the
    # CPUs this process may use are refused: tests/test_hostile_round5.py)
    monkeypatch.setattr("fusebench.engine.threads.allowed_cpus", lambda allowance, env: 8)
    seen = _spy_threads(monkeypatch)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # PyTorch's default on a 2-core machine: the trap
    try:
        fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path / "a", overrides=TINY_REF)
        assert seen == [1]  # a small model: one thread, whatever torch had
        assert torch.get_num_threads() == 2  # restored after the cell
        err = capsys.readouterr().err
        assert "1 torch thread(s) each (a small model" in err and "threads=1" in err
        fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path / "b", overrides=TINY_REF, threads=3)
        assert seen == [1, 3] and torch.get_num_threads() == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        fusebench.run("quickstart", objective="none", seeds=[0], out=tmp_path / "c", overrides=TINY_REF)
        assert seen == [1, 3, 2]
    finally:
        torch.set_num_threads(before)


def test_results_do_not_depend_on_the_thread_count(tmp_path) -> None:
    """The same cell (pretraining, then the probe) at 1 and at 2 threads: the same numbers, bit for bit."""
    recs = {n: fusebench.run("quickstart", objective="m3g", seeds=[0], out=tmp_path / f"t{n}", overrides=TINY,
                             threads=n, progress=False)[0] for n in (1, 2)}
    assert recs[1]["metrics"] == recs[2]["metrics"]
    assert recs[1]["curves"] == recs[2]["curves"]  # every pretraining loss and validation score
    assert recs[1]["config_hash"] == recs[2]["config_hash"]  # the thread count is not configuration


def test_cli_threads_flag_and_a_bad_variable(tmp_path, monkeypatch, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "quickstart", "--threads", "0"])
    assert e.value.code == 2 and "--threads" in capsys.readouterr().err
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    out = tmp_path / "runs"
    assert main(["run", "quickstart", "--objective", "none", "--seeds", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "OMP_NUM_THREADS='lots'" in err and "Traceback" not in err
    assert not list(out.rglob("run.json"))  # refused before any cell


def test_bench_threads_environments() -> None:
    from fusebench.perf.threads import settings_env

    base = {"OMP_NUM_THREADS": "7", "MKL_NUM_THREADS": "7", "PATH": "/bin"}
    assert settings_env("default", base) == {"PATH": "/bin"}  # the rule decides
    assert settings_env("one", base) == {"PATH": "/bin", "OMP_NUM_THREADS": "1"}


def test_bench_threads_runs_both_settings(tmp_path) -> None:
    """The command itself on a tiny cell: both settings run, the default one at 1 thread (a small model),
    the same metrics; the ratio line is printed (its value is timing: not asserted)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-m", "fusebench", "bench", "threads", "--no-busy", "--objective", "none",
                        "--set", "downstream.epochs=1"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    assert "default settings   threads=1" in r.stdout and "OMP_NUM_THREADS=1  threads=1" in r.stdout
    assert "ratio default / one thread: " in r.stdout and "metrics identical across settings: yes" in r.stdout
