"""Launchers (``fusebench run --launcher``): options, the checkpointable cell call, cell locks held on
other hosts or by SLURM jobs, and a sweep through submitit's LocalExecutor. The real-SLURM test is
tests/test_launchers_slurm.py (slow)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import fusebench
from fusebench.sweep import launchers, status
from fusebench.engine import locks
from fusebench.spec.config import ConfigError
from fusebench.spec.request import CellRequest, RunOptions
from fusebench.engine.cell import CellBusyError, CellLock

TINY = {
    "dataset.synthetic_spec": {"num_samples": 128, "seed": 0},
    "pretrain.epochs": 1,
    "pretrain.batch_size": 32,
    "downstream.epochs": 1,
}


def test_registry_names_the_launchers() -> None:
    assert launchers.available() == ["local", "slurm", "submitit_local"]
    with pytest.raises(ConfigError, match="unknown launcher 'pbs'; known: local, slurm, submitit_local"):
        launchers.build("pbs")


def _fresh_plugins(monkeypatch: pytest.MonkeyPatch, registry: Any, eps: list[Any]) -> None:
    """``registry`` reads its entry-point plugins again, from ``eps`` (restored after the test)."""
    from fusebench import registry as R

    for attr in ("_entries", "_meta", "_lazy", "_origin"):
        monkeypatch.setattr(registry, attr, dict(getattr(registry, attr)))
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.setattr(registry, "_plugin_names", None)
    monkeypatch.setattr(R, "entry_points", lambda group: [e for e in eps if e.group == group])


def test_launchers_are_a_registry_with_an_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata as md

    from fusebench.registry import DuplicateIdError, Registry

    assert isinstance(launchers.LAUNCHERS, Registry) and launchers.LAUNCHERS.entry_point_group == "fusebench.launchers"
    assert type(launchers.build("LOCAL")) is launchers.LocalLauncher  # ids are lowercase, as in every registry
    with pytest.raises(DuplicateIdError, match="launcher id 'local' is registered twice"):
        launchers.register("local")(type("Again", (launchers.LocalLauncher,), {}))
    assert launchers.LocalLauncher.name == "local"

    plugin = types.ModuleType("fb_fake_launcher")

    class PbsLauncher(launchers.LocalLauncher):
        name = "pbs"

    plugin.PbsLauncher = PbsLauncher
    monkeypatch.setitem(sys.modules, "fb_fake_launcher", plugin)
    _fresh_plugins(monkeypatch, launchers.LAUNCHERS,
                   [md.EntryPoint("pbs", "fb_fake_launcher:PbsLauncher", "fusebench.launchers")])
    assert launchers.available() == ["local", "pbs", "slurm", "submitit_local"]
    got = launchers.build("pbs", workers=1)
    assert type(got) is PbsLauncher and got.name == "pbs"
    with pytest.raises(ConfigError, match="unknown launcher 'sge'; known: local, pbs, slurm, submitit_local"):
        launchers.build("sge")


def test_submitit_local_sweep_gives_the_records_of_a_local_sweep(tmp_path: Path) -> None:
    pytest.importorskip("submitit", reason="submitit is not installed (pip install -e .[slurm])")
    kw = dict(objective=["none", "infonce_pwe"], seeds=[0], overrides=TINY, progress=False)
    here = fusebench.run("quickstart", out=tmp_path / "here", **kw)
    jobs = fusebench.run("quickstart", out=tmp_path / "jobs", launcher="submitit_local",
                         launcher_options={"time_min": 5}, **kw)
    assert [(r["objective"], r["seed"]) for r in jobs] == [("none", 0), ("infonce_pwe", 0)]
    for a, b in zip(here, jobs):
        assert a["metrics"] == b["metrics"] and a["curves"] == b["curves"] and a["config_hash"] == b["config_hash"]
    for o in ("none", "infonce_pwe"):
        cell = tmp_path / "jobs" / "quickstart" / o / "seed0"
        marker = json.loads((cell / ".launcher.json").read_text())
        assert marker["launcher"] == "submitit_local" and Path(marker["stdout"]).is_file()
        assert f"fusebench cell quickstart/{o}/seed0 on" in Path(marker["stdout"]).read_text()
        assert not (cell / ".lock").exists()
    # the job files are not cells; a second run finds every record and submits nothing
    assert status.collect(tmp_path / "jobs") == {"quickstart": {("infonce_pwe", 0): ("done", ""), ("none", 0): ("done", "")}}
    before = sorted((tmp_path / "jobs" / ".submitit").rglob("*"))
    again = fusebench.run("quickstart", out=tmp_path / "jobs", launcher="submitit_local", **kw)
    assert [r["metrics"] for r in again] == [r["metrics"] for r in jobs]
    assert sorted((tmp_path / "jobs" / ".submitit").rglob("*")) == before


def test_a_cell_that_fails_in_its_job_is_named_by_the_sweep(tmp_path: Path, capsys) -> None:
    """A cell that fails inside a submitit job (a non-finite loss) is named in the sweep's output, with its job's
    log, as a local run names it (only the job's own log said so; the sweep printed a count)."""
    pytest.importorskip("submitit", reason="submitit is not installed (pip install -e .[slurm])")
    recs = fusebench.run("quickstart", objective=["m3g"], seeds=[0], out=tmp_path, launcher="submitit_local",
                         launcher_options={"time_min": 5}, overrides={**TINY, "pretrain.lr": 1e30}, progress=False)
    assert recs[0]["status"] == "failed"
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("FAILED quickstart/m3g/seed0: "))
    assert "(log " in line and line.endswith("_log.err)") and not line.split(": ", 1)[1].startswith("[")


