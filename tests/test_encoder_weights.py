"""Your own encoder as a named row (issue #32, item 3): ``fusebench run B --encoder-weights NAME=PATH``
(Python: ``fusebench.run(B, encoder_weights={NAME: PATH})``; spec field ``encoder_weights``).

* Round trip: a run's ``best.pt`` -- which the embedding protocol now writes too, as README promises -- passed
  back as ``mine=best.pt`` gives that run's metrics and diagnostics exactly, on the embedding protocol and on
  the linear probe; and they differ from the random-init row ``none`` of the same seed (which is what a row
  whose weights silently did not load would give: same seed, same initialisation).
* The record names the file (its sha256, computed here with hashlib, and its path) and the encoder config;
  the cells' config hash follows the file's content, not its path, and leaves every other row's hash as it was.
* Refused before any work (no folder written under --out): weights that do not fit, with the missing,
  unexpected and reshaped parameter names the test itself made; a row name that is an objective or a
  reference row id, or not an id; a pickle that would run code (it is never run: weights_only=True).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

import fusebench
from fusebench.components.identity import spec_hash
from fusebench import benchmarks, encoders
from fusebench.spec.config import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

EMB = "mv-hw2sources"  # embedding_eval protocol; its synthetic twin runs in seconds
LP = "quickstart"  # linear_probe protocol
LP_SET = {"pretrain.epochs": 1, "downstream.epochs": 2}
DIMS = {"view0": 784, "view1": 256}  # the views of mv-hw2sources' synthetic twin (the MNIST / USPS image sizes)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record(out: Path, bench: str, row: str, seed: int = 0) -> dict:
    return json.loads((out / bench / row / f"seed{seed}" / "run.json").read_text())


@pytest.fixture(scope="module")
def emb_runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("emb")
    fusebench.run(EMB, objective=["infonce_pwe", "none"], seeds=[0], out=out, synthetic=True, progress=False)
    return out


def test_embedding_protocol_keeps_best_pt_and_round_trips(emb_runs: Path, tmp_path: Path) -> None:
    best = emb_runs / EMB / "infonce_pwe" / "seed0" / "best.pt"
    assert best.is_file(), "the embedding protocol must keep best.pt (README: every run writes last.pt / best.pt)"
    moved = tmp_path / "my encoder.pt"  # a copy elsewhere: the row names this file
    shutil.copyfile(best, moved)
    fusebench.run(EMB, objective=["mine"], seeds=[0], out=emb_runs, synthetic=True, progress=False,
                  encoder_weights={"mine": str(moved)})
    mine, src, none = (_record(emb_runs, EMB, r) for r in ("mine", "infonce_pwe", "none"))
    assert mine["metrics"] == src["metrics"]
    assert mine["diagnostics"] == src["diagnostics"]
    assert mine["metrics"] != none["metrics"] and mine["diagnostics"] != none["diagnostics"]
    w = mine["encoder_weights"]
    assert w["name"] == "mine" and w["path"] == str(moved.resolve()) and w["sha256"] == _sha(moved)
    assert w["encoder"]["id"] == "mlp" and w["encoder"]["config"]["num_features"] == 16
    assert mine["versions"]["objective"] == "sha256:" + _sha(moved)[:16]
    assert mine["budget"]["optimizer_steps"] == 0
    # the row's own best.pt holds the same encoder again
    again = torch.load(emb_runs / EMB / "mine" / "seed0" / "best.pt", weights_only=True)["model"]
    first = torch.load(best, weights_only=True)["model"]
    assert all(torch.equal(first[k], again[k]) for k in first if k.startswith("backbone."))
    # on the board as its own row, ranked beside the others (one comparability group)
    from fusebench.leaderboard import write_leaderboards

    write_leaderboards(emb_runs, tmp_path / "boards", formats=("md", "json", "csv", "tex"))
    board = (tmp_path / "boards" / f"{EMB}.md").read_text()
    assert "| `mine` |" in board
    # its steps are not a budget: not compared with the pretrained row's, shown as not known ("—"); nor is its
    # pretraining time (its record's 0 s are this run's: a 0.0 in the "lower is better" column ranked it cheapest)
    budget = next(line for line in board.splitlines() if line.startswith("Pretraining budget"))
    assert budget.startswith("Pretraining budget: **equal** across the 1 pretrained row(s)")
    assert budget.endswith("Trained elsewhere (budget and pretraining time not known here): `mine`.")
    row = next(line for line in board.splitlines() if line.startswith("| `mine` |")).split(" | ")
    assert row[-4:-1] == ["—", "—", "—"]  # steps, samples seen, pretrain time (s)
    none_row = next(line for line in board.splitlines() if line.startswith("| `none` |")).split(" | ")
    assert none_row[-2] == "0.0"  # a reference row pretrains nothing: 0 s, known
    rows = {r["objective"]: r for g in json.loads((tmp_path / "boards" / f"{EMB}.json").read_text())["groups"]
            for r in g["rows"]}
    assert rows["mine"]["cost"]["pretrain_time_s"] is None and rows["none"]["cost"]["pretrain_time_s"] == 0.0
    assert rows["mine"]["cost"]["peak_memory_mb"] == mine["peak_memory_mb"]
    assert rows["infonce_pwe"]["cost"]["pretrain_time_s"] == pytest.approx(src["pretrain_time_s"], rel=1e-5)


def test_linear_probe_round_trip(tmp_path: Path) -> None:
    fusebench.run(LP, objective=["infonce_pwe", "none"], seeds=[0], out=tmp_path, overrides=dict(LP_SET),
                  progress=False)
    best = tmp_path / LP / "infonce_pwe" / "seed0" / "best.pt"
    from fusebench.cli.run import main

    assert main([LP, "--objective", "mine", "--seeds", "0", "--out", str(tmp_path), "--no-progress",
                 "--encoder-weights", f"mine={best}", "--set", "downstream.epochs=2"]) == 0
    mine, src, none = (_record(tmp_path, LP, r) for r in ("mine", "infonce_pwe", "none"))
    # the same encoder and, built right after the same seed, the same initial head: the same probe
    assert mine["metrics"] == src["metrics"] and mine["metrics"] != none["metrics"]
    assert mine["encoder_weights"]["sha256"] == _sha(best)
    # the board: the row's version is its file's hash, as the run computed it, not "made by other code" (the
    # installed spec names no weights file; the record does)
    from fusebench.leaderboard import write_leaderboards

    write_leaderboards(tmp_path, tmp_path / "boards", formats=("md",))
    board = (tmp_path / "boards" / f"{LP}.md").read_text()
    assert "| `mine` |" in board and "other code than the current one" not in board


def test_hash_follows_the_content_not_the_path(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.pt", tmp_path / "sub" / "b.pt", tmp_path / "c.pt"
    b.parent.mkdir()
    torch.save({"w": torch.zeros(2)}, a)
    shutil.copyfile(a, b)
    torch.save({"w": torch.ones(2)}, c)
    plain = benchmarks.load(LP)
    at_a = benchmarks.load(LP, overrides={"encoder_weights.mine": str(a)})
    at_b = benchmarks.load(LP, overrides={"encoder_weights.mine": str(b)})
    at_c = benchmarks.load(LP, overrides={"encoder_weights.mine": str(c)})
    assert at_a.encoder_weights["mine"] == {"path": str(a.resolve()), "sha256": _sha(a)}
    assert spec_hash(at_a, "mine") == spec_hash(at_b, "mine") != spec_hash(at_c, "mine")
    assert spec_hash(at_a, "infonce_pwe") == spec_hash(plain, "infonce_pwe")  # the other rows keep their hashes


def _mlp_state(hidden: int = 128) -> dict[str, torch.Tensor]:
    """The state of the encoder mv-hw2sources' synthetic twin builds (views of 784 and 256 dims, 8 classes)."""
    torch.manual_seed(0)
    enc = encoders.build("mlp", num_features=16, hidden=hidden, modalities=DIMS, num_classes=8)
    return {k: v.clone() for k, v in enc.state_dict().items()}


