"""Review findings on records, strict JSON and the one-time migration scripts: numpy numbers and circular
values in :func:`fusebench.io.strict_json`, the bounded YAML loader for ``reported.yaml``, the migration
scripts' one-line errors naming the file, and ``migrate_hash_schema_3``'s fixed target schema."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fusebench.io import canonical_json, finite_json, strict_json

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("migrate_hash_schema_2", "migrate_hash_schema_3", "migrate_hash_schema_4", "migrate_data_fingerprint")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- strict JSON: numpy numbers, circular values ------------------------------------------------------------------
@pytest.mark.parametrize("default", [None, str])
def test_numpy_numbers_are_numbers_and_non_finite_ones_null(default) -> None:
    value = {"nan": np.float32("nan"), "inf": np.float32("-inf"), "half": np.float32(0.5), "three": np.int64(3),
             "list": [np.float16("nan"), np.float64("inf")]}
    # 0.5 is exact in float32; np.float64 is a float already (its inf -> null as any float's)
    want = '{"half": 0.5, "inf": null, "list": [null, null], "nan": null, "three": 3}'
    assert strict_json(value, default=default, sort_keys=True) == want
    assert json.loads(want) == finite_json(value, default)
    assert canonical_json([np.float32("nan"), np.float32(2.0)]) == "[null,2.0]"


@pytest.mark.parametrize("make", [
    lambda: (lambda a: (a.append(a), a)[1])([]),  # a list that holds itself
    lambda: (lambda d: (d.update(me=d), d)[1])({"a": math.nan}),  # with a NaN first: the slow path meets it
    lambda: (lambda d: (d.update(me=[d]), d)[1])({"a": np.float32("nan")})])
def test_a_circular_value_is_json_s_own_error(make) -> None:
    with pytest.raises(ValueError, match="Circular reference"):
        strict_json(make())


# -- reported.yaml: the bounded loader -----------------------------------------------------------------------------
def test_reported_yaml_alias_bomb_is_one_error_naming_the_file(tmp_path: Path) -> None:
    from fusebench.leaderboard.reported import load_reported

    lines = ["- &a [x, x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):  # each level 10 aliases of the one before: 10^9 scalars expanded
        prev = "abcdefghi"[i]
        lines.append(f"- &{name} [{', '.join(['*' + prev] * 10)}]")
    path = tmp_path / "reported.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"^{path}: larger than 1,000,000 nodes .* once its aliases are expanded"):
        load_reported(path)


def test_a_bad_reported_entry_names_the_file_with_control_characters_escaped(tmp_path: Path) -> None:
    """The error of an entry names the file as every other reported.yaml error does: a control character in its
    path (here an escape sequence, which would clear a terminal) shown as Python's quoted repr, never raw."""
    from fusebench.leaderboard.reported import load_reported

    folder = tmp_path / "a\x1b[2Jb"
    folder.mkdir()
    path = folder / "reported.yaml"
    path.write_text("- just a string\n")
    with pytest.raises(ValueError) as err:
        load_reported(path)
    assert str(err.value) == f"{str(path)!r}: entry 0: expected a mapping, got str"
    assert "\x1b" not in str(err.value)  # the raw escape character (the message holds its repr: backslash, x1b)


# -- the migration scripts: one line naming the file ---------------------------------------------------------------
@pytest.mark.parametrize("name", SCRIPTS)
@pytest.mark.parametrize("text, what", [("{not json", "readable JSON file"), ("[1, 2]", "a JSON object"),
                                        (b"\xff\xfe", "readable JSON file")])
def test_a_malformed_record_is_one_error_line_naming_it(tmp_path: Path, capsys, name: str, text, what: str) -> None:
    path = tmp_path / "runs" / "b" / "x" / "seed0" / "run.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert _script(name).main([str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: ") and what in err[0], err


def test_migrate_hash_schema_3_writes_schema_3_whatever_the_current_schema(monkeypatch) -> None:
    from fusebench.components import identity
    from fusebench.spec import config

    rec = json.loads((ROOT / "leaderboards" / "runs" / "quickstart" / "m3g" / "seed0" / "run.json").read_text())
    old = copy.deepcopy(rec)
    old["hash_schema"] = 2
    old["config_hash"] = identity.config_hash(old["config"], old["objective"], 2)
    monkeypatch.setattr(config, "HASH_SCHEMA_VERSION", 4)  # a later schema: the script still writes 3
    script = _script("migrate_hash_schema_3")
    assert script.TO_SCHEMA == 3
    out = script.migrate(old, "run.json")
    assert out["hash_schema"] == 3
    assert script.migrate({**old, "hash_schema": 3}, "run.json") is None
    assert script.migrate({**old, "hash_schema": 4}, "run.json") is None  # later: left alone


def test_migrate_hash_schema_2_docstring_keeps_its_list_whole() -> None:
    doc = _script("migrate_hash_schema_2").__doc__
    bullets = [i for i, line in enumerate(doc.splitlines()) if line.startswith("* ")]
    later = next(i for i, line in enumerate(doc.splitlines()) if line.startswith("Schema 3 came later"))
    assert later > bullets[-1]
    block = doc.splitlines()[bullets[0]:bullets[-1] + 1]
    assert all(line.startswith(("* ", "  ")) for line in block)  # bullets and their continuation lines only


def test_a_record_is_read_as_utf8_whatever_the_locale(tmp_path) -> None:
    """Records are written as UTF-8 (fusebench.io.atomic_write_text); they were read with the locale's encoding, so
    a record holding non-ASCII text (a device name, a note) failed to read under an ASCII or Latin-1 locale (Windows'
    cp1252 misreads it silently). Read here in a Python whose locale encoding is ASCII (no UTF-8 mode, no coercion)."""
    import json
    import os
    import subprocess
    import sys

    path = tmp_path / "run.json"
    path.write_bytes(json.dumps({"note": "Müller — 測試"}, ensure_ascii=False).encode("utf-8"))
    code = ("import locale, sys; from fusebench.records.schema import read_record_json; "
            "enc = locale.getpreferredencoding(False).lower(); assert enc in ('ascii', 'ansi_x3.4-1968'), enc; "
            "print(ascii(read_record_json(sys.argv[1])['note']))")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    out = subprocess.run([sys.executable, "-X", "utf8=0", "-c", code, str(path)], env=env, capture_output=True,
                         text=True, encoding="utf-8", timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ascii("Müller — 測試")