def test_cell_call_checkpoint_resubmits_the_same_cell(tmp_path: Path) -> None:
    submitit = pytest.importorskip("submitit")
    from fusebench import benchmarks

    spec = benchmarks.load("quickstart")
    call = launchers.CellCall(CellRequest(spec, "m3g", 3, tmp_path), RunOptions(resume=False, progress=True), {"git": None})
    delayed = call.checkpoint()
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    again = delayed.function
    assert isinstance(again, launchers.CellCall) and (again.request.objective, again.request.seed) == ("m3g", 3)
    assert again.request == call.request and again.context == call.context
    assert again.options == RunOptions(resume=True, progress=True)
    assert pickle.loads(pickle.dumps(call)) == call  # what submitit writes to its submitted pickle


def test_slurm_options_become_sbatch_lines(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    if shutil.which("srun") is None:  # submitit writes srun's path into the script it makes
        pytest.skip("srun is not installed (SLURM's client commands: apt-get install slurm-client; "
                    "scripts/setup.sh does as root)")
    launcher = launchers.LAUNCHERS.get("slurm")(partition="gpu", gpus_per_job=2, time_min=90, account="proj7",
                                            cpus_per_job=8, sbatch={"qos": "high", "exclusive": True},
                                            array_parallelism=4)
    script = launcher.executor(tmp_path, "fusebench-quickstart")._make_submission_file_text("CMD", "uid")
    for line in ("--partition=gpu", "--gpus-per-node=2", "--time=90", "--account=proj7", "--cpus-per-task=8",
                 "--qos=high", "--exclusive", "--job-name=fusebench-quickstart", "--nodes=1", "--signal=USR2@90"):
        assert f"#SBATCH {line}\n" in script, line


def test_launcher_options_are_checked(monkeypatch) -> None:
    pytest.importorskip("submitit")
    with pytest.raises(ConfigError, match="--workers applies to --launcher local only"):
        launchers.LAUNCHERS.get("slurm")(workers=2)
    with pytest.raises(ConfigError, match="unknown option"):
        launchers.LAUNCHERS.get("slurm")(queue="x")
    with pytest.raises(ConfigError, match="--time-min: expected a positive number of minutes"):
        launchers.LAUNCHERS.get("slurm")(time_min=0)
    with pytest.raises(ConfigError, match="--gpus-per-job: expected a non-negative integer"):
        launchers.LAUNCHERS.get("slurm")(gpus_per_job=-1)
    # every option typed, from Python too (a string max_requeues failed the cell at its first preemption)
    for given, message in (({"max_requeues": "3"}, r"max_requeues: expected an integer >= 0 .*got '3'"),
                           ({"max_requeues": -1}, r"max_requeues: expected an integer >= 0"),
                           ({"poll_s": "x"}, r"poll_s: expected a number of seconds > 0, got 'x'"),
                           ({"wait": "no"}, r"wait \(--no-wait\): expected True or False, got 'no'"),
                           ({"partition": 5}, r"--partition: expected a non-empty string, got 5"),
                           ({"sbatch": "qos=high"}, r"--sbatch: expected a mapping of sbatch option names")):
        with pytest.raises(ConfigError, match=message):
            launchers.LAUNCHERS.get("slurm")(**given)
    with pytest.raises(ConfigError, match="--partition: SLURM options, not used by --launcher submitit_local"):
        launchers.LAUNCHERS.get("submitit_local")(partition="gpu")
    with pytest.raises(ConfigError, match="takes none of: partition"):
        launchers.build("local", options={"partition": "gpu"})
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ConfigError, match="sbatch is not on PATH"):
        launchers.build("slurm")
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"needs submitit: pip install -e \.\[slurm\]"):
        launchers.build("submitit_local")


