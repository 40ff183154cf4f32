"""A planted board whose metadata Python cannot take as it is (hostile round, F7): nested 100000 levels deep (a
RecursionError traceback), an integer of 5000 digits (Python's 4300-digit limit, naming no file), a lone surrogate in
a text field (the index could not be written as UTF-8, after the boards were). Each is one ``ValueError`` naming the
board file and what is wrong, which ``fusebench leaderboard`` prints as one line, as for any damaged board, before
it writes anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fusebench.leaderboard.meta import read_board_meta
from test_leaderboard_hostile_2 import _one_error_line
from test_records_hostile import _copy

GROUP = {"kind": "real", "dataset": "d", "synthetic": False, "objectives": 2, "seeds": [0, 1], "runs": 4,
         "best": "`raw` (acc 50.00 ± 0.00 (2))", "title": None, "key": "k", "protocol": "task_head", "primary": "acc",
         "reference": None}


def _board(folder: Path, comment_json: str, name: str = "evil") -> Path:
    """A board file whose metadata comment holds ``comment_json`` as written (not re-encoded here)."""
    path = folder / f"{name}.md"
    path.write_text(f"# Leaderboard: {name}\n\ntext\n\n<!-- fusebench-board {comment_json} -->\n", encoding="utf-8")
    return path


def _meta_json(**group: Any) -> str:
    return json.dumps({"benchmark": "evil", "format": 2, "groups": [GROUP | group]})


def _with(field: str, literal: str) -> str:
    """The metadata JSON with the group's ``field`` given as the raw JSON ``literal``."""
    return _meta_json(**{field: "@@"}).replace('"@@"', literal)


def _refused(path: Path, *says: str) -> str:
    with pytest.raises(ValueError) as e:
        read_board_meta(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and all(s in msg for s in says), msg
    assert len(msg) < 600
    return msg


def test_the_planted_group_is_read_as_it_is(tmp_path: Path) -> None:
    """The base of the cases below is a valid board: what is refused is the one thing each changes."""
    meta = read_board_meta(_board(tmp_path, _meta_json()))
    assert meta["groups"][0]["runs"] == 4
    assert read_board_meta(_board(tmp_path, _meta_json(runs=10**12 - 1, seeds=[2**64 - 1])))["groups"][0]["runs"] \
        == 10**12 - 1


def test_metadata_nested_100000_levels_deep(tmp_path: Path) -> None:
    deep = "[" * 100000 + "]" * 100000
    path = _board(tmp_path, _meta_json()[:-1] + f', "x": {deep}}}')
    _refused(path, "nested too deeply")
    # deep enough to stand out, not enough to stop the parser: refused naming where
    path = _board(tmp_path, _meta_json()[:-1] + f', "x": {"[" * 40 + "]" * 40}}}')
    _refused(path, "board metadata: x[0][0]", "nested deeper")


def test_an_integer_of_5000_digits_and_other_too_large_integers(tmp_path: Path) -> None:
    _refused(_board(tmp_path, _with("runs", "9" * 5000)), "a number too long to read", "4300 digits")
    _refused(_board(tmp_path, _with("runs", "9" * 4000)), "groups[0].runs is an integer of 4000 digits")
    _refused(_board(tmp_path, _with("seeds", f"[0, {2**64}]")), "groups[0].seeds[1] is an integer of 20 digits")
    _refused(_board(tmp_path, _with("runs", str(10**12))), "field 'runs': expected a count")
    _refused(_board(tmp_path, _with("objectives", str(10**15))), "field 'objectives': expected a count")
    _refused(_board(tmp_path, _with("means", '{"raw": ' + "1" * 30 + "}")), "groups[0].means.raw is an integer")


@pytest.mark.parametrize("field, literal, where", [
    ("title", '"\\ud800"', "groups[0].title"),
    ("best", '"`raw` \\udfff"', "groups[0].best"),
    ("other_code", '["fine", "\\ud83d"]', "groups[0].other_code[1]"),
    ("protocol", '"\\udc80x"', "groups[0].protocol"),
])
def test_a_lone_surrogate_in_a_text_field(tmp_path: Path, field: str, literal: str, where: str) -> None:
    _refused(_board(tmp_path, _with(field, literal)), f"board metadata: {where} is not valid Unicode text")


def test_a_lone_surrogate_in_a_key_and_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    _refused(_board(tmp_path, _meta_json()[:-1] + ', "\\ud800": 1}'), "a key of the top level is not valid Unicode")
    path = tmp_path / "evil.md"
    path.write_bytes(b"# Leaderboard: evil\n\n\xff\xfe\n")
    _refused(path, "not UTF-8 text")
    # a surrogate pair is a character, not a lone surrogate: read
    assert read_board_meta(_board(tmp_path, _with("title", '"\\ud83d\\ude00"')))["groups"][0]["title"] == "\U0001F600"


@pytest.mark.parametrize("case", ["deep", "digits", "surrogate"])
def test_fusebench_leaderboard_prints_one_line_naming_the_board_and_writes_nothing(tmp_path: Path, capsys,
                                                                                  case: str) -> None:
    runs = _copy(tmp_path, "quickstart", objectives=("raw",), seeds=(0, 1))
    out = tmp_path / "out"
    out.mkdir()
    comment, says = {
        "deep": (_meta_json()[:-1] + ', "x": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
        "digits": (_with("runs", "9" * 5000), "a number too long to read"),
        "surrogate": (_with("title", '"\\ud800"'), "groups[0].title is not valid Unicode text"),
    }[case]
    path = _board(out, comment)
    line = _one_error_line(runs, out, capsys)
    assert line.startswith(f"fusebench leaderboard: {path}: ") and says in line
    assert sorted(p.name for p in out.iterdir()) == ["evil.md"]  # no board, no index written
