"""Shared test fixtures.

Real sample files live in ``../shared/fixtures`` relative to the project root (never copied into the
repo). Tests that need them use the ``fixtures_dir`` fixture, which skips with a clear reason where the
folder is absent (CI has it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# One intra-op thread (torch / OpenMP / BLAS) for the test process and the subprocesses it starts,
# unless the caller chose (OMP_NUM_THREADS=2 pytest ... exercises two threads). Set before torch is
# imported. The tests' problems are tiny; on a shared, loaded 2-core machine two threads spin-waiting
# for a busy core made the suite several times slower (tests/test_runner.py + test_tuple_optim.py:
# 148 s with 2 threads, 21 s with 1). No assertion may depend on the thread count either way.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("FUSEBENCH_FIXTURES", ROOT.parent / "shared" / "fixtures"))
PAPERS = ROOT.parent / "shared" / "papers"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"real-data fixtures folder {FIXTURES} is absent: set FUSEBENCH_FIXTURES=/path/to/shared/fixtures "
                    "(CI provides ../shared/fixtures beside the checkout)")
    return FIXTURES


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Synthetic twins and prepared caches go to a per-session temp folder, not ~/.cache."""
    os.environ["FUSEBENCH_CACHE"] = str(tmp_path_factory.mktemp("fusebench-cache"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch intra-op thread for a module's tests, restored after the module. A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``. Its problems are tiny: one thread is as fast,
    and on a shared, loaded 2-core machine two threads spin-waiting for a busy core made single solves tens of
    times slower."""
    import torch  # here, not at the top: OMP_NUM_THREADS above is set before torch is first imported

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class CommittedRegeneration:
    """What :func:`committed_regeneration` made: ``first`` and ``second``, the two board folders (each with the
    runs as ``runs`` and the study boards beside), and ``written`` / ``again``, the files each regeneration wrote
    (``write_leaderboards``' list, in its order)."""

    def __init__(self, root: Path, studies: list[str], first: Path, second: Path, written: list[Path],
                 again: list[Path]) -> None:
        self.root, self.studies, self.first, self.second = root, studies, first, second
        self.written, self.again = written, again


@pytest.fixture(scope="session")
def committed_regeneration(tmp_path_factory: pytest.TempPathFactory) -> CommittedRegeneration:
    """The committed boards regenerated twice, in the formats they are committed in (``md csv json html``), from one
    snapshot of the committed runs (runs being rewritten meanwhile must not make the two differ), each into a fresh
    folder that holds the runs as ``runs`` (the pages link the records by relative path: ``first/runs`` is the
    snapshot, ``second/runs`` a link to it) and the study boards (``*-kviews.*``: a board links the study found
    beside it). The curves plots and the CD diagram are not drawn (slow; tests/test_leaderboard_fingerprint.py
    compares every committed file, plots included). One fixture for the session: the markdown, CSV / JSON and HTML
    tests compare their own files of these two regenerations instead of regenerating every board themselves."""
    import shutil

    from fusebench.leaderboard import index as index_page
    from fusebench.leaderboard import plots, write_leaderboards

    root = ROOT / "leaderboards"
    base = tmp_path_factory.mktemp("committed-boards")
    first, second = base / "first", base / "second"
    shutil.copytree(root / "runs", first / "runs", ignore=shutil.ignore_patterns(".*"))
    second.mkdir()
    (second / "runs").symlink_to(first / "runs", target_is_directory=True)
    studies = sorted(p.name for p in root.glob("*-kviews.*"))
    for out in (first, second):
        for name in studies:
            (out / name).write_bytes((root / name).read_bytes())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "plot_curves", lambda view, path: False)
        mp.setattr(index_page, "draw_cd_diagram", lambda ranking, path: False)
        written = write_leaderboards(first / "runs", first, formats=("md", "csv", "json", "html"))
        again = write_leaderboards(second / "runs", second, formats=("md", "csv", "json", "html"))
    return CommittedRegeneration(root, studies, first, second, written, again)