def test_cli_refuses_scheduler_flags_without_a_scheduler(capsys) -> None:
    from fusebench.cli import main

    assert main(["run", "quickstart", "--partition", "gpu", "--no-wait"]) == 2
    assert "--partition, --no-wait: options of --launcher slurm (submitit_local takes --time-min and --no-wait only)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "quickstart", "--launcher", "slurm", "--sbatch", "=x"])
    assert "expected KEY=VALUE" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# locks and status for cells run elsewhere
# ------------------------------------------------------------------------------------------------
class FakeQueue(locks.SlurmQueue):
    def __init__(self, states: dict[str, tuple[str, str]]) -> None:
        super().__init__()
        self.states, self.asked = states, []

    def _squeue(self, ids):
        self.asked.append(list(ids))
        return {i: self.states[i] for i in ids if i in self.states}


def _lock(cell: Path, **data) -> None:
    cell.mkdir(parents=True, exist_ok=True)
    (cell / ".lock").write_text(json.dumps(data))


def _space_by_hand() -> dict:
    """This process's boot id and pid namespace, read here from /proc (absent keys where there is no /proc)."""
    out = {}
    if Path("/proc/sys/kernel/random/boot_id").exists():
        out["boot_id"] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    if Path("/proc/self/ns/pid").exists():
        out["pid_ns"] = os.readlink("/proc/self/ns/pid")
    return out


def test_a_lock_is_written_with_host_and_slurm_job(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4240")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    with CellLock(tmp_path):
        data = json.loads((tmp_path / ".lock").read_text())
        token = data.pop("token")  # this lock's own: a later lock given the same inode number is not taken for it
        assert len(token) == 32 and int(token, 16) >= 0
        assert data == {"pid": os.getpid(), "host": locks.hostname(), "slurm_job": "4240_2", "slurm_job_id": "4242",
                        **_space_by_hand()}
        assert status.cell_state(tmp_path) == ("running", f"running on {locks.hostname()} (slurm job 4240_2)")
    assert not (tmp_path / ".lock").exists()


def _not_resumable(last) -> str:
    """What status says of a last.pt holding the byte b"x" (not a checkpoint: the run refuses it)."""
    return (f"not resumable: cannot resume: checkpoint {last} is unreadable (torch.load with weights_only=True refuses "
            "it (Unsupported operand 120): not a file of tensors and plain containers (fusebench never unpickles "
            "code)); the file was left as it is — delete it to start over")


def test_a_lock_on_another_host_is_not_judged_by_pid(tmp_path: Path, monkeypatch) -> None:
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)  # a pid that is not alive here
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    # outside SLURM: nothing to ask, so it stays held
    plain = tmp_path / "plain"
    _lock(plain, pid=dead, host="node-elsewhere")
    assert status.cell_state(plain) == ("running", f"running on node-elsewhere (pid {dead}; another host, not checked from {locks.hostname()})")
    with pytest.raises(CellBusyError, match=f"being run by process {dead} on node-elsewhere"):
        CellLock(plain).__enter__()
    # a SLURM job: squeue decides
    job = tmp_path / "job"
    _lock(job, pid=dead, host="node7", slurm_job="77_1", slurm_job_id="78")
    running = FakeQueue({"77_1": ("RUNNING", "node7")})
    assert status.cell_state(job, running) == ("running", "running on node7 (slurm job 77_1)")
    monkeypatch.setattr(locks.SlurmQueue, "_squeue", lambda self, ids: {"77_1": ("RUNNING", "node7")})
    with pytest.raises(CellBusyError, match="being run by slurm job 77_1 on node7"):
        CellLock(job).__enter__()
    # the job left the queue (cancelled, killed): the lock is stale and the cell can be taken over
    (job / "last.pt").write_bytes(b"x")
    assert status.cell_state(job, FakeQueue({})) == ("interrupted", _not_resumable(job / "last.pt"))
    monkeypatch.setattr(locks.SlurmQueue, "_squeue", lambda self, ids: {})
    with CellLock(job):
        assert json.loads((job / ".lock").read_text())["pid"] == os.getpid()
    # our own job, requeued onto this host: its earlier run's lock (from node7) is stale
    _lock(job, pid=dead, host="node7", slurm_job="77_1", slurm_job_id="78")
    monkeypatch.setattr(locks.SlurmQueue, "_squeue", lambda self, ids: {"77_1": ("RUNNING", "here")})
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    with CellLock(job):
        pass
    # squeue cannot be asked: a job's lock on another host counts as held
    monkeypatch.delenv("SLURM_JOB_ID")
    _lock(job, pid=dead, host="node7", slurm_job="77_1", slurm_job_id="78")
    monkeypatch.setattr(locks.SlurmQueue, "_squeue", lambda self, ids: None)
    assert status.cell_state(job)[0] == "running"