def test_the_encoder_built_here_is_the_cells() -> None:  # what _mlp_state builds is what the cell builds
    from fusebench.engine.data import build_datasets
    from fusebench.cells.standard import encoder_config

    spec = benchmarks.load(EMB, synthetic=True)
    cfg = encoder_config(spec, build_datasets(spec, True, None, 0, roles=("train",))["train"])
    assert cfg == {"num_features": 16, "hidden": 128, "modalities": DIMS, "num_classes": 8}


def test_weights_that_do_not_fit_are_refused_before_any_work(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    state = _mlp_state()
    names = sorted(state)
    dropped, reshaped = names[0], names[-1]
    del state[dropped]
    state[reshaped] = torch.zeros(*state[reshaped].shape[:-1], state[reshaped].shape[-1] + 1)
    state["extra.weight"] = torch.zeros(3)
    path = tmp_path / "bad.safetensors"
    save_file(state, str(path))
    out = tmp_path / "runs"
    with pytest.raises(ConfigError) as e:
        fusebench.run(EMB, objective=["mine"], seeds=[0], out=out, synthetic=True, progress=False,
                      encoder_weights={"mine": str(path)})
    msg = str(e.value)
    assert f"missing from the file: {dropped}" in msg
    assert "unexpected (not in the encoder): extra.weight" in msg
    assert f"shape mismatch: {reshaped} (file" in msg
    assert not (out / EMB).exists()  # no cell folder, no record: refused before any work
    # the same file with the right tensors loads (safetensors read back as the encoder's state)
    save_file(_mlp_state(), str(path))
    fusebench.run(EMB, objective=["mine"], seeds=[0], out=out, synthetic=True, progress=False,
                  encoder_weights={"mine": str(path)})
    assert _record(out, EMB, "mine")["encoder_weights"]["sha256"] == _sha(path)


@pytest.mark.parametrize("name,why", [("m3g", "is an objective id"), ("raw", "is a reference row id"),
                                      ("none", "is a reference row id"), ("Mine", "is not an id"),
                                      ("../up", "is not an id")])
def test_row_names_that_collide_are_refused(tmp_path: Path, name: str, why: str) -> None:
    path = tmp_path / "w.pt"
    torch.save(_mlp_state(), path)
    out = tmp_path / "runs"
    with pytest.raises(ConfigError, match=why):
        fusebench.run(EMB, seeds=[0], out=out, synthetic=True, progress=False, encoder_weights={name: str(path)})
    assert not out.exists()


class _Evil:
    """Pickled with a reduce that would create a file when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickle_is_never_trusted(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"model": {"layer.weight": torch.zeros(1)}, "payload": _Evil(marker)}, path)
    with pytest.raises(ConfigError, match="weights_only=True"):
        fusebench.run(EMB, objective=["mine"], seeds=[0], out=tmp_path / "runs", synthetic=True, progress=False,
                      encoder_weights={"mine": str(path)})
    assert not marker.exists()
    assert not (tmp_path / "runs" / EMB).exists()


def test_a_pickle_is_refused_in_one_line_of_our_own_naming_the_file_and_the_global(tmp_path: Path) -> None:
    """torch's refusal text advises re-running torch.load with weights_only=False: never passed on. The weights
    file and a cell's last.pt get one line naming the file and the global the pickle needs; nothing runs."""
    from fusebench.components.encoder_weights import read_state
    from fusebench.engine.cell import load_checkpoint
    from fusebench.engine.loop import RunError

    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"model": {"layer.weight": torch.zeros(1)}, "payload": _Evil(marker)}, path)
    with pytest.raises(ConfigError) as weights:
        read_state(path)
    with pytest.raises(RunError) as checkpoint:
        load_checkpoint(path)
    for err in (weights, checkpoint):
        msg = str(err.value)
        # Path.touch is pickled as getattr(Path, "touch"): the first global the unpickler meets
        assert "\n" not in msg and str(path) in msg and "pickled Python object (getattr)" in msg, msg
        assert "weights_only set to False" not in msg and "weights_only=False" not in msg
        assert "add_safe_globals" not in msg and "will likely succeed" not in msg
    assert str(weights.value).startswith(f"{path}: not a weights file fusebench reads safely")
    assert str(checkpoint.value).startswith(f"cannot resume: checkpoint {path} is unreadable (it holds a pickled "
                                            "Python object (")
    assert not marker.exists()
    junk = tmp_path / "junk.pt"  # not a pickle of anything: torch's text advises weights_only=False here too
    junk.write_bytes(b"x")
    with pytest.raises(RunError) as checkpoint:
        load_checkpoint(junk)
    assert str(checkpoint.value) == (f"cannot resume: checkpoint {junk} is unreadable (torch.load with weights_only=True "
                                     "refuses it (Unsupported operand 120): not a file of tensors and plain containers "
                                     "(fusebench never unpickles code)); the file was left as it is — delete it to "
                                     "start over")  # 120: the byte 'x', read as a pickle opcode


