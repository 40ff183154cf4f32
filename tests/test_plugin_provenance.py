"""Provenance of plugins (issue #32, item 4): every record names, for each component that came from an entry
point, the distribution and its version and the module's file hash, and for an editable install from a git
checkout the checkout's revision.

The plugins are installed for real, as in tests/test_hostile_plugins.py: a ``.dist-info`` folder (METADATA,
``entry_points.txt``, optionally PEP 610's ``direct_url.json``) and the plugin module written to a temporary
folder on ``sys.path``, read by ``importlib.metadata``; only the registries' plugin caches are reset. The
expected values are worked out here: the file's sha256 with hashlib, the revision with ``git rev-parse``."""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fusebench
from fusebench import encoders, objectives
from fusebench.registry import plugin_provenance

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

PLUGIN = '''
from fusebench.encoders.mlp import MLPEncoder
from fusebench.objectives.infonce import InfoNCEPairwise


class ProvLoss(InfoNCEPairwise):
    """Pairwise InfoNCE, shipped by a plugin distribution."""


class ProvEncoder(MLPEncoder):
    """The MLP encoder, shipped by a plugin distribution."""
'''
DIST, VERSION, MODULE = "fb-prov-plugin", "0.3", "fb_prov_plugin"
SMALL = {"pretrain.epochs": 1, "downstream.epochs": 1, "dataset.synthetic_spec": {"num_samples": 64, "seed": 0}}


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``install(direct_url=None)``: the distribution written to a folder on sys.path (objective ``fb_prov_loss``,
    encoder ``fb_prov_mlp``); the two registries read their entry points again (restored after the test)."""
    for reg in (objectives.OBJECTIVES, encoders.ENCODERS):
        reg.available()
        for attr in ("_entries", "_meta", "_lazy", "_origin", "_plugin_of"):
            monkeypatch.setattr(reg, attr, dict(getattr(reg, attr, {})), raising=False)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)

    def _install(direct_url: dict | None = None, source: Path | None = None) -> Path:
        site = tmp_path / "site"
        site.mkdir()
        module = (source or site) / f"{MODULE}.py"
        module.write_text(PLUGIN)
        if source is not None:  # an editable install: the code stays in its checkout, on sys.path
            monkeypatch.syspath_prepend(str(source))
        info = site / f"{DIST.replace('-', '_')}-{VERSION}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n")
        (info / "entry_points.txt").write_text(f"[fusebench.objectives]\nfb_prov_loss = {MODULE}:ProvLoss\n\n"
                                               f"[fusebench.encoders]\nfb_prov_mlp = {MODULE}:ProvEncoder\n")
        if direct_url is not None:
            (info / "direct_url.json").write_text(json.dumps(direct_url))
        monkeypatch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        for reg in (objectives.OBJECTIVES, encoders.ENCODERS):
            monkeypatch.setattr(reg, "_plugins_loaded", False)
            monkeypatch.setattr(reg, "_plugin_names", None)
        return module

    return _install


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_run_records_each_plugin_component(install, tmp_path: Path) -> None:
    module = install()
    recs = fusebench.run("quickstart", objective=["fb_prov_loss", "none"], seeds=[0], out=tmp_path / "runs",
                         overrides={**SMALL, "encoder.id": "fb_prov_mlp"}, progress=False)
    by = {r["objective"]: r for r in recs}
    plugins = by["fb_prov_loss"]["plugins"]
    assert set(plugins) == {"objective", "encoder"}  # the dataset, protocol and pipeline are built in
    for kind, ep, group in (("objective", f"fb_prov_loss = {MODULE}:ProvLoss", "fusebench.objectives"),
                            ("encoder", f"fb_prov_mlp = {MODULE}:ProvEncoder", "fusebench.encoders")):
        p = plugins[kind]
        assert (p["distribution"], p["version"], p["entry_point"], p["group"]) == (DIST, VERSION, ep, group)
        assert p["module"] == MODULE and p["module_file"] == str(module.resolve())
        assert p["module_sha256"] == _sha(module)
        assert "direct_url" not in p  # installed from a wheel: no PEP 610 file
    # the reference row pretrains with no objective: only its encoder came from the plugin
    assert set(by["none"]["plugins"]) == {"encoder"}
    on_disk = json.loads((tmp_path / "runs" / "quickstart" / "fb_prov_loss" / "seed0" / "run.json").read_text())
    assert on_disk["plugins"] == plugins


def test_records_of_built_in_components_have_no_plugins_field(tmp_path: Path) -> None:
    small = {k: v for k, v in SMALL.items() if k != "pretrain.epochs"}  # a reference row: no pretrain.* setting
    recs = fusebench.run("quickstart", objective=["none"], seeds=[0], out=tmp_path, overrides=small, progress=False)
    assert "plugins" not in recs[0]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_an_editable_install_names_its_checkout_revision(install, tmp_path: Path) -> None:
    repo = tmp_path / "checkout"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    module = install({"url": repo.resolve().as_uri(), "dir_info": {"editable": True}}, source=repo)
    subprocess.run([*git, "add", module.name], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "plugin"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    objectives.OBJECTIVES.get("fb_prov_loss")  # imported, as a run imports it
    p = plugin_provenance(objectives.OBJECTIVES, "fb_prov_loss")
    assert p["direct_url"] == {"url": repo.resolve().as_uri(), "editable": True, "vcs_revision": head,
                               "vcs_dirty": False}
    assert p["module_sha256"] == _sha(module)
    module.write_text(PLUGIN + "\n# edited after the commit\n")
    p = plugin_provenance(objectives.OBJECTIVES, "fb_prov_loss")
    assert p["direct_url"]["vcs_dirty"] is True and p["module_sha256"] == _sha(module)


def test_a_vcs_install_names_its_commit(install) -> None:
    install({"url": "https://example.org/fb-prov-plugin.git",
             "vcs_info": {"vcs": "git", "commit_id": "0123456789abcdef0123456789abcdef01234567"}})
    p = plugin_provenance(encoders.ENCODERS, "fb_prov_mlp")
    assert p["direct_url"] == {"url": "https://example.org/fb-prov-plugin.git", "editable": False, "vcs": "git",
                               "commit_id": "0123456789abcdef0123456789abcdef01234567", "requested_revision": None}
    assert plugin_provenance(encoders.ENCODERS, "mlp") is None  # a built-in