def test_a_lock_appears_whole_and_is_removed_only_by_its_owner(tmp_path: Path) -> None:
    """The race of two runs of one cell: a lock file seen empty (created, not yet written) used to read as a dead
    owner's (pid 0) and be removed, so both ran; and a run's exit removed whatever lock was there. Now a lock is
    linked into place whole; an unreadable one is its owner's for a minute; an exit removes its own lock only."""
    import time

    cell = tmp_path / "cell"
    cell.mkdir()
    lock = cell / ".lock"
    with CellLock(cell):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
        assert sorted(p.name for p in cell.iterdir()) == [".lock"]  # no private file left beside it
    assert not lock.exists()
    lock.write_text("")  # being written by another run (an older version creates, then writes)
    with pytest.raises(CellBusyError, match=r"being run by another process \(its lock is unreadable\)"):
        CellLock(cell).__enter__()
    old = time.time() - 120
    os.utime(lock, (old, old))  # left empty by a run killed long ago: stale
    with CellLock(cell):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
        lock.unlink()
        lock.write_text(json.dumps({"pid": os.getpid() + 1, "host": "elsewhere"}))  # another run's lock now
    assert json.loads(lock.read_text())["host"] == "elsewhere"  # left in place


def test_a_lock_of_this_process_s_own_pid_is_a_killed_run_s_and_every_lock_has_its_own_token(tmp_path: Path) -> None:
    """A lock naming this process's pid on this host was left by an earlier run under the same pid (a requeued job
    in a container): stale, taken over. Two locks of one process never share a token, so the first run's exit
    leaves the second's lock even where the second got the first's inode number."""
    cell = tmp_path / "cell"
    cell.mkdir()
    lock = cell / ".lock"
    lock.write_text(json.dumps({"pid": os.getpid(), "host": locks.hostname()}))
    with CellLock(cell):
        first = json.loads(lock.read_text())["token"]
    a = CellLock(cell).__enter__()
    lock.unlink()  # a is gone from the disk; b takes the cell, and the file system may reuse the inode
    b = CellLock(cell).__enter__()
    second = json.loads(lock.read_text())["token"]
    assert len({first, second, json.loads(a.payload)["token"]}) == 3
    a.inode = os.stat(lock).st_ino  # the worst case: b's lock got a's inode number
    a.__exit__(None, None, None)
    assert json.loads(lock.read_text())["token"] == second  # a's exit left b's lock
    b.__exit__(None, None, None)
    assert not lock.exists()


