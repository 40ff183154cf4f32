"""``fusebench run --launcher slurm`` against a real one-node SLURM cluster started on this machine.

The session fixture ``slurm_cluster`` starts munged, slurmctld and slurmd from Debian's packages
(``slurmctld``, ``slurmd``, ``slurm-client``, ``munge``; scripts/setup.sh installs them, and the
fixture does too when it runs as root and they are missing) with a configuration written into a
temporary folder: one node (this host, its real CPU count and memory), one partition,
``proctrack/linuxproc``, ``task/none``, no cgroups, no accounting database, free ports. It waits
until ``sinfo`` shows the node idle, and at the end cancels every job, stops the daemons and removes
the folder. Clients find the cluster through ``SLURM_CONF``, which the jobs inherit.

The test runs a 2-cell sweep through sbatch; one cell's job is cancelled with ``scancel`` after it
wrote ``last.pt`` and is finished by rerunning the sweep (a new job that resumes from last.pt), the
other is preempted (``USR2``, the signal submitit's requeue hook answers): submitit calls
``CellCall.checkpoint()``, requeues the job, and the requeued job resumes from last.pt. Both records
must equal those of the same cells run locally; ``fusebench status`` is checked along the way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fusebench.engine import locks
from fusebench.sweep import status

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
BINARIES = ["slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo", "munged"]


def _have_binaries() -> bool:
    return all(shutil.which(b) for b in BINARIES)


def _install() -> str | None:
    """Install the Debian packages when root; the reason when they cannot be had."""
    if _have_binaries():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "the SLURM binaries (slurmctld, slurmd, sbatch, munged) are absent and cannot be installed (not root / no apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            # a machine without the package registry (e.g. a GPU node with no network): nothing to test against
            return (f"the SLURM binaries are absent and apt-get install {' '.join(PACKAGES)} failed (no package "
                    f"registry?): {res.stderr.strip()[-300:]}")
    return None if _have_binaries() else "apt-get installed the SLURM packages but their binaries are not on PATH"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem_mb() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20)


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stop(pids: list[int | None]) -> None:
    """SIGTERM to each of ``pids`` (processes this fixture started), SIGKILL to those alive 5 s later."""
    pids = [p for p in pids if p]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for _ in range(50):
        if not any(locks.pid_alive(p) for p in pids):
            return
        time.sleep(0.1)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _processes_of(folder: Path) -> list[int]:
    """Processes started by this cluster: SLURM_CONF pointing into ``folder`` in their environment,
    or ``folder`` on their command line (the daemons and the jobs' steps)."""
    found = []
    needle = str(folder).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes() or needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


class Cluster:
    def __init__(self, folder: Path, conf: Path) -> None:
        self.folder, self.conf = folder, conf

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        res = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stdout}{res.stderr}\n{self.logs()}")
        return res

    def job_state(self, job: str) -> str:
        return locks.SlurmQueue().state(job)[0]

    def logs(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            p = self.folder / name
            if p.exists():
                parts.append(f"--- {name} (tail)\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A one-node SLURM cluster on this host for the session (see the module docstring)."""
    pytest.importorskip("submitit", reason="submitit is not installed (pip install -e .[slurm]; scripts/setup.sh does)")
    reason = _install()
    if reason:
        pytest.skip(reason)
    # munged wants its socket folder and every parent traversable by all: not pytest's 0700 tmp folders
    folder = Path(tempfile.mkdtemp(prefix="fusebench-slurm-"))
    folder.chmod(0o755)
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir()
    (folder / "munge").chmod(0o755)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = folder / "munge" / "munge.sock"
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    conf.write_text("\n".join([
        "ClusterName=fusebenchtest",
        f"SlurmctldHost={host}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={sock}",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=2",  # scancel: SIGKILL 2 s after SIGTERM (submitit's jobs ignore SIGTERM)
        f"NodeName={host} CPUs={os.cpu_count()} RealMemory={int(_mem_mb() * 0.9)} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        "",
    ]))
    old_conf = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    cluster = Cluster(folder, conf)
    try:
        cluster.run("munged", f"--key-file={key}", f"--socket={sock}", f"--pid-file={folder / 'munge' / 'munged.pid'}",
                    f"--log-file={folder / 'munged.log'}", f"--seed-file={folder / 'munge' / 'munged.seed'}")
        cluster.run("slurmctld", "-f", str(conf))
        cluster.run("slurmd", "-f", str(conf))
        state = ""
        for _ in range(120):
            state = cluster.run("sinfo", "-h", "-o", "%t", check=False).stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the one-node SLURM cluster did not become idle (sinfo: {state!r})\n{cluster.logs()}")
        yield cluster
    finally:
        jobs = cluster.run("squeue", "-h", "-o", "%A", check=False).stdout.split()
        if jobs:
            cluster.run("scancel", *jobs, check=False)
            for _ in range(50):
                if not cluster.run("squeue", "-h", "-o", "%A", check=False).stdout.split():
                    break
                time.sleep(0.2)
        _stop([_pid(folder / "slurmd.pid"), _pid(folder / "slurmctld.pid"), _pid(folder / "munge" / "munged.pid")])
        _stop(_processes_of(folder))  # job steps left behind, if any
        if old_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old_conf
        shutil.rmtree(folder, ignore_errors=True)


# each cell pretrains for 400 epochs of 16 steps (6400 steps, about 12 s on one idle core) with a checkpoint
# every 25 steps: it is cancelled or preempted a few seconds after its first last.pt. It must still be far from
# done then: scancel's SIGTERM is ignored by submitit's jobs and SIGKILL follows KillWait = 2 s later, and the two
# jobs of the array may start seconds apart. At 80 epochs (1,280 steps, about 2.5 s once the cells got faster)
# an idle machine finished the cancelled cell in that window.
STEPS = 400 * 16
SLOW = {
    "dataset.synthetic_spec": {"num_samples": 1024, "seed": 0},
    "pretrain.epochs": 400,
    "pretrain.batch_size": 64,
    "downstream.epochs": 1,
    "checkpoint_every": 25,
}
SETS = [f"--set={k}={json.dumps(v)}" for k, v in SLOW.items()]


def _wait_for(what: str, cond, cluster: Cluster, timeout: float = 90.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{cluster.run('squeue', check=False).stdout}\n{cluster.logs()}")


def _states(out: Path) -> dict[int, tuple[str, str]]:
    return {s: v for (o, s), v in status.collect(out)["quickstart"].items()}


@pytest.mark.slow
def test_slurm_sweep_survives_scancel_and_preemption(slurm_cluster: Cluster, tmp_path: Path, capsys,
                                                    request) -> None:
    from fusebench.cli import main

    cluster = slurm_cluster
    out, board = tmp_path / "slurm", tmp_path / "board"
    sweep = ["run", "quickstart", "--objective", "infonce_pwe", "--seeds", "0", "1", "--out", str(out), *SETS,
             "--launcher", "slurm", "--partition", "debug", "--cpus-per-job", "1", "--time-min", "10",
             "--sbatch", "comment=fusebench-test"]
    # the same two cells run uninterrupted on this host, beside the SLURM jobs (their records are compared at the
    # end): a process of its own, so the test does not wait for them before it starts the sweep
    with (tmp_path / "local.log").open("w") as log:
        local = subprocess.Popen([sys.executable, "-m", "fusebench", "run", "quickstart", "--objective", "infonce_pwe",
                                  "--seeds", "0", "1", "--out", str(tmp_path / "local"), *SETS],
                                 stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    request.addfinalizer(lambda: local.poll() is None and local.kill())
    capsys.readouterr()
    assert main([*sweep, "--no-wait", "--leaderboard", str(board)]) == 0
    res = capsys.readouterr()
    assert "submitted, slurm job" in res.out and f"fusebench leaderboard --runs {out} --out {board}" in res.err
    cells = {s: out / "quickstart" / "infonce_pwe" / f"seed{s}" for s in (0, 1)}
    jobs = {s: json.loads((cells[s] / ".launcher.json").read_text())["job_id"] for s in (0, 1)}
    assert jobs[0].endswith("_0") and jobs[1].endswith("_1")  # one job array
    script = next((out / ".submitit" / "quickstart").glob("*_submission.sh")).read_text()
    assert "#SBATCH --partition=debug" in script and "#SBATCH --cpus-per-task=1" in script
    assert "#SBATCH --time=10" in script and "#SBATCH --comment=fusebench-test" in script

    # both cells run in their jobs and write last.pt: status names the host and the job
    _wait_for("last.pt of both cells", lambda: all((c / "last.pt").exists() for c in cells.values()), cluster)
    host = socket.gethostname()
    states = _states(out)
    for s in (0, 1):
        assert states[s] == ("running", f"running on {host} (slurm job {jobs[s]})"), states
    lock = json.loads((cells[0] / ".lock").read_text())
    assert lock["host"] == host and lock["slurm_job"] == jobs[0] and lock["pid"] > 0
    assert main(["status", "--out", str(out)]) == 0
    assert f"running: infonce_pwe/seed0: running on {host} (slurm job {jobs[0]})" in capsys.readouterr().out

    # seed 0: cancelled; seed 1: preempted (USR2 -> CellCall.checkpoint() -> scontrol requeue)
    cluster.run("scancel", jobs[0])
    cluster.run("scancel", "--signal=USR2", jobs[1])
    _wait_for("the cancelled job to leave the queue", lambda: cluster.job_state(jobs[0]) == locks.GONE, cluster)
    _wait_for("the preempted job to be requeued",
              lambda: cluster.job_state(jobs[1]) == "PENDING" and _states(out)[1][0] == "interrupted", cluster)
    states = _states(out)
    assert states[0][0] == "interrupted" and states[0][1].startswith("resumable from last.pt; slurm job")
    assert "ended without a record" in states[0][1]
    assert states[1] == ("interrupted", f"resumable from last.pt; queued: slurm job {jobs[1]} (PENDING)")
    assert not (cells[0] / "run.json").exists() and not (cells[1] / "run.json").exists()
    # the rerun submits seed 0 again (it resumes from last.pt) and waits for seed 1's requeued job,
    # which SLURM holds ~2 min before it may start again: released once the rerun has seen it queued
    rerun = subprocess.Popen([sys.executable, "-m", "fusebench", *sweep, "--resume", "--leaderboard", str(board)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        _wait_for("the rerun to submit seed 0 again",
                  lambda: json.loads((cells[0] / ".launcher.json").read_text())["job_id"] != jobs[0], cluster)
        cluster.run("scontrol", "update", f"jobid={jobs[1]}", "StartTime=now")
        stdout, stderr = rerun.communicate(timeout=240)
    finally:
        if rerun.poll() is None:
            rerun.kill()
    assert rerun.returncode == 0, stdout + stderr
    assert local.wait(timeout=240) == 0, (tmp_path / "local.log").read_text()
    assert f"quickstart/infonce_pwe/seed1: not submitted again, slurm job {jobs[1]} is on it (PENDING)" in stderr
    assert "quickstart infonce_pwe seed0: acc=" in stdout and "quickstart infonce_pwe seed1: acc=" in stdout
    for s in (0, 1):
        rec = json.loads((cells[s] / "run.json").read_text())
        ref = json.loads((tmp_path / "local" / "quickstart" / "infonce_pwe" / f"seed{s}" / "run.json").read_text())
        assert rec["metrics"] == ref["metrics"] and rec["curves"] == ref["curves"]
        assert rec["selection"] == ref["selection"] and rec["config_hash"] == ref["config_hash"]
        assert not (cells[s] / ".lock").exists()
    assert _states(out) == {0: ("done", ""), 1: ("done", "")}
    assert (board / "quickstart.md").exists() and "infonce_pwe" in (board / "quickstart.md").read_text()

    logs = out / ".submitit" / "quickstart"
    log1 = (logs / f"{jobs[1]}_0_log.out").read_text()  # the requeued job appends to its log
    assert "checkpoint: requeueing quickstart/infonce_pwe/seed1" in log1
    assert "resuming quickstart/infonce_pwe/seed1 from" in log1 and "(pretrain step" in log1
    job0_again = json.loads((cells[0] / ".launcher.json").read_text())["job_id"]
    assert job0_again != jobs[0]
    log0 = (logs / f"{job0_again}_0_log.out").read_text()
    assert "resuming quickstart/infonce_pwe/seed0 from" in log0
    step = int(log0.split("(pretrain step ")[1].split(",")[0])
    assert 0 < step < STEPS  # continued where the cancelled job's last checkpoint stood