def test_cli_flag_shape_and_missing_file(tmp_path: Path, capsys) -> None:
    from fusebench.cli.run import main

    with pytest.raises(SystemExit):
        main([EMB, "--synthetic", "--encoder-weights", "no-equals-sign"])
    assert main([EMB, "--synthetic", "--out", str(tmp_path), "--encoder-weights",
                 f"mine={tmp_path / 'nope.pt'}"]) == 2
    assert "is not a file" in capsys.readouterr().err
    assert main([EMB, "--synthetic", "--out", str(tmp_path), "--encoder-weights", f"a={tmp_path}",
                 "--encoder-weights", f"a={tmp_path}"]) == 2
    assert "given twice" in capsys.readouterr().err


def test_a_set_of_an_encoder_weights_row_is_one_source_and_its_hash_is_hex(tmp_path: Path, capsys) -> None:
    """--set encoder_weights.<row>... does not reach a row --encoder-weights gives (refused, naming both); a sha256
    that is not 64 hex digits (YAML reads 00 as the integer 0) is refused as such, not as a mismatch."""
    from fusebench.cli.run import main

    weights = tmp_path / "w.pt"
    weights.write_bytes(b"not read: the refusals come first")
    base = [EMB, "--synthetic", "--out", str(tmp_path / "runs"), "--objective", "mine", "--plan"]
    assert main([*base, "--encoder-weights", f"mine={weights}", "--set", "encoder_weights.mine.sha256=00"]) == 2
    err = capsys.readouterr().err
    assert "--set encoder_weights.mine.sha256: the row 'mine' is given by --encoder-weights mine=PATH, which this " \
           "--set would not reach (the two are not merged)" in err and err.count("fusebench run:") == 1
    for given, shown in (("00", "0"), ("'00'", "'00'"), (f"'{_sha(weights).upper()}'", repr(_sha(weights).upper()))):
        assert main([*base, "--set", f"encoder_weights.mine={{path: {weights}, sha256: {given}}}"]) == 2
        assert f"encoder_weights.mine.sha256: expected the file's SHA-256 as 64 lowercase hex digits (a quoted " \
               f"string: `sha256sum FILE`), got {shown}" in capsys.readouterr().err
    assert main([*base, "--set", f"encoder_weights.mine={{path: {weights}, sha256: '{'0' * 64}'}}"]) == 2
    assert f"has sha256 {_sha(weights)}, not the '{'0' * 64}' the spec expects" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_rerun_with_another_weights_file_names_both_files(tmp_path: Path) -> None:
    from fusebench.engine.cell import ConfigMismatchError

    first, other = tmp_path / "first.pt", tmp_path / "other.pt"
    torch.save(_mlp_state(), first)
    state = _mlp_state()
    state[next(iter(state))] += 1.0  # the same shapes, other weights
    torch.save(state, other)
    out = tmp_path / "runs"
    fusebench.run(EMB, objective="mine", seeds=[0], out=out, synthetic=True, progress=False,
                  encoder_weights={"mine": str(first)})
    with pytest.raises(ConfigMismatchError) as e:
        fusebench.run(EMB, objective="mine", seeds=[0], out=out, synthetic=True, progress=False,
                      encoder_weights={"mine": str(other)})
    assert str(e.value) == (
        f"{out / EMB / 'mine' / 'seed0' / 'run.json'} was made from another weights file for the row 'mine' (sha256 "
        f"{_sha(first)} of {first.resolve()}, now {_sha(other)} of {other.resolve()}); records are immutable: write "
        "to another --out, name the row otherwise, or move that cell's folder away to rerun it")
    # seed 1 from the other file into another folder, both under one runs folder: the board names the two files
    fusebench.run(EMB, objective="mine", seeds=[1], out=tmp_path / "runs2", synthetic=True, progress=False,
                  encoder_weights={"mine": str(other)})
    shutil.copytree(tmp_path / "runs2" / EMB / "mine" / "seed1", out / EMB / "mine" / "seed1")
    from fusebench.leaderboard import write_leaderboards

    with pytest.raises(ValueError) as e:
        write_leaderboards(out, tmp_path / "board", plots=False)
    msg = str(e.value)
    assert "row 'mine' mixes runs of different encoder weights files" in msg, msg
    assert f"sha256 {_sha(first)[:12]}: " in msg and f"sha256 {_sha(other)[:12]}: " in msg


