"""Every registered dataset adapter passes every conformance check (fusebench.datasets.conformance).

Parametrised over ``fusebench.datasets.available()`` at collection time, so a new adapter (in-tree or
from an entry point) is tested automatically, on its small synthetic twin: declaration, schema
(layouts of base.MODALITY_LAYOUT, dtypes, target type by task, meta id), determinism, length and
index errors, collate layout, missing-modality handling, synthetic twin round-trip through the real
reader, and prepared-cache round-trip. That the checks can fail is tested in test_dataset_cache.py.
"""

from __future__ import annotations

import pytest

from fusebench import datasets
from fusebench.datasets.conformance import CHECKS, check_adapter

ADAPTERS = datasets.available()


def test_some_adapter_is_registered():
    assert "quickstart" in ADAPTERS


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("name", ADAPTERS)
def test_conformance(name, check):
    assert check_adapter(name, checks=[check]) == [check]
