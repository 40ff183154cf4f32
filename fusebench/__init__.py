"""fusebench: a PyTorch benchmark suite for multimodal and multi-view representation learning.

Sub-packages: ``fusebench.objectives`` (losses), ``fusebench.datasets`` (adapters),
``fusebench.encoders`` (encoders and heads), ``fusebench.metrics``, ``fusebench.benchmarks`` (specs); the layers
that run them, one folder each (docs/architecture.md): ``runtime``, ``spec``, ``components``, ``engine`` /
``probes``, ``records``, ``cells``, ``sweep`` / ``studies``, ``leaderboard`` / ``cli``.
``fusebench.run(name, **options)`` runs a benchmark from Python; the options are those of
:class:`fusebench.SweepRequest` (``fusebench run --help``), which it builds and checks before anything runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fusebench.version import __version__


def run(benchmark: "str | SweepRequest", **options: Any) -> list[dict[str, Any]]:
    """Run benchmark ``benchmark`` by name with ``options`` (the fields of :class:`SweepRequest`, e.g.
    ``objectives=["m3g"], seeds=[0], out="runs", data_root=...``), or run a :class:`SweepRequest`; returns the
    run records. See :func:`fusebench.sweep.runner.run`."""
    from fusebench.sweep.runner import run as _run

    return _run(benchmark, **options)


def __getattr__(name: str) -> Any:
    if name == "SweepRequest":  # imported when asked for: ``import fusebench`` stays light
        from fusebench.spec.request import SweepRequest

        return SweepRequest
    raise AttributeError(f"module 'fusebench' has no attribute {name!r}")


if TYPE_CHECKING:
    from fusebench.spec.request import SweepRequest

__all__ = ["SweepRequest", "__version__", "run"]