class _System:
    """Pickled as os.system: a module torch's weights_only unpickler blocks by name (another wording of its
    refusal than an unknown global's)."""

    def __reduce__(self):
        import os

        return (os.system, ("true",))


def test_a_blocked_global_is_named_and_a_damaged_zip_is_called_damaged(tmp_path: Path) -> None:
    import os

    from fusebench.components.encoder_weights import read_state

    path = tmp_path / "system.pt"
    torch.save({"model": {"layer.weight": torch.zeros(1)}, "payload": _System()}, path)
    with pytest.raises(ConfigError) as e:
        read_state(path)
    name = f"{os.system.__module__}.system"  # posix.system on Linux
    assert f"pickled Python object ({name})" in str(e.value), str(e.value)
    good = tmp_path / "good.pt"
    torch.save({"layer.weight": torch.zeros(3)}, good)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:-10])  # the zip's end record gone
    with pytest.raises(ConfigError, match=r"cut\.pt: a torch\.save \(zip\) file that is truncated or damaged"):
        read_state(cut)


def test_a_task_models_keys_other_than_backbone_and_head_are_named_not_dropped(tmp_path: Path) -> None:
    from fusebench.components.encoder_weights import read_state

    path = tmp_path / "task.pt"
    state = {"backbone.layer.weight": torch.zeros(2), "head.fc.weight": torch.zeros(1)}
    torch.save({"model": state}, path)
    assert list(read_state(path)) == ["layer.weight"]  # the head left out, as documented
    torch.save({"model": {**state, "projector.w": torch.zeros(2)}}, path)
    with pytest.raises(ConfigError, match=r"neither the encoder's \(backbone\.\*\) nor its head's \(head\.\*\): "
                                          r"\['projector\.w'\]"):
        read_state(path)


