"""The generic registry: ids, duplicates, typos, lazy entries and entry-point plugins."""

from __future__ import annotations

import importlib.metadata as md
import sys
import types

import pytest

from fusebench import registry as R


def test_register_build_available_and_typos() -> None:
    reg = R.Registry("widget")

    @reg.register("alpha_one", note="x")
    def alpha(v=1):
        return ("alpha", v)

    reg.add("beta", lambda: "b")
    assert reg.available() == ["alpha_one", "beta"] and reg.available("a*") == ["alpha_one"]
    assert reg.build("ALPHA_ONE", v=3) == ("alpha", 3) and reg.meta("alpha_one") == {"note": "x"}
    # `in` matches ids exactly (a spec's keys are checked with it); get forgives the case
    assert "alpha_one" in reg and "ALPHA_ONE" not in reg and "gamma" not in reg and 3 not in reg
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("beta", object())
    with pytest.raises(ValueError, match="lowercase"):
        reg.add("Bad Name", object())
    with pytest.raises(R.UnknownNameError, match=r"Did you mean 'alpha_one'\?.*Valid widget ids: alpha_one, beta"):
        reg.get("alpha_on")


def _fake_plugin(monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, list[md.EntryPoint]]:
    """A module ``fb_fake_plugin`` with a class ``Thing`` and two entry points of group ``fusebench.widgets`` naming
    it, ``gamma`` and ``beta`` (the list is live: a test may pop one)."""
    mod = types.ModuleType("fb_fake_plugin")
    mod.Thing = type("Thing", (), {})
    monkeypatch.setitem(sys.modules, "fb_fake_plugin", mod)
    eps = [md.EntryPoint("gamma", "fb_fake_plugin:Thing", "fusebench.widgets"),
           md.EntryPoint("beta", "fb_fake_plugin:Thing", "fusebench.widgets")]
    monkeypatch.setattr(R, "entry_points", lambda group: [e for e in eps if e.group == group])
    return mod, eps


def _widgets() -> R.Registry:
    """A widget registry with the built-in ``beta`` and the lazy built-in ``delta``, reading the plugins."""
    reg = R.Registry("widget", entry_point_group="fusebench.widgets")
    reg.add("beta", "builtin")
    reg.add_lazy("delta", "fb_fake_plugin:Thing")
    return reg


def test_lazy_entries_and_entry_point_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, eps = _fake_plugin(monkeypatch)
    reg = _widgets()
    # a plugin cannot take a built-in id: left out with one warning naming its entry point and the owner
    with pytest.warns(R.PluginWarning, match=r"widget plugin left out: entry point 'beta = fb_fake_plugin:Thing' "
                                             r"\(group fusebench.widgets\) \(distribution unknown\): widget id "
                                             r"'beta' is taken already \(by \?:str\)"):
        assert reg.available() == ["beta", "delta", "gamma"]
    assert reg.get("beta") == "builtin"
    eps.pop()  # without the clash, the plugin is listed and imported on first use
    reg = _widgets()
    assert reg.available() == ["beta", "delta", "gamma"]
    assert reg.get("gamma") is mod.Thing and reg.get("delta") is mod.Thing
    assert reg.get("beta") == "builtin"


def test_builtin_leaves_out_what_entry_points_supply(monkeypatch: pytest.MonkeyPatch) -> None:
    """builtin(): available() less the ids an entry-point plugin supplied (fusebench's own tests iterate it, so a
    plugin a researcher installed never fails them); a plugin that claims a built-in id leaves the built-in in."""
    mod, eps = _fake_plugin(monkeypatch)
    reg = _widgets()
    with pytest.warns(R.PluginWarning, match="widget id 'beta' is taken already"):
        assert reg.builtin() == ["beta", "delta"]
    assert reg.available() == ["beta", "delta", "gamma"] and reg.builtin("d*") == ["delta"] and reg.builtin("g*") == []
    assert reg.plugin("gamma") is not None and reg.plugin("beta") is None


def test_builtin_modules_load_on_first_lookup_and_duplicates_are_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = R.Registry("widget", modules=("fb_fake_widgets",), describe=lambda obj: {"doc": obj.__doc__})
    mod = types.ModuleType("fb_fake_widgets")
    imported = []

    def _exec() -> None:
        imported.append(1)

        @reg.register("one", paper="x")
        class One:
            """first"""

    monkeypatch.setitem(sys.modules, "fb_fake_widgets", mod)
    monkeypatch.setattr(R.importlib, "import_module", lambda name: (_exec(), mod)[1])
    assert imported == []  # nothing imported at declaration
    assert reg.available() == ["one"] and imported == [1]
    reg.available()
    assert imported == [1]  # once
    assert reg.meta("one") == {"doc": "first", "paper": "x"}  # described, then registration metadata
    with pytest.raises(R.DuplicateIdError, match=r"widget id 'one' is registered twice: by .*One and by .*"):
        reg.add("one", object())


def test_duplicate_benchmark_specs_are_an_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fusebench.benchmarks as B

    (tmp_path / "quickstart.yaml").write_text("description: shadow\n")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path))
    with pytest.raises(R.DuplicateIdError, match=r"benchmark id 'quickstart' is registered twice: by .*"
                                                 r"benchmarks/quickstart.yaml and by .*quickstart.yaml"):
        B.available()
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(B.HERE))  # the same folder twice is no duplicate
    assert "quickstart" in B.available()


def test_objective_metadata_comes_from_the_class() -> None:
    from fusebench import objectives

    meta = objectives.OBJECTIVES.meta("matching_gap")
    assert meta["min_views"] == 2 and meta["max_views"] == 2 and meta["input_kind"] == "views"
    assert [o.name for o in meta["options"]] == ["eps", "cost", "tol", "max_iter"]


@pytest.mark.parametrize("name", ["datasets", "objectives", "encoders", "benchmarks"])
def test_top_level_folders_are_not_importable_bare(name: str, tmp_path) -> None:
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # from the repo root (cwd on sys.path) the folder refuses to be imported under its bare name
    r = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=root, capture_output=True, text=True)
    assert r.returncode != 0 and f"import this folder as fusebench.{name}" in r.stderr
    # elsewhere the bare name is not ours at all
    r = subprocess.run([sys.executable, "-c", f"import importlib.util as u, sys; s = u.find_spec({name!r}); "
                        f"sys.exit(1 if s and str(s.origin).startswith({str(root)!r}) else 0)"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_plugin_benchmarks_are_listed_but_not_builtin(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark installed through the entry points shows in available(), not in builtin(): our
    own tests iterate builtin(), so a third-party spec without protocol_notes cannot fail them."""
    import importlib.metadata as md

    import fusebench.benchmarks as B

    (tmp_path / "plugin-bench.yaml").write_text("description: x\n")
    ep = md.EntryPoint(name="mine", value=str(tmp_path), group="fusebench.benchmarks")
    monkeypatch.setattr(B, "entry_points", lambda group: [ep] if group == "fusebench.benchmarks" else [])
    assert "plugin-bench" in B.available()
    assert "plugin-bench" not in B.builtin() and "quickstart" in B.builtin()
    assert set(B.builtin()) <= set(B.available())
