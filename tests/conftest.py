"""Shared test fixtures.

Real sample files live in ``../shared/fixtures`` relative to the project root (never copied into the
repo). Tests that need them use the ``fixtures_dir`` fixture, which skips with a clear reason where the
folder is absent (CI has it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

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


class CommittedRegeneration(NamedTuple):
    """What :func:`committed_regeneration` made: ``folder`` (the boards, the runs as ``runs``, the study boards
    beside), ``written`` / ``again`` (``write_leaderboards``' lists of the two regenerations) and ``first`` /
    ``second`` (name -> (bytes, mtime_ns) of every file in ``folder`` after each)."""
    root: Path
    studies: list[str]
    folder: Path
    written: list[Path]
    again: list[Path]
    first: dict[str, tuple[bytes, int]]
    second: dict[str, tuple[bytes, int]]


@pytest.fixture(scope="session")
def committed_regeneration(tmp_path_factory: pytest.TempPathFactory) -> CommittedRegeneration:
    """The committed boards regenerated twice, in the formats they are committed in (``md csv json html``), from one
    snapshot of the committed runs (runs being rewritten meanwhile must not make the two differ): first into a fresh
    folder holding the runs as ``runs`` (the pages link the records by relative path) and the study boards
    (``*-kviews.*``: a board links the study found beside it), then again in place, which must leave every file as it
    was, bytes and modification time (a file whose text did not change is not rewritten). The curves plots and the CD
    diagram are not drawn (slow; tests/test_leaderboard_fingerprint.py compares every committed file, plots
    included). One fixture for the session: the markdown, CSV / JSON and HTML tests compare their own files of these
    regenerations instead of regenerating every board themselves."""
    import shutil

    from fusebench.leaderboard import index as index_page
    from fusebench.leaderboard import plots, write_leaderboards

    def state(folder: Path) -> dict[str, tuple[bytes, int]]:
        return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_file()}

    root = ROOT / "leaderboards"
    folder = tmp_path_factory.mktemp("committed-boards") / "boards"
    shutil.copytree(root / "runs", folder / "runs", ignore=shutil.ignore_patterns(".*"))
    studies = sorted(p.name for p in root.glob("*-kviews.*"))
    for name in studies:
        (folder / name).write_bytes((root / name).read_bytes())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "plot_curves", lambda view, path: False)
        mp.setattr(index_page, "draw_cd_diagram", lambda ranking, path: False)
        written = write_leaderboards(folder / "runs", folder, formats=("md", "csv", "json", "html"))
        first = state(folder)
        again = write_leaderboards(folder / "runs", folder, formats=("md", "csv", "json", "html"))
        second = state(folder)
    return CommittedRegeneration(root, studies, folder, written, again, first, second)
