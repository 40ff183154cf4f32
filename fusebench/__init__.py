"""fusebench: a PyTorch benchmark suite for multimodal and multi-view representation learning.

Sub-packages: ``fusebench.objectives`` (losses), ``fusebench.datasets`` (adapters),
``fusebench.encoders`` (encoders and heads), ``fusebench.metrics``, ``fusebench.benchmarks`` (specs); the layers
that run them, one folder each (docs/architecture.md): ``runtime``, ``spec``, ``components``, ``engine`` /
``probes``, ``records``, ``cells``, ``sweep`` / ``studies``, ``leaderboard`` / ``cli``.
``fusebench.run(name, ...)`` runs a benchmark from Python.
"""

from __future__ import annotations

from typing import Any

from fusebench.version import __version__


def run(benchmark: str, **kwargs: Any):
    """Run benchmark ``benchmark`` by name; see :func:`fusebench.sweep.runner.run`."""
    from fusebench.sweep.runner import run as _run

    return _run(benchmark, **kwargs)


__all__ = ["__version__", "run"]