def test_a_checkpoint_of_a_weights_row_whose_file_changed_names_the_row_and_the_file(tmp_path: Path) -> None:
    """A weights row's cell stopped mid-probe (last.pt), then its file changed in place: the refusal to resume says
    the row's hash covers the file's content and names the file with its sha256 now, not only "another
    configuration"."""
    from fusebench.cells.execute import run_cell
    from fusebench.components.encoder_weights import add_rows
    from fusebench.engine.cell import ConfigMismatchError, check_checkpoint_config, load_checkpoint
    from fusebench.spec.request import CellRequest, RunOptions

    fusebench.run(LP, objective="infonce_pwe", seeds=[0], out=tmp_path / "a", progress=False, overrides=LP_SET)
    weights = tmp_path / "w.pt"
    shutil.copy(tmp_path / "a" / LP / "infonce_pwe" / "seed0" / "best.pt", weights)
    spec = benchmarks.load(LP, overrides={"downstream.epochs": 2})
    add_rows(spec, {"mine": str(weights)}, spec.name)
    out = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):  # stopped by its step budget: last.pt written
        run_cell(CellRequest(spec, "mine", 0, out), RunOptions(progress=False, max_steps=1))
    last = out / LP / "mine" / "seed0" / "last.pt"
    assert last.is_file()
    state = torch.load(weights, map_location="cpu", weights_only=True)
    first = next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][first] = state["model"][first] + 1.0
    torch.save(state, weights)  # the same path, other weights
    again = benchmarks.load(LP, overrides={"downstream.epochs": 2})
    add_rows(again, {"mine": str(weights)}, again.name)
    with pytest.raises(ConfigMismatchError) as e:
        check_checkpoint_config(last, load_checkpoint(last), again, "mine")
    assert (f"(the row 'mine' scores a weights file and its hash covers the file's content: now sha256 "
            f"{_sha(weights)} of {weights.resolve()}; a file changed since is another configuration)") in str(e.value)