def test_two_runs_taking_over_one_stale_lock_never_both_hold_it(tmp_path: Path, monkeypatch) -> None:
    """B judges a killed run's lock stale; before B moves it aside, C (same judgement) takes the lock over and
    holds it. B must not take C's live lock for the stale one, even where the file system gives C's lock the inode
    number the stale one had (it did on ext4: the takeover compared inodes only, and both ran the cell)."""
    from fusebench.engine import cell as C

    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)  # a pid that is not alive here
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / ".lock").write_text(json.dumps({"pid": dead, "host": locks.hostname()}))  # a killed run's lock
    real_rename, held = os.rename, {}

    holder = ("import sys, time\nfrom pathlib import Path\nfrom fusebench.engine.cell import CellLock\n"
              "lock = CellLock(Path(sys.argv[1])).__enter__()\nprint('held', flush=True)\ntime.sleep(120)\n")

    def rename(src, dst):  # B is about to move the lock it judged aside: C, another process, takes the cell first
        if not held and str(dst).startswith(str(cell / ".lock.stale.")):
            held["c"] = subprocess.Popen([sys.executable, "-c", holder, str(cell)], stdout=subprocess.PIPE, text=True)
            assert held["c"].stdout.readline().strip() == "held"
            held["inode_bytes"] = (os.stat(cell / ".lock").st_ino, (cell / ".lock").read_bytes())
        return real_rename(src, dst)

    monkeypatch.setattr(C.os, "rename", rename)
    try:
        with pytest.raises(CellBusyError, match=r"being run by process (\d+)") as busy:
            C.CellLock(cell).__enter__()
        assert f"process {held['c'].pid}" in str(busy.value)
        assert (os.stat(cell / ".lock").st_ino, (cell / ".lock").read_bytes()) == held["inode_bytes"]  # C's, in place
    finally:
        if "c" in held:
            held["c"].kill()
            held["c"].wait()


def test_status_names_the_slurm_job_of_a_submitted_cell(tmp_path: Path) -> None:
    out = tmp_path / "runs"

    def cell(seed: int, job: str) -> Path:
        c = out / "quickstart" / "m3g" / f"seed{seed}"
        c.mkdir(parents=True)
        (c / ".launcher.json").write_text(json.dumps({"launcher": "slurm", "job_id": job, "submitted": 0,
                                                      "stderr": f"/logs/{job}_0_log.err"}))
        return c

    cell(0, "9_0")
    cell(1, "9_1")
    (cell(2, "9_2") / "last.pt").write_bytes(b"x")
    cell(3, "9_3")
    queue = FakeQueue({"9_0": ("PENDING", ""), "9_1": ("RUNNING", "node3"), "9_2": ("PENDING", "")})
    states = {s: queue and status.cell_state(out / "quickstart" / "m3g" / f"seed{s}", queue) for s in range(4)}
    assert states == {
        0: ("pending", "queued: slurm job 9_0 (PENDING)"),
        1: ("running", "starting on node3 (slurm job 9_1)"),  # its job runs, the cell is not locked yet
        2: ("interrupted", f"{_not_resumable(out / 'quickstart' / 'm3g' / 'seed2' / 'last.pt')}; queued: slurm job "
                           "9_2 (PENDING)"),  # requeued
        3: ("pending", "slurm job 9_3 ended without a record (log: /logs/9_3_0_log.err)"),
    }
    assert locks.busy(out / "quickstart" / "m3g" / "seed0", queue) == ("slurm job 9_0 is on it (PENDING)", "9_0")
    assert locks.busy(out / "quickstart" / "m3g" / "seed3", queue) is None
    assert locks.slurm_jobs(sorted((out / "quickstart" / "m3g").iterdir())) == ["9_0", "9_1", "9_2", "9_3"]


def _wait_for_one(job: Any, out: Path) -> list[Any]:
    """The records the slurm launcher's wait gives for one job ``job`` of cell quickstart/m3g/seed1 under ``out``,
    the queue empty (the job has ended)."""
    class Spec:
        name = "quickstart"

    launcher = launchers.SubmititLauncher.__new__(launchers.LAUNCHERS.get("slurm"))
    launcher.opts = launchers.SubmititOptions(poll_s=0)
    launcher._queue = lambda: FakeQueue({})  # type: ignore[method-assign]
    records = [None]
    launcher._wait({0: job}, [("m3g", 1)], records, Spec(), out)
    return records


