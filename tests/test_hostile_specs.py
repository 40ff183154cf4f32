"""Hostile ids and spec files (issue #29, items 5 and 7): every one is refused with one error naming the
file (or the --set key) and the limit or the closest valid key, and a bad file in a spec folder never
blocks the other benchmarks.

The YAML limits are checked against sizes worked out by hand here: the expanded size of a document is its
nodes plus the characters of its scalars, every alias counted as a full copy of its anchor."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from fusebench import benchmarks
from fusebench.registry import DuplicateIdError, PluginWarning, Registry, valid_id
from fusebench.spec.config import ConfigError, parse_override
from fusebench.components.spec_check import load_spec
from fusebench.typed import load_yaml

QUICKSTART = benchmarks.HERE / "quickstart.yaml"


def _spec(folder: Path, stem: str, extra: str = "") -> Path:
    """The quickstart spec copied to ``folder/<stem>.yaml`` with ``extra`` appended."""
    path = folder / f"{stem}.yaml"
    path.write_text(QUICKSTART.read_text() + extra)
    return path


# -- item 5: ids are whole strings --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["quickstart\n", "qs\n", "a\n", "seed0\n"])
def test_an_id_with_a_trailing_newline_is_not_an_id(name: str) -> None:
    assert not valid_id(name) and valid_id(name[:-1])
    with pytest.raises(ValueError, match="is invalid"):
        Registry("widget").add(name, object())


def test_set_name_with_a_newline_is_one_config_error_and_writes_nothing(tmp_path: Path, capsys) -> None:
    from fusebench.cli import main

    out = tmp_path / "out"
    rc = main(["run", "quickstart", "--out", str(out), "--objective", "none", "--seeds", "0", "--no-progress",
               "--set", 'name="qs\\n"'])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "quickstart.yaml: name 'qs\\n' is not a valid benchmark id" in err[0]
    assert not out.exists() or not any(out.iterdir())  # no folder named 'qs\n', nothing half-written


# -- item 7: YAML limits ------------------------------------------------------------------------------
def _billion_laughs(levels: int = 9) -> str:
    """The classic alias bomb: 9 levels of 9 aliases, 9**9 (387 million) scalars once expanded."""
    lines = ["  l0: &l0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_under_options_is_refused_naming_the_file_and_the_limit(tmp_path: Path) -> None:
    bomb = _spec(tmp_path, "bomb", "options:\n" + _billion_laughs())
    with pytest.raises(ConfigError, match=r"bomb\.yaml: larger than 1,000,000 nodes and scalar characters once its "
                                          r"aliases are expanded"):
        load_spec(bomb)
    # anchors under a key nothing type-checks, the bomb under protocol_notes: the size limit alone refuses it
    notes = _spec(tmp_path, "notes", "protocol_notes:\n  data: x\n  bomb: *l8\n")
    notes.write_text(notes.read_text().replace("protocol_notes:\n  data: x", "options:\n" + _billion_laughs()
                                               + "protocol_notes:\n  data: x", 1))
    with pytest.raises(ConfigError, match=r"notes\.yaml: larger than 1,000,000"):
        load_spec(notes)
    # and through --set (the value is YAML too)
    with pytest.raises(ConfigError, match=r"--set options: larger than 1,000,000"):
        parse_override("options={" + ", ".join(
            [f"l0: &l0 [{', '.join(['lol'] * 9)}]"] + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]"
                                                        for i in range(1, 9)]) + "}")


@pytest.mark.parametrize("m, ok", [(332, True), (333, False)])
def test_the_expanded_size_limit_is_exact(m: int, ok: bool) -> None:
    # a: a list of N scalars 'xx'; b: a list of m aliases of it. Expanded: the top mapping (1), key 'a'
    # (1 + 1), list a (1 + 3N), key 'b' (1 + 1), list b (1 + m (1 + 3N)) = 6 + (m + 1)(3N + 1).
    n = 1000
    text = "a: &a [" + ", ".join(["xx"] * n) + "]\nb: [" + ", ".join(["*a"] * m) + "]\n"
    size = 6 + (m + 1) * (3 * n + 1)
    assert (size <= 1_000_000) is ok  # 999,339 and 1,002,340
    if ok:
        data = load_yaml(text, "doc")
        assert len(data["b"]) == m and data["b"][0] == ["xx"] * n
    else:
        with pytest.raises(ConfigError, match="doc: larger than 1,000,000"):
            load_yaml(text, "doc")


def test_deep_nesting_is_one_config_error_not_a_recursion_error(tmp_path: Path) -> None:
    deep = _spec(tmp_path, "deep", "\nextra_notes: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml: nested deeper than 50 levels \(line \d+\)"):
        load_spec(deep)
    # the top mapping is level 1: 49 lists inside it are 50 levels (read), 50 lists are 51 (refused)
    inner = load_yaml("a: " + "[" * 49 + "]" * 49, "doc")["a"]
    levels = 1
    while inner:
        inner, levels = inner[0], levels + 1
    assert levels == 49
    with pytest.raises(ConfigError, match="doc: nested deeper than 50 levels"):
        load_yaml("a: " + "[" * 50 + "]" * 50, "doc")
    # nesting built from aliases counts as expanded: 40 levels, then 11 more around an alias of them
    with pytest.raises(ConfigError, match="doc: nested deeper than 50 levels once its aliases are expanded"):
        load_yaml("a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 10 + "*a" + "]" * 10 + "\n", "doc")


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "loop", "options:\n  board: &me [study, *me]\n")
    with pytest.raises(ConfigError, match=r"loop\.yaml: an alias used inside its own anchor"):
        load_spec(spec)


# -- item 7: unknown keys everywhere ------------------------------------------------------------------
def test_an_unknown_options_key_is_refused_with_the_closest(tmp_path: Path) -> None:
    typo = _spec(tmp_path, "typo", "options:\n  linear_prob: {single_view: true}\n")
    with pytest.raises(ConfigError, match=r"typo\.yaml: options\.linear_prob: unknown option of the standard pipeline "
                                          r"\(did you mean 'linear_probe'\?\); valid: board, linear_probe"):
        load_spec(typo)
    mi = tmp_path / "mi.yaml"
    mi.write_text((benchmarks.HERE / "polyview-gaussian-mi.yaml").read_text()
                  .replace("samples_per_batch: 192", "sample_per_batch: 192"))
    with pytest.raises(ConfigError, match=r"options\.sample_per_batch: unknown option of the gaussian_mi pipeline "
                                          r"\(did you mean 'samples_per_batch'\?\)"):
        load_spec(mi)
    # a key that is not a string is named, with what was expected (no TypeError from sorting mixed keys): the
    # spec's mappings are keyed by text (options: dict[str, Any])
    odd = _spec(tmp_path, "odd", "options:\n  1: x\n  zz: y\n")
    with pytest.raises(ConfigError, match=r"odd\.yaml: options key 1: expected str, got int 1"):
        load_spec(odd)


def test_an_unknown_synthetic_spec_field_is_refused_at_load(tmp_path: Path) -> None:
    # it reached the adapter as SyntheticSpec(**...): a TypeError traceback in the cell
    with pytest.raises(ConfigError, match=r"quickstart\.yaml: dataset\.synthetic_spec: unknown key\(s\) "
                                          r"\['num_sample'\] \(did you mean 'num_samples'\?\)"):
        load_spec(QUICKSTART, overrides={"dataset.synthetic_spec": {"num_sample": 32}})


def test_mixed_unknown_top_level_keys_are_one_config_error(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "mixed", "1: x\ndescriptoin: y\n")
    with pytest.raises(ConfigError, match=r"mixed\.yaml: BenchmarkSpec: unknown key\(s\) \['descriptoin', 1\] \(did you mean 'description'\?\)"):
        load_spec(spec)


def test_a_spec_that_is_not_utf8_is_one_config_error(tmp_path: Path) -> None:
    spec = tmp_path / "binary.yaml"
    spec.write_bytes(b"description: \xff\xfe\x00\n")
    with pytest.raises(ConfigError, match=r"binary\.yaml: cannot be read as a UTF-8 YAML file"):
        load_spec(spec)


# -- item 7: spec folders -----------------------------------------------------------------------------
def test_a_badly_named_spec_file_is_named_in_a_warning_and_left_out(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "My Bench.yaml").write_text("description: x\n")
    _spec(tmp_path, "mine")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path))
    with pytest.warns(PluginWarning, match=r"My Bench\.yaml: its file name 'My Bench' is not a benchmark id"):
        names = benchmarks.available()
    assert "quickstart" in names and "mine" in names and not [n for n in names if " " in n]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        assert benchmarks.load("quickstart").name == "quickstart"  # every run is not blocked


def test_fusebench_list_names_each_bad_spec_and_lists_the_rest(tmp_path: Path, monkeypatch, capsys) -> None:
    from fusebench.cli import main

    (tmp_path / "My Bench.yaml").write_text("description: x\n")
    _spec(tmp_path, "deep", "\nextra: " + "[" * 3000 + "]" * 3000 + "\n")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path))
    assert main(["list", "benchmarks"]) == 0
    out, err = capsys.readouterr()
    assert {line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")} >= set(benchmarks.builtin())
    err_lines = err.strip().splitlines()
    assert len(err_lines) == 2, err_lines
    assert any("My Bench.yaml" in line and line.startswith("warning: ") for line in err_lines)
    assert any("deep.yaml: nested deeper than 50 levels" in line for line in err_lines)


def test_list_of_an_id_left_out_says_why_before_no_such_id(tmp_path: Path, monkeypatch, capsys) -> None:
    """`fusebench list benchmarks 'My Bench'`: the spec file left out is named (its warning), then the missing id;
    the warning used to be dropped by the early 'no such id' return."""
    from fusebench.cli import main

    (tmp_path / "My Bench.yaml").write_text("description: x\n")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path))
    assert main(["list", "benchmarks", "My Bench"]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 2, lines
    assert lines[0].startswith("warning: ") and "My Bench.yaml: its file name 'My Bench' is not" in lines[0]
    assert lines[1].startswith("fusebench list: no benchmark 'My Bench'")


def test_a_spec_claiming_another_benchmarks_name_is_a_duplicate_naming_both_files(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    _spec(tmp_path, "other", "name: quickstart\n")
    monkeypatch.setenv("FUSEBENCH_BENCHMARKS", str(tmp_path))
    with pytest.raises(DuplicateIdError, match=r"benchmark id 'quickstart' is claimed twice: by "
                                               r".*benchmarks/quickstart\.yaml \(its file name\) and by "
                                               r".*other\.yaml \(its name: key\)"):
        benchmarks.load("other")
    # a name: that differs from the stem and claims nothing registered: refused too, naming the file
    (tmp_path / "other.yaml").unlink()
    lone = _spec(tmp_path, "lone", "name: somewhere-else\n")
    with pytest.raises(ConfigError, match=r"lone\.yaml: name 'somewhere-else' differs from the file's stem 'lone'"):
        load_spec(lone)
    # the stem as name: and --set name=... (a renamed run, e.g. the k-views study's) still work
    assert load_spec(_spec(tmp_path, "same", "name: same\n")).name == "same"
    assert load_spec(QUICKSTART, overrides={"name": "quickstart-v2"}).name == "quickstart-v2"
