"""Run the ``>>>`` examples of every fusebench module as doctests.

Every module under the packages below is imported (``pkgutil.walk_packages``); a module whose import
needs an optional dependency that is not installed (e.g. ``open3d``) is reported as a skip naming that
dependency. Each module with at least one example is one test case, failing with doctest's report.
``test_examples_found`` guards against the discovery silently finding nothing.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import torch

PACKAGES = (
    "fusebench",
    "fusebench.objectives",
    "fusebench.encoders",
    "fusebench.metrics",
    "fusebench.datasets",
    "fusebench.runtime",
    "fusebench.spec",
    "fusebench.components",
    "fusebench.engine",
    "fusebench.probes",
    "fusebench.records",
    "fusebench.cells",
    "fusebench.sweep",
    "fusebench.studies",
)

#: modules with examples when this test was written (fusebench.objectives.{infonce, multicrop,
#: polyview, mv_infonce, byol, tuple_infonce, matching_gap, m3g, sinkhorn} and
#: fusebench.encoders.pointnet2); raise it when adding examples
MIN_MODULES_WITH_EXAMPLES = 10

#: dependencies declared as optional extras in pyproject.toml (``[audio]``, ``[extract]``,
#: ``[pointcloud]``); a module that cannot be imported for another reason is an error, not a skip
OPTIONAL_DEPENDENCIES = {"open3d", "transformers", "torchaudio", "soundfile"}

OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_names() -> list[str]:
    names: set[str] = set(PACKAGES)
    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg_name + "."):
            if info.name.rsplit(".", 1)[-1] == "__main__":  # runs the CLI on import
                continue
            names.add(info.name)
    return sorted(names)


def _collect() -> tuple[list, list[str]]:
    """(pytest params, names of the modules with examples)."""
    params, with_examples = [], []
    finder = doctest.DocTestFinder(exclude_empty=True)
    for name in _module_names():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if missing not in OPTIONAL_DEPENDENCIES:
                raise
            params.append(pytest.param(name, marks=pytest.mark.skip(
                reason=f"{name} needs the optional dependency {missing!r}, not installed"), id=name))
            continue
        if any(t.examples for t in finder.find(module, name)):
            with_examples.append(name)
            params.append(pytest.param(name, id=name))
    return params, with_examples


PARAMS, MODULES_WITH_EXAMPLES = _collect()


@pytest.mark.parametrize("module_name", PARAMS)
def test_module_doctests(module_name: str) -> None:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    reports: list[str] = []
    attempted = failed = 0
    for test in sorted(finder.find(module, module_name), key=lambda t: t.name):
        if not test.examples:
            continue
        with torch.random.fork_rng(devices=[]):  # examples seed the global RNG; leave it as found
            result = runner.run(test, out=reports.append)
        attempted += result.attempted
        failed += result.failed
    assert attempted > 0, f"{module_name}: no examples found"
    assert failed == 0, f"{module_name}: {failed} of {attempted} examples failed\n" + "".join(reports)


def test_examples_found() -> None:
    assert len(MODULES_WITH_EXAMPLES) >= MIN_MODULES_WITH_EXAMPLES, (
        f"only {len(MODULES_WITH_EXAMPLES)} modules with >>> examples found "
        f"(expected >= {MIN_MODULES_WITH_EXAMPLES}): {MODULES_WITH_EXAMPLES}"
    )
