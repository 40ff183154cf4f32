"""Every option of every ``fusebench`` command given twice is refused, never the last kept without a word: an option
that stores a value (one, or several) refuses a second occurrence naming the option and both values; an option meant
to repeat (``KEY=VALUE``) refuses a key given twice. The walk below reaches every command's parser (its ``main``
stopped where it parses), so a new option, or a new command, cannot forget the rule."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

from fusebench.cli import SUBCOMMANDS
from fusebench.runtime.terminal_help import Keyed, Once, Parser

#: options meant to repeat whose repeats are checked where their values are read (not by the parser), and where
REPEAT_CHECKED_LATER = {
    ("fusebench run", "--set"): "fusebench.spec.request._check_set_once (a key given twice, under either name)",
    ("fusebench run", "--encoder-weights"): "fusebench.cli.run._weights_rows (a row name given twice)",
}


class _Parsed(Exception):
    pass


def _parsers(monkeypatch: pytest.MonkeyPatch) -> dict[str, argparse.ArgumentParser]:
    """prog -> parser of every command (``fusebench``, each subcommand, each ``fusebench bench`` target, each
    ``fusebench data`` action): each command's ``main`` run until it parses its arguments."""
    found: dict[str, argparse.ArgumentParser] = {}

    def caught(self: argparse.ArgumentParser, args=None, namespace=None):  # type: ignore[no-untyped-def]
        found[self.prog] = self
        raise _Parsed

    monkeypatch.setattr(Parser, "parse_known_args", caught)
    calls: list[tuple[str, object, list[str]]] = [("fusebench", importlib.import_module("fusebench.cli").main, [])]
    for name, (module, func, _) in SUBCOMMANDS.items():
        calls.append((f"fusebench {name}", getattr(importlib.import_module(module), func),
                      ["kviews"] if name == "study" else []))
    from fusebench.perf import TARGETS

    for target, module in TARGETS.items():
        calls.append((f"fusebench bench {target}", importlib.import_module(module).main, []))
    for prog, main, argv in calls:
        with pytest.raises(_Parsed):  # no parse through Parser: the command is not covered by the rule
            main(argv)
        assert any(p == prog or p.startswith(prog + " ") for p in found), (
            f"{prog} does not parse its options with fusebench.runtime.terminal_help.Parser")
    for parser in list(found.values()):  # the actions of `fusebench data`
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.update({sub.prog: sub for sub in action.choices.values()})
    return found


def _value(action: argparse.Action) -> str:
    return str(next(iter(action.choices))) if action.choices else "1"


