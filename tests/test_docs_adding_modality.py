"""docs/adding-a-modality.md cannot rot: its Python blocks run, in order, in a fresh interpreter.

The blocks define a WAV-folder adapter, build its synthetic twin, register it in-tree, run the
conformance checks on it and prepare its cache. The ``toml`` block must name the class the doc
defines; every ``fusebench data ...`` command line in the ``console`` blocks must parse.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from fusebench.datasets.cli import _parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding-a-modality.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _blocks(lang: str) -> list[str]:
    return [body for tag, body in FENCE.findall(DOC.read_text()) if tag == lang]


def test_python_blocks_run_end_to_end(tmp_path):
    blocks = _blocks("python")
    assert len(blocks) >= 5, "the walk-through lost code blocks"
    script = "\n\n".join(f"# --- block {i}\n{b}" for i, b in enumerate(blocks))
    script += "\nprint('DOC-OK')\n"
    (tmp_path / "walkthrough.py").write_text(script)
    env = dict(os.environ, FUSEBENCH_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    env.pop("FUSEBENCH_PREPARED", None)
    proc = subprocess.run([sys.executable, "walkthrough.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DOC-OK" in proc.stdout
    assert "conformance: declaration, schema, determinism" in proc.stdout


def test_entry_point_block_names_the_documented_class():
    [toml] = _blocks("toml")
    eps = tomllib.loads(toml)["project"]["entry-points"]["fusebench.datasets"]
    module, _, attr = eps["wavfolder"].partition(":")
    assert module == "my_audio.adapter"
    assert re.search(rf"^class {attr}\(MultimodalDataset\):", _blocks("python")[0], re.M)


def test_console_commands_parse():
    lines = [ln.strip() for b in _blocks("console") for ln in b.splitlines() if ln.strip()]
    assert any(" prepare " in ln for ln in lines) and any(" check " in ln for ln in lines)
    for ln in lines:
        words = ln.split()
        assert words[:2] == ["fusebench", "data"], ln
        ns = _parser().parse_args(words[2:])
        assert ns.name == "wavfolder"
