"""Shared test fixtures.

Real sample files live in ``../shared/fixtures`` relative to the project root (never copied into the
repo). Tests that need them use the ``fixtures_dir`` fixture, which skips with a clear reason where the
folder is absent (CI has it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("FUSEBENCH_FIXTURES", ROOT.parent / "shared" / "fixtures"))
PAPERS = ROOT.parent / "shared" / "papers"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"real-data fixtures folder {FIXTURES} is absent (CI provides ../shared/fixtures)")
    return FIXTURES


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Synthetic twins and prepared caches go to a per-session temp folder, not ~/.cache."""
    os.environ["FUSEBENCH_CACHE"] = str(tmp_path_factory.mktemp("fusebench-cache"))
