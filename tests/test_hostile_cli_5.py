"""A fifth hostile review of the command line (``run``, ``leaderboard``, ``status``): each defect it reproduced,
checked by its exit status and message.

* ``--set KEY=[1,`` (a flow value YAML cannot parse) was refused in five lines (PyYAML's message with its caret);
  now one line saying what is wrong and where.
* A ``--set`` key holding a control character was escaped in the spec's message but echoed raw in its
  ``[with --set ...]`` trailer; now escaped there too.
* ``--set objectives.m3g.eps=...`` said only "'objectives' is not a mapping"; now it also says where an objective's
  own settings go (``pretrain.per_objective.<id>...``).
* ``--data-root ''`` was read as the current folder ("data root ."); now refused as ``--out ''`` is.
* An ``--out`` / ``--runs`` path holding a control character (an escape sequence) reached the terminal raw in the
  messages of ``run`` (refusals, the closing ``records:`` / ``logs`` lines), ``leaderboard`` (refusals, the warning,
  each ``wrote PATH``) and ``status``; now escaped (:func:`fusebench.io.shown_path`).
* ``run --plan --data-root NEW`` ("runs and writes nothing") made ``NEW`` and wrote the synthetic twin into it, and
  neither the plan nor the run said so; now each says ``data: synthetic twin written to <folder>`` at its end.
* ``--set name=mv-handwritten`` on ``quickstart`` filed quickstart's cells as ``mv-handwritten`` (its folders, its
  board, its status); a rename onto another benchmark's id is now refused (a new name still renames the run).
* ``study kviews --batch-size 1`` / ``--m3g-micro-batch 0`` were blamed on ``mv-handwritten.yaml`` with a trailer
  listing every override the study makes (over 700 characters); now named by the study's option. ``--objective
  m3gg`` said the reference rows were missing instead of naming the unknown id (with the closest one).
* ``data prepare --out FILE`` (or a folder under a file) failed in the cache writer with exit status 3 ("cannot
  write the prepared cache ... the partial cache was removed"), ``data check --out FILE`` said "no prepared cache";
  each is now one exit-2 line about ``--out`` before anything is read. The folders ``data prepare`` / ``check``
  print are escaped.
* ``leaderboard --reported BAD.yaml`` printed PyYAML's several lines with a caret; now one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_first_use_review import _plan, _run  # (exit status, stdout, stderr) of a command

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

ESC = "\x1b[2J"  # an escape sequence (clear the screen) in a path or key
SHOWN = "\\x1b[2J"  # the same as the message must print it: escaped




def test_set_value_that_is_not_yaml_is_one_line(tmp_path: Path, capsys) -> None:
    code, out, err = _plan(capsys, tmp_path, "--set", "pretrain.epochs=[1,")
    assert code == 2 and out == ""
    assert err == ("fusebench run: --set 'pretrain.epochs=[1,': value is not valid YAML (expected the node content, "
                   "but found '<stream end>' at line 1, column 4 (while parsing a flow node at line 1, column 4))\n")
    assert not (tmp_path / "runs").exists()


def test_set_key_with_a_control_character_is_escaped_in_the_trailer(tmp_path: Path, capsys) -> None:
    code, out, err = _plan(capsys, tmp_path, "--set", f"pre{ESC}train.epochs=1")
    assert code == 2 and out == ""
    assert "\x1b" not in err, err
    assert err.count("\n") == 1 and "unknown key(s) ['pre\\x1b[2Jtrain'] (did you mean 'pretrain'?)" in err, err
    assert err.endswith(f"[with --set 'pre{SHOWN}train.epochs=1']\n"), err


def test_set_under_objectives_says_where_an_objectives_settings_go(tmp_path: Path, capsys) -> None:
    code, out, err = _plan(capsys, tmp_path, "--objective", "m3g", "--set", "objectives.m3g.eps=0.1")
    assert code == 2 and out == ""
    assert err == ("fusebench run: --set: cannot set 'objectives.m3g.eps': 'objectives' is not a mapping; "
                   "'objectives' is the list of objective ids the sweep runs: an objective's own settings are "
                   "pretrain.per_objective.<id>.<setting>, e.g. pretrain.per_objective.m3g.hparams.<name>=VALUE "
                   "(fusebench list objectives --details) [with --set objectives.m3g.eps=0.1]\n")


def test_empty_data_root_is_refused_not_read_as_the_current_folder(tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, "run", "mv-handwritten", "--seeds", "0", "--data-root", "", "--plan",
                          "--out", str(tmp_path / "runs"))
    assert (code, out, err) == (2, "", "fusebench run: --data-root: expected a folder or file, got ''\n")


def test_run_out_with_a_control_character_is_escaped_when_refused(tmp_path: Path, capsys) -> None:
    bad = tmp_path / f"f{ESC}x"
    bad.write_text("")
    code, out, err = _plan(capsys, tmp_path)  # a fine --out first: the plan passes
    assert code == 0, err
    code, out, err = _run(capsys, "run", "quickstart", "--seeds", "0", "--plan", "--out", str(bad))
    assert code == 2 and out == ""
    assert err == (f"fusebench run: --out '{tmp_path}/f{SHOWN}x': exists and is not a folder; name a folder for the "
                   f"run records\n")
    code, out, err = _run(capsys, "run", "quickstart", "--seeds", "0", "--plan", "--out", str(bad / "sub"))
    assert code == 2 and "\x1b" not in err
    assert err == (f"fusebench run: --out '{tmp_path}/f{SHOWN}x/sub': cannot create the folder "
                   f"('{tmp_path}/f{SHOWN}x' is not a folder); name a writable folder\n")


def test_run_says_where_the_records_went_with_the_path_escaped(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / f"r{ESC}uns"
    code, out, err = _run(capsys, "run", "quickstart", "--objective", "m3g", "--seeds", "0", "--set",
                          "pretrain.epochs=1", "--logger", "csv", "--no-progress", "--out", str(out_dir))
    assert code == 0, err
    assert (out_dir / "quickstart" / "m3g" / "seed0" / "run.json").is_file()  # the folder itself as given
    assert "\x1b" not in out, out
    lines = out.splitlines()
    assert f"records: '{tmp_path}/r{SHOWN}uns' (1 cell(s) of quickstart)" in lines, out
    assert f"logs (csv): 'metrics.csv in each cell folder under {tmp_path}/r{SHOWN}uns'" in lines, out


def test_leaderboard_paths_with_a_control_character_are_escaped(tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, "leaderboard", "--runs", str(tmp_path / f"no{ESC}pe"), "--out", str(tmp_path / "b"))
    assert (code, out) == (2, "")
    assert err == (f"fusebench leaderboard: --runs '{tmp_path}/no{SHOWN}pe' does not exist; expected the folder of "
                   f"run records (run.json files) to read\n")
    assert not (tmp_path / "b").exists()
    runs, boards = tmp_path / f"r{ESC}uns", tmp_path / f"b{ESC}oards"
    runs.mkdir()
    code, out, err = _run(capsys, "leaderboard", "--runs", str(runs), "--out", str(boards), "--no-progress")
    assert code == 0, err
    assert "\x1b" not in out + err, out + err
    assert err.startswith(f"fusebench leaderboard: warning: no run.json under '{tmp_path}/r{SHOWN}uns': "), err
    assert out.splitlines() == [f"wrote '{tmp_path}/b{SHOWN}oards/README.md'",
                                f"1 file(s) written, 0 unchanged in '{tmp_path}/b{SHOWN}oards'"], out


def test_status_out_with_a_control_character_is_escaped(tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, "status", "--out", str(tmp_path / f"no{ESC}pe"))
    assert (code, out, err) == (2, "", f"fusebench status: --out '{tmp_path}/no{SHOWN}pe' is not a folder of run "
                                       f"records\n")
    (tmp_path / f"f{ESC}ile").write_text("")
    code, out, err = _run(capsys, "status", "--out", str(tmp_path / f"f{ESC}ile"))
    assert (code, out, err) == (2, "", f"fusebench status: --out '{tmp_path}/f{SHOWN}ile' is a file; expected the "
                                       f"folder of run records\n")


def test_plan_and_run_say_where_the_synthetic_twin_was_written(tmp_path: Path, capsys) -> None:
    root = tmp_path / "data"  # does not exist yet: the twin is written under it
    args = ("run", "quickstart", "--objective", "m3g", "--seeds", "0", "--data-root", str(root), "--no-progress")
    code, out, err = _run(capsys, *args, "--plan", "--out", str(tmp_path / "runs"))
    assert code == 0, err
    made = [p for p in root.iterdir()]
    assert len(made) == 1 and (made[0] / ".complete").is_file(), made
    assert out.splitlines()[-2:] == ["plan: 1 cell(s): 1 run; nothing was run, no record written",
                                     f"data: synthetic twin written to {made[0]} (made once; later runs and plans "
                                     f"reuse it)"], out
    assert not (tmp_path / "runs").exists()
    code, out, err = _run(capsys, *args, "--plan", "--out", str(tmp_path / "runs"))  # reused: nothing to say
    assert code == 0 and "data:" not in out and list(root.iterdir()) == made, out
    code, out, err = _run(capsys, *args[:-3], "--data-root", str(tmp_path / "data2"), "--set", "pretrain.epochs=1",
                          "--no-progress", "--out", str(tmp_path / "runs"))
    assert code == 0, err
    (twin,) = (tmp_path / "data2").iterdir()
    assert f"data: synthetic twin written to {twin} (made once; later runs and plans reuse it)" in out.splitlines()


def test_set_name_onto_another_benchmarks_id_is_refused(tmp_path: Path, capsys) -> None:
    from fusebench import benchmarks

    other = benchmarks.path("mv-handwritten")
    code, out, err = _plan(capsys, tmp_path, "--set", "name=mv-handwritten")
    assert (code, out) == (2, "")
    assert err == (f"fusebench run: --set name=mv-handwritten: 'mv-handwritten' is the id of another benchmark "
                   f"({other}); the records of quickstart would be filed under it, beside its own runs and on its "
                   f"board; rename the run to a name no benchmark has (fusebench list benchmarks)\n")
    assert not (tmp_path / "runs").exists()
    code, out, err = _plan(capsys, tmp_path, "--objective", "m3g", "--set", "name=qs-renamed")  # a new name: renamed
    assert code == 0 and out.splitlines()[0] == "qs-renamed m3g seed0: run", out + err
    code, out, err = _plan(capsys, tmp_path, "--objective", "m3g", "--set", "name=quickstart")  # its own: as is
    assert code == 0 and out.splitlines()[0] == "quickstart m3g seed0: run", out + err


@pytest.mark.parametrize(("args", "said"), [
    (("--batch-size", "1"), "kviews: batch_size=1 must be >= 2 (contrastive losses need negatives)"),
    (("--m3g-micro-batch", "0"), "kviews: m3g_micro_batch=0 must be an integer >= 2 (the samples of each chunk of "
                                 "M3G's loss)"),
    (("--objective", "m3gg"), "unknown objective 'm3gg'. Did you mean 'm3g'? Valid objective ids: "),
])
def test_study_options_are_named_by_the_study(args: tuple[str, ...], said: str, tmp_path: Path, capsys) -> None:
    out, board = tmp_path / "runs", tmp_path / "board"
    code, stdout, err = _run(capsys, "study", "kviews", "--synthetic", "--out", str(out), "--board", str(board),
                             "--no-progress", *args)
    assert code == 2 and err.startswith(f"fusebench study kviews: {said}") and err.count("\n") == 1, err
    assert "[with --set" not in err and "Traceback" not in err
    assert not out.exists() and not board.exists()


def test_data_prepare_and_check_refuse_an_out_that_is_a_file(tmp_path: Path, capsys) -> None:
    file = tmp_path / "a_file"
    file.write_text("")
    code, out, err = _run(capsys, "data", "prepare", "quickstart", "--synthetic", "--out", str(file))
    assert (code, out, err) == (2, "", f"fusebench data prepare: --out {file}: exists and is not a folder; name a "
                                       f"folder for the prepared cache\n")
    code, out, err = _run(capsys, "data", "prepare", "quickstart", "--synthetic", "--out", str(file / "sub"))
    assert (code, out, err) == (2, "", f"fusebench data prepare: --out {file / 'sub'}: cannot create the folder "
                                       f"({file} is not a folder); name a folder\n")
    code, out, err = _run(capsys, "data", "check", "quickstart", "--out", str(file))
    assert (code, out, err) == (2, "", f"fusebench data check: --out {file} is a file; expected the folder of "
                                       f"prepared caches\n")
    assert file.read_text() == "" and [p.name for p in tmp_path.iterdir()] == ["a_file"]


def test_data_prepare_and_check_print_the_folders_escaped(tmp_path: Path, capsys) -> None:
    base = tmp_path / f"c{ESC}ache"
    code, out, err = _run(capsys, "data", "prepare", "quickstart", "--synthetic", "--out", str(base), "--quiet")
    assert code == 0, err
    assert "\x1b" not in out, out
    folders = sorted((base / "quickstart").iterdir())
    assert len(folders) == 3
    lines = out.splitlines()
    assert len(lines) == 4 and lines[-1] == f"(set FUSEBENCH_PREPARED='{tmp_path}/c{SHOWN}ache' so that adapters " \
                                            f"read this cache)", out
    assert sorted(line.split(" -> ")[1] for line in lines[:3]) == [f"'{tmp_path}/c{SHOWN}ache/quickstart/{p.name}'"
                                                                   for p in folders], out
    code, out, err = _run(capsys, "data", "check", "quickstart", "--out", str(base))
    assert code == 0 and "\x1b" not in out and len(out.splitlines()) == 3, out + err
    assert all(line.startswith("ok ") and line.endswith(f"'{tmp_path}/c{SHOWN}ache/quickstart/{p.name}'")
               for line, p in zip(sorted(out.splitlines(), key=lambda x: x[-17:]), folders)), out


def test_leaderboard_reported_that_is_not_yaml_is_one_line(tmp_path: Path, capsys) -> None:
    runs, bad = tmp_path / "runs", tmp_path / "reported.yaml"
    runs.mkdir()
    bad.write_text("a: [1,\n")
    code, out, err = _run(capsys, "leaderboard", "--runs", str(runs), "--out", str(tmp_path / "b"), "--reported",
                          str(bad), "--no-progress")
    assert (code, out) == (2, ""), out
    assert err.splitlines()[-1] == (f"fusebench leaderboard: {bad}: not a readable YAML file (expected the node "
                                    f"content, but found '<stream end>' at line 2, column 1 (while parsing a flow "
                                    f"node at line 2, column 1))"), err
    assert err.count("\n") == 2 and err.startswith("fusebench leaderboard: warning: no run.json under "), err
    assert not (tmp_path / "b").exists()