def test_a_job_that_ends_without_a_result_is_interrupted(tmp_path: Path, capsys) -> None:
    class Paths:
        result_pickle = tmp_path / "7_0_0_result.pkl"  # never written: the job was cancelled
        stdout, stderr = tmp_path / "7_0_0_log.out", tmp_path / "7_0_0_log.err"

    class Job:
        job_id, paths = "7_0", Paths()

    records = _wait_for_one(Job(), tmp_path)
    assert records[0]["status"] == "interrupted" and records[0]["job_id"] == "7_0"
    assert "rerunning the sweep starts it again" in capsys.readouterr().err
    assert not (tmp_path / "quickstart" / "m3g" / "seed1" / "failed.json").exists()


def test_each_launcher_says_where_its_cells_run_and_how_many_share_this_machine() -> None:
    """The launchers own what the sweep used to decide by their ids: whether the cells run on this machine (the
    sweep resolves their device and says their threads), how many of them share its CPUs, and how many local
    processes run the selection trials. Constructed directly (no submitit, no sbatch needed)."""
    get = launchers.LAUNCHERS.get
    local = get("local")(workers=3)
    assert local.runs_here and local.trial_workers == 3
    assert [local.cells_at_once(n) for n in (0, 1, 2, 5)] == [1, 1, 2, 3]
    slurm = get("slurm")(array_parallelism=4)
    assert not slurm.runs_here and slurm.trial_workers == 1
    assert [slurm.cells_at_once(n) for n in (1, 8)] == [1, 1]  # each job has its own CPUs
    sub = get("submitit_local")()  # its executor runs every job side by side (--array-parallelism is SLURM's)
    assert sub.runs_here and sub.trial_workers == 1
    assert [sub.cells_at_once(n) for n in (0, 3, 8)] == [1, 3, 8]