def test_every_option_of_every_command_refuses_a_repeat(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    parsers = _parsers(monkeypatch)
    monkeypatch.undo()
    assert {"fusebench", "fusebench run", "fusebench leaderboard", "fusebench status", "fusebench list",
            "fusebench data prepare", "fusebench study kviews", "fusebench bench gpu"} <= set(parsers)
    checked = 0
    for prog, parser in sorted(parsers.items()):
        for action in parser._actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if action.nargs == 0:  # a flag: given twice it says the same thing twice, nothing is replaced
                continue
            opt = action.option_strings[-1]
            if isinstance(action, Keyed):  # meant to repeat, each key once
                argv = [opt, "k=1", opt, "k=2"]
                expect = f"error: {opt} k given twice ({opt} k=1, then {opt} k=2)"
            elif (prog, opt) in REPEAT_CHECKED_LATER:
                continue
            else:
                assert isinstance(action, Once), (f"{prog} {opt}: action {type(action).__name__} keeps the last of "
                                                  f"two without a word (use the default action, Once or Keyed)")
                v = _value(action)
                argv = [action.option_strings[0], v, opt, v]
                expect = f"error: {opt} given twice ({action.option_strings[0]} "  # each value as its type reads it
            with pytest.raises(SystemExit) as e:
                parser.parse_args(argv)
            assert e.value.code == 2, (prog, opt)
            err = capsys.readouterr().err
            assert expect in err, (prog, opt, err)
            checked += 1
    assert checked > 60  # every store option of the commands above (the run alone has 20)


@pytest.mark.parametrize("argv, said", [
    (["leaderboard", "--runs", "A", "--runs", "B"], "--runs given twice (--runs A, then --runs B)"),
    (["run", "quickstart", "--out", "A", "--out", "B"], "--out given twice (--out A, then --out B)"),
    (["run", "quickstart", "--threads", "1", "--threads", "2"],
     "--threads given twice (--threads 1, then --threads 2)"),
    (["run", "quickstart", "--device", "cpu", "--device", "cuda"], "--device given twice (--device cpu, then --device "
                                                                   "cuda)"),
    (["run", "quickstart", "--seeds", "0", "1", "--seeds", "2"], "--seeds given twice (--seeds 0 1, then --seeds 2): "
                                                                 "the second would replace the first; give all its "
                                                                 "values after one --seeds"),
    (["run", "quickstart", "--launcher", "slurm", "--sbatch", "mem=1G", "--sbatch", "mem=2G"],
     "--sbatch mem given twice (--sbatch mem=1G, then --sbatch mem=2G)"),
    (["data", "prepare", "quickstart", "--data-root", "A", "--root", "B"], "--root given twice (--data-root A, then "
                                                                           "--root B)"),
    (["data", "prepare", "quickstart", "--opt", "a=1", "--opt", "a=2"], "--opt a given twice (--opt a=1, then --opt "
                                                                        "a=2)"),
])
def test_a_repeated_option_is_one_error_and_nothing_is_written(argv: list[str], said: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture) -> None:
    from fusebench.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {said}" in err and err.count("error:") == 1
    assert list(tmp_path.iterdir()) == []  # no --out, no runs folder, no board


@pytest.mark.parametrize("sets, said", [
    (["pretrain.epochs=1", "pretrain.epochs=2"],
     "--set pretrain.epochs given twice: pretrain.epochs=1, then pretrain.epochs=2; the second would replace the "
     "first: give it once"),
    (["pretrain.objective_epochs.m3g=1", "pretrain.per_objective.m3g.epochs=2"],
     "--set pretrain.per_objective.m3g.epochs given twice (as pretrain.objective_epochs.m3g and as "
     "pretrain.per_objective.m3g.epochs: one setting): pretrain.objective_epochs.m3g=1, then "
     "pretrain.per_objective.m3g.epochs=2"),
    (["pretrain.per_objective.m3g.hparams.eps=0.3", "pretrain.per_objective.m3g={epochs: 2}"],
     "--set pretrain.per_objective.m3g={'epochs': 2} replaces the whole of pretrain.per_objective.m3g, so the --set "
     "pretrain.per_objective.m3g.hparams.eps=0.3 given before it would be dropped"),
])
def test_set_of_one_key_twice_is_refused_naming_the_key(sets: list[str], said: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    from fusebench.cli import main

    out = tmp_path / "runs"
    argv = ["run", "quickstart", "--objective", "m3g", "--synthetic", "--out", str(out)]
    assert main([*argv, *(a for s in sets for a in ("--set", s))]) == 2
    assert f"fusebench run: {said}" in capsys.readouterr().err
    assert not out.exists()
    # distinct keys, and a key inside one given after it (it refines the value): accepted, as the plan shows
    assert main([*argv, "--plan", "--set", "pretrain.epochs=1", "--set", "pretrain.lr=0.01",
                 "--set", "pretrain.per_objective.m3g={hparams: {eps: 0.3}}",
                 "--set", "pretrain.per_objective.m3g.hparams.eps=0.2"]) == 0


def test_the_python_api_refuses_one_setting_twice_too(tmp_path: Path) -> None:
    import fusebench
    from fusebench.spec.config import ConfigError

    with pytest.raises(ConfigError, match=r"--set pretrain\.epochs given twice: pretrain\.epochs=1, then "
                                          r"pretrain\.epochs=2"):
        fusebench.run("quickstart", objective="m3g", out=tmp_path, synthetic=True, plan=True,
                      overrides=["pretrain.epochs=1", "pretrain.epochs=2"])
    with pytest.raises(ConfigError, match=r"given twice \(as pretrain\.hparams\.m3g\.eps and as "
                                          r"pretrain\.per_objective\.m3g\.hparams\.eps: one setting\)"):
        fusebench.run("quickstart", objective="m3g", out=tmp_path, synthetic=True, plan=True,
                      overrides={"pretrain.hparams.m3g.eps": 0.2, "pretrain.per_objective.m3g.hparams.eps": 0.3})