def test_a_last_pt_of_a_run_stopped_while_pretraining_is_refused_by_name(tmp_path: Path) -> None:
    """A run's last.pt written in its pretraining phase holds the encoder mid-way, inside the pretrainer's state, and
    no ``model`` entry: it was refused as "entries that are not tensors: ['phase', 'step', ...]", which does not say
    what the file is. Now one line says it is a pretraining checkpoint and to pass the finished run's best.pt. A
    last.pt of the downstream phase (the encoder frozen by the linear probe) is still read, and its encoder is the one
    of the run's best.pt, parameter for parameter."""
    from fusebench.cells.execute import run_cell
    from fusebench.components.encoder_weights import read_state
    from fusebench.spec.request import CellRequest, RunOptions

    spec = benchmarks.load(LP, overrides=LP_SET)
    with pytest.raises(KeyboardInterrupt):  # stopped by its step budget in pretraining: last.pt written
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "stopped"), RunOptions(progress=False, max_steps=1))
    last = tmp_path / "stopped" / LP / "infonce_pwe" / "seed0" / "last.pt"
    assert torch.load(last, map_location="cpu", weights_only=True)["phase"] == "pretrain"
    with pytest.raises(ConfigError) as e:
        read_state(last)
    assert str(e.value) == (f"{last}: a run's checkpoint of its pretraining phase (the last.pt of a run stopped while "
                            "pretraining, step 1): it holds no finished encoder; pass the best.pt of the run once it has "
                            "finished (rerun its command to finish it), or your encoder's state_dict")
    fusebench.run(LP, objective="infonce_pwe", seeds=[0], out=tmp_path / "done", progress=False, overrides=LP_SET)
    cell = tmp_path / "done" / LP / "infonce_pwe" / "seed0"
    assert torch.load(cell / "last.pt", map_location="cpu", weights_only=True)["phase"] == "downstream"
    best = torch.load(cell / "best.pt", map_location="cpu", weights_only=True)["model"]
    from_last = read_state(cell / "last.pt")
    assert set(from_last) == {k[len("backbone."):] for k in best if k.startswith("backbone.")}
    assert all(torch.equal(from_last[k], best["backbone." + k]) for k in from_last)


def test_a_file_named_for_the_other_format_says_which_it_is(tmp_path: Path) -> None:
    """A torch.save file named .safetensors was refused with safetensors' "Error while deserializing header: header
    too large", which does not say what the file is; the reverse (safetensors named .pt) already said "name it
    .safetensors". Both now say the format their first bytes show and the name to give; renamed, each loads."""
    from safetensors.torch import save_file

    from fusebench.components.encoder_weights import read_state

    state = _mlp_state()
    for legacy in (False, True):  # torch.save's zip format and its older one
        pt_named = tmp_path / f"enc{int(legacy)}.safetensors"
        torch.save(state, pt_named, _use_new_zipfile_serialization=not legacy)
        with pytest.raises(ConfigError) as e:
            read_state(pt_named)
        assert str(e.value) == (f"{pt_named}: not a safetensors file but, by its first bytes, a torch.save file: "
                                "name it .pt")
        renamed = pt_named.rename(pt_named.with_suffix(".pt"))
        assert all(torch.equal(read_state(renamed)[k], v) for k, v in state.items())
    st_named = tmp_path / "enc.pt"
    save_file(state, str(st_named))
    with pytest.raises(ConfigError, match=r"by its first bytes, safetensors: name it \.safetensors"):
        read_state(st_named)
    renamed = st_named.rename(tmp_path / "enc.safetensors")
    assert all(torch.equal(read_state(renamed)[k], v) for k, v in state.items())