@pytest.mark.skipif(not Path("/proc/self/ns/pid").exists(), reason="needs /proc (Linux)")
def test_a_lock_of_another_pid_namespace_or_boot_on_this_host(tmp_path: Path, monkeypatch) -> None:
    """A container sharing this host's name numbers its processes apart: its lock is not judged by pid here (a pid
    not alive here does not free it) but as another host's (squeue for a SLURM job, our own requeued job's is stale);
    a lock of another boot id is stale when written before this host last booted, else another machine's of the
    same name (judged as another host's)."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    here = _space_by_hand()
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    box = tmp_path / "container"
    _lock(box, pid=dead, host=locks.hostname(), boot_id=here["boot_id"], pid_ns="pid:[1]")
    assert status.cell_state(box) == (
        "running", f"running on {locks.hostname()} (pid {dead} of another process space: another container or "
                   f"machine of that name, not checked from here; delete the lock if that process is gone)")
    with pytest.raises(CellBusyError, match=f"being run by process {dead} of another process space on "):
        CellLock(box).__enter__()
    # our own pid number in another namespace is another process, not this one
    _lock(box, pid=os.getpid(), host=locks.hostname(), boot_id=here["boot_id"], pid_ns="pid:[1]")
    with pytest.raises(CellBusyError, match="another process space"):
        CellLock(box).__enter__()
    # a SLURM job in another container: squeue decides; our own job's lock (a requeued job) is stale
    job = tmp_path / "job"
    _lock(job, pid=dead, host=locks.hostname(), boot_id=here["boot_id"], pid_ns="pid:[1]", slurm_job="77_1",
          slurm_job_id="78")
    assert status.cell_state(job, FakeQueue({"77_1": ("RUNNING", "node7")}))[0] == "running"
    assert status.cell_state(job, FakeQueue({}))[0] != "running"  # gone from the queue: stale
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    with CellLock(job):
        assert json.loads((job / ".lock").read_text())["pid"] == os.getpid()
    monkeypatch.delenv("SLURM_JOB_ID")
    # another boot id, written before this host last booted: gone, whatever its pid (ours here is alive)
    booted = tmp_path / "rebooted"
    _lock(booted, pid=os.getppid(), host=locks.hostname(), boot_id="00000000-0000-0000-0000-000000000000",
          pid_ns=here["pid_ns"])
    from fusebench.runtime.processes import boot_time

    before = boot_time() - 60
    os.utime(booted / ".lock", (before, before))
    with CellLock(booted):
        assert json.loads((booted / ".lock").read_text())["pid"] == os.getpid()
    # another boot id written since this host booted: another machine of this name, its pid not checked here
    other = tmp_path / "other-machine"
    _lock(other, pid=dead, host=locks.hostname(), boot_id="00000000-0000-0000-0000-000000000000",
          pid_ns=here["pid_ns"])
    with pytest.raises(CellBusyError, match=f"being run by process {dead} of another process space on "):
        CellLock(other).__enter__()
    # the same space: judged by pid (a live one holds)
    same = tmp_path / "same"
    _lock(same, pid=os.getppid(), host=locks.hostname(), **here)
    with pytest.raises(CellBusyError, match=f"being run by process {os.getppid()}"):
        CellLock(same).__enter__()
    # a host that is not text: another host's lock, no crash
    odd = tmp_path / "odd-host"
    _lock(odd, pid=dead, host=7)
    assert status.cell_state(odd)[0] == "running"


def test_space_relation_by_hand(monkeypatch) -> None:
    from fusebench.runtime import processes

    monkeypatch.setattr(processes, "process_space", lambda: {"boot_id": "b1", "pid_ns": "pid:[7]"})
    assert processes.space_relation({}) == processes.SAME  # written before spaces were recorded
    assert processes.space_relation({"boot_id": "b1", "pid_ns": "pid:[7]"}) == processes.SAME
    assert processes.space_relation({"boot_id": "b0", "pid_ns": "pid:[7]"}) == processes.REBOOTED
    assert processes.space_relation({"boot_id": "b0", "pid_ns": "pid:[9]"}) == processes.REBOOTED
    assert processes.space_relation({"boot_id": "b1", "pid_ns": "pid:[9]"}) == processes.OTHER
    assert processes.space_relation({"pid_ns": "pid:[9]"}) == processes.OTHER
    assert processes.space_relation({"boot_id": 5, "pid_ns": None}) == processes.SAME  # not text: not told
    monkeypatch.setattr(processes, "process_space", lambda: {})  # no /proc: the pid is all there is
    assert processes.space_relation({"boot_id": "b0", "pid_ns": "pid:[9]"}) == processes.SAME
    assert processes.space_tag() == ""


def test_a_failed_cells_error_reaches_the_terminal_escaped(tmp_path: Path, capsys) -> None:
    """The error text a cell's failure carries (an exception's message, which can quote a file's key or a record's
    field) is printed with its control characters escaped (fusebench.io.shown_text), by the local path and by a
    scheduler's job alike; a multi-line message keeps its lines."""
    from fusebench import benchmarks
    from fusebench.cells.execute import record_failure

    hostile = "ValueError: key 'a\x1b[2J\u202eb' unknown\nexpected one of: x, y"
    request = CellRequest(benchmarks.load("quickstart"), "m3g", 1, tmp_path)
    failure = record_failure(request, hostile)
    assert failure["error"] == hostile  # the record keeps the text as it was
    assert capsys.readouterr().err.splitlines() == [
        "FAILED quickstart/m3g/seed1: \"ValueError: key 'a\\x1b[2J\\u202eb' unknown\"", "expected one of: x, y"]

    class Paths:
        result_pickle = tmp_path / "8_0_0_result.pkl"
        stdout, stderr = tmp_path / "8_0_0_log.out", tmp_path / "8_0_0_log.err"

    Paths.result_pickle.write_bytes(b"")  # (read by Job.result below)

    class Job:
        job_id, paths = "8_0", Paths()

        def result(self) -> dict:
            return {"status": "failed", "error": hostile}

    records = _wait_for_one(Job(), tmp_path)
    assert records[0]["error"] == hostile
    assert capsys.readouterr().err.splitlines() == [
        f"FAILED quickstart/m3g/seed1: \"ValueError: key 'a\\x1b[2J\\u202eb' unknown\" (log {Paths.stderr})"]
