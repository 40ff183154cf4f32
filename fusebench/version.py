"""The suite's version (layer 0): recorded in every run record (``suite_version``), part of the
comparability key. Kept equal to ``project.version`` in pyproject.toml (tests/test_layers.py checks)."""

__version__ = "0.1.0"
