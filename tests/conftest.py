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
