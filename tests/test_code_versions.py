"""A cell's record is reused only when the code that made it computes as the code now does: the config hash covers
the configuration, the versions of the objective, the encoder and the metrics cover the code (an ESANet decoder that
changed from one to three blocks per module under an unchanged ``size: resnet34`` was reused as it was)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

import fusebench
from fusebench import benchmarks
from fusebench import encoders as E
from fusebench import metrics as M
from fusebench import objectives as O
from fusebench.cells.execute import run_cell
from fusebench.components.identity import cell_versions, code_changes, encoder_version
from fusebench.engine.cell import ConfigMismatchError, load_checkpoint
from fusebench.records import comparability_fields, comparability_key, validate_record
from fusebench.spec.request import CellRequest, RunOptions, cell_dir

TINY = {
    "dataset.synthetic_spec": {"num_samples": 64, "seed": 0},
    "pretrain.epochs": 1,
    "pretrain.batch_size": 32,
    "downstream.epochs": 1,
    "downstream.batch_size": 64,
}


def _run(spec, objective: str, out: Path) -> dict:
    return run_cell(CellRequest(spec, objective, 0, out), RunOptions(progress=False))


def test_esanet_versions_its_presets_one_at_a_time() -> None:
    esanet = E.ENCODERS.get("esanet")
    # resnet34 / resnet18 changed twice (three NonBottleneck1D blocks per decoder module, was one: version 2; ESANet's
    # zero-padded learned upsampling, nearest context bins and He fan-out branches: version 3); the default
    # size is resnet34; tiny, the tests' preset, computes as it did
    assert esanet.version_of({"size": "resnet34"}) == "3"
    assert esanet.version_of({"size": "resnet18"}) == "3"
    assert esanet.version_of({}) == "3"
    assert esanet.version_of({"size": "tiny"}) == "1"
    head = esanet(modalities=["rgb"], size="resnet18").task_head(type("T", (), {"id": "segmentation",
                                                                              "classes": lambda self, m: 40})())
    blocks = [len(m.blocks) for m in head.modules() if hasattr(m, "blocks") and hasattr(m.blocks, "__len__")]
    assert blocks and set(blocks) == {3}, blocks  # what version 2 says: three blocks per decoder module
    assert E.ENCODERS.get("mlp").version_of({"num_features": 4}) == "1"  # the base class: its version, any config
    # the path records, checkpoints and selections take: the spec's encoder config, through the registry
    assert encoder_version("esanet", {"size": "resnet34"}) == encoder_version("esanet", {}) == "3"
    assert encoder_version("esanet", {"size": "tiny"}) == "1"
    assert cell_versions(benchmarks.load("nyuv2-seg"), "none")["encoder"] == "3"  # resnet34
    assert "encoder" not in cell_versions(benchmarks.load("nyuv2-seg", synthetic=True), "none")  # tiny: version 1


def test_a_record_of_another_objective_version_is_not_reused(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    rec = _run(spec, "infonce_pwe", tmp_path)
    assert rec["versions"]["objective"] == "1" and "encoder" not in rec["versions"]  # mlp: version 1, not written
    assert _run(spec, "infonce_pwe", tmp_path) == rec  # the same code: the record
    monkeypatch.setattr(O.OBJECTIVES.get("infonce_pwe"), "version", "2")  # the loss changed, the spec did not
    with pytest.raises(ConfigMismatchError, match=r"made by other code .*objective 'infonce_pwe' version '1', now '2'"):
        _run(spec, "infonce_pwe", tmp_path)


def test_a_record_of_another_encoder_version_is_not_reused_nor_compared(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    old = _run(spec, "none", tmp_path / "a")
    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", "2")
    with pytest.raises(ConfigMismatchError, match=r"encoder 'mlp' version '1', now '2'"):
        _run(spec, "none", tmp_path / "a")
    new = _run(spec, "none", tmp_path / "b")
    validate_record(new, "run.json")  # a valid record, its versions naming the encoder's
    assert new["versions"]["encoder"] == "2" and new["config_hash"] == old["config_hash"]
    assert comparability_fields(new)["encoder_version"] == "2" and "encoder_version" not in comparability_fields(old)
    assert new["comparability_key"] == comparability_key(new) != old["comparability_key"]  # one board each


def test_a_record_of_another_metric_version_is_not_reused(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    _run(spec, "none", tmp_path)
    real = M.get

    def bumped(mid: str):
        m = real(mid)
        return dataclasses.replace(m, version="2") if mid == "bacc" else m

    monkeypatch.setattr(M, "get", bumped)
    with pytest.raises(ConfigMismatchError, match=r"metric 'bacc' version '1', now '2'"):
        _run(spec, "none", tmp_path)


def test_a_checkpoint_of_another_code_version_is_not_resumed(tmp_path: Path, monkeypatch) -> None:
    spec = benchmarks.load("quickstart", overrides={**TINY, "checkpoint_every": 1})
    with pytest.raises(KeyboardInterrupt):  # a killed run: last.pt written, no run.json
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, max_steps=1))
    cell = cell_dir(tmp_path, "quickstart", "infonce_pwe", 0)
    assert load_checkpoint(cell / "last.pt")["versions"] == {"suite": fusebench.__version__, "objective": "1"}
    assert load_checkpoint(cell / "last.pt")["versions"]["objective"] == "1"
    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", "2")
    with pytest.raises(ConfigMismatchError, match=r"cannot resume .*last\.pt: it was written by other code .*"
                                                  r"encoder 'mlp' version '1', now '2'"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    monkeypatch.undo()  # the same code resumes it and finishes
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False, resume=True))
    assert rec["versions"]["objective"] == "1" and (cell / "run.json").exists()
    # an encoder at a version other than 1 (ESANet resnet34): its checkpoint states it, and resumes under it
    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", "2")
    with pytest.raises(KeyboardInterrupt):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "v2"), RunOptions(progress=False, max_steps=1))
    ckpt = load_checkpoint(cell_dir(tmp_path / "v2", "quickstart", "infonce_pwe", 0) / "last.pt")
    assert ckpt["versions"] == {"suite": fusebench.__version__, "objective": "1", "encoder": "2"}
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "v2"), RunOptions(progress=False, resume=True))
    assert rec["versions"]["encoder"] == "2"


def test_a_checkpoint_that_states_no_versions_resumes_only_under_version_1_code(tmp_path: Path,
                                                                                monkeypatch) -> None:
    """A last.pt written before checkpoints stated versions (no ``versions`` key) was made by version 1 of each: it
    resumes where the code is at version 1 of each now, and is refused, left as it is, where it is not."""
    import torch

    spec = benchmarks.load("quickstart", overrides={**TINY, "checkpoint_every": 1})

    def unversioned_checkpoint(out: Path) -> Path:  # a killed run's last.pt, then stripped of its versions
        with pytest.raises(KeyboardInterrupt):
            run_cell(CellRequest(spec, "infonce_pwe", 0, out), RunOptions(progress=False, max_steps=1))
        last = cell_dir(out, "quickstart", "infonce_pwe", 0) / "last.pt"
        ckpt = load_checkpoint(last)
        assert ckpt.pop("versions") == {"suite": fusebench.__version__, "objective": "1"}
        torch.save(ckpt, last)
        assert "versions" not in load_checkpoint(last)
        return last

    last = unversioned_checkpoint(tmp_path / "a")  # the code at version 1 of each: resumed, and finished
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "a"), RunOptions(progress=False, resume=True))
    assert rec["resumed"] is True and (last.parent / "run.json").exists()

    last = unversioned_checkpoint(tmp_path / "b")
    before = last.read_bytes()
    monkeypatch.setattr(O.OBJECTIVES.get("infonce_pwe"), "version", "2")  # the loss changed since
    with pytest.raises(ConfigMismatchError, match=rf"cannot resume {re.escape(str(last))}: it states no code "
                                                  r"versions .*objective 'infonce_pwe' version '1', now '2'.*"
                                                  r"delete last\.pt"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "b"), RunOptions(progress=False, resume=True))
    assert last.read_bytes() == before and not (last.parent / "run.json").exists()
    last.unlink()  # what the message says: the cell starts over, under the code now
    rec = run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path / "b"), RunOptions(progress=False, resume=True))
    assert rec["versions"]["objective"] == "2" and rec["resumed"] is False


def test_records_of_older_schemas_are_judged_by_the_versions_they_state(tmp_path: Path, monkeypatch) -> None:
    """Schema 2-3 records state their metrics' versions in versions.metrics (the committed sunrgbd-det records
    said map_0.25 version 1 while the metric was at 3, and were reused); a schema-1 record states none: it was
    made by version 1 of everything (it was refused as "version None")."""
    import json

    from fusebench.engine.loop import RunError
    from fusebench.records.cell_file import existing_record

    spec = benchmarks.load("quickstart", overrides=TINY)
    _run(spec, "none", tmp_path)
    run_json = cell_dir(tmp_path, "quickstart", "none", 0) / "run.json"
    rec = json.loads(run_json.read_text())
    assert {m: e["version"] for m, e in rec["metrics"].items()} == {"acc": "1", "bacc": "1"}

    def as_written(record: dict) -> Path:
        path = tmp_path / f"edited{len(list(tmp_path.glob('edited*')))}.json"
        path.write_text(json.dumps(record))
        return path

    def older(schema: int, metric_versions: dict | None = None) -> dict:
        """The record as that schema wrote it (one the leaderboard reads; a reused record is validated): metric
        values with their directions beside, the metrics' versions in versions.metrics (none in schema 1)."""
        made = {k: v for k, v in rec.items() if k not in ("versions", "comparability_key")}
        made.update(schema_version=schema, metrics={k: e["value"] for k, e in rec["metrics"].items()},
                    metric_directions={k: e["direction"] for k, e in rec["metrics"].items()})
        if schema >= 2:
            made["versions"] = {**rec["versions"], "metrics": metric_versions}
            made["comparability_key"] = comparability_key(made)
        return made

    older3 = as_written(older(3, {"acc": "1", "bacc": "0"}))
    with pytest.raises(ConfigMismatchError, match=r"metric 'bacc' version '0', now '1'"):
        existing_record(older3, spec, "none", seed=0)
    same = as_written(older(3, {"acc": "1", "bacc": "1"}))
    assert existing_record(same, spec, "none", seed=0)["schema_version"] == 3
    path = tmp_path / "schema1.json"
    path.write_text(json.dumps(older(1)))
    assert existing_record(path, spec, "none", seed=0)["schema_version"] == 1  # version 1 of everything: reused
    # no schema_version at all: the leaderboard refuses it (a record states its schema), so a rerun does not reuse it
    unstated = tmp_path / "unstated.json"
    unstated.write_text(json.dumps({k: v for k, v in older(1).items() if k != "schema_version"}))
    with pytest.raises(RunError, match=rf"{re.escape(str(unstated))}: field 'schema_version': expected a value \(the "
                                       r"field is missing\); the leaderboard refuses this record: move the cell"):
        existing_record(unstated, spec, "none", seed=0)
    real = M.get  # a metric of the config at version 2 now: a schema-1 record's (version 1) is not reused

    def bumped(mid: str):
        return dataclasses.replace(real(mid), version="2") if mid == "bacc" else real(mid)

    monkeypatch.setattr(M, "get", bumped)
    with pytest.raises(ConfigMismatchError, match=r"metric 'bacc' version '1', now '2'"):
        existing_record(path, spec, "none", seed=0)
    monkeypatch.undo()
    for bad in ("4", True):  # the leaderboard's message
        with pytest.raises(RunError, match=r"field 'schema_version': expected one of \[1, 2, 3, 4\], got .*the "
                                           "leaderboard refuses this record"):
            existing_record(as_written({**rec, "schema_version": bad}), spec, "none", seed=0)


def test_an_encoder_version_that_is_not_a_string_is_refused(monkeypatch) -> None:
    from fusebench.typed import ConfigError

    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", property(lambda self: "2"))  # a plugin's instance property
    with pytest.raises(ConfigError, match=r"encoder 'mlp': its version must be a string .* got property"):
        encoder_version("mlp", {})
    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", True)
    with pytest.raises(ConfigError, match=r"got bool"):
        encoder_version("mlp", {})
    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", 2)  # an int is its string: one board for "2" and 2
    assert encoder_version("mlp", {}) == "2"


def test_a_metric_version_a_record_does_not_state_is_a_change() -> None:
    spec = benchmarks.load("quickstart", overrides=TINY)
    made = cell_versions(spec, "none")
    assert code_changes(spec, "none", made, {"acc": "1"}) == []
    assert code_changes(spec, "none", made, {"acc": None}) == ["metric 'acc' version None, now '1'"]


def test_status_names_the_records_a_rerun_would_refuse(tmp_path: Path, monkeypatch) -> None:
    from fusebench.sweep import status

    spec = benchmarks.load("quickstart", overrides=TINY)
    _run(spec, "none", tmp_path)
    assert status.collect(tmp_path, ["quickstart"])["quickstart"][("none", 0)] == ("done", "")
    monkeypatch.setattr(E.ENCODERS.get("mlp"), "version", "2")
    state = status.collect(tmp_path, ["quickstart"])["quickstart"][("none", 0)]
    assert state == ("done", "made by other code (encoder 'mlp' version '1', now '2'): a rerun refuses it; move the "
                             "cell away to rerun it")
    assert "  done: none/seed0: made by other code (encoder 'mlp'" in status.render({"quickstart": {("none", 0): state}})
    assert status.collect(tmp_path)["quickstart"][("none", 0)] == ("done", "")  # no spec named: not judged
    reads: list[str] = []
    read_text = Path.read_text

    def counted(self: Path, *a, **kw) -> str:
        reads.append(self.name)
        return read_text(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", counted)
    assert status.collect(tmp_path, ["quickstart"])["quickstart"][("none", 0)] == state
    assert reads.count("run.json") == 1  # the record is read once: its state, then its code versions from it


def test_a_pretraining_method_s_version_is_recorded_and_a_record_of_another_is_not_reused(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    """TupleInfoNCE's loss is assembled by its pretraining method (augmentation, fusion, disturbed negatives): a
    change there under unchanged options must be tracked as the objective's and the encoder's are."""
    from fusebench.components.identity import method_versions
    from fusebench.leaderboard.grouping import group_runs
    from fusebench.spec.methods import METHODS

    spec = benchmarks.load("quickstart", overrides=TINY)
    old = _run(spec, "tuple_infonce", tmp_path / "a")
    assert "methods" not in old["versions"] and method_versions(spec, "tuple_infonce") == {}  # all at version 1
    # (its version follows its options, version_of: a change under these options is one version_of reports)
    monkeypatch.setattr(METHODS.get("tuple_infonce"), "version_of", classmethod(lambda cls, options: "2"))
    assert method_versions(spec, "tuple_infonce") == {"tuple_infonce": "2"}
    assert method_versions(spec, "infonce_pwe") == {} and method_versions(spec, "none") == {}  # not joined by them
    with pytest.raises(ConfigMismatchError, match=r"made by other code .*pretraining method 'tuple_infonce' version "
                                                  r"'1', now '2'"):
        _run(spec, "tuple_infonce", tmp_path / "a")
    new = _run(spec, "tuple_infonce", tmp_path / "b")
    assert new["versions"]["methods"] == {"tuple_infonce": "2"}
    assert validate_record(new, "run.json").versions.row == "1 (tuple_infonce 2)"
    assert validate_record(old, "run.json").versions.row == "1"
    # one board row never averages the two: its runs are refused together, naming both versions
    recs = [validate_record(new, "b0.json"), validate_record(dict(old, seed=1), "b1.json")]
    with pytest.raises(ValueError, match=r"mixes runs of different objective versions .*version 1: .*b1\.json.*"
                                         r"version 1 \(tuple_infonce 2\): .*b0\.json"):
        group_runs("quickstart", recs)


def test_a_reference_row_of_two_versions_is_refused_as_a_change_of_its_features() -> None:
    """raw_pca is at row version 3 (its width selected on the selection seeds): a version-2 record (the width
    chosen in each run) beside a version-3 one is refused on a board, and the message speaks of the row's features (a reference row has no loss)."""
    from fusebench.leaderboard.grouping import group_runs

    root = Path(__file__).resolve().parents[1] / "leaderboards" / "runs" / "mv-3sources" / "raw_pca"
    new = json.loads((root / "seed0" / "run.json").read_text())
    assert new["versions"]["objective"] == "3"
    old = json.loads((root / "seed1" / "run.json").read_text())
    old["versions"] = dict(old["versions"], objective="2")
    recs = [validate_record(new, "new.json"), validate_record(old, "old.json")]
    with pytest.raises(ValueError, match=r"objective 'raw_pca' mixes runs of different objective versions \(the "
                                         r"row's features changed between them\): version 2: .*old\.json.*version 3: "
                                         r".*new\.json"):
        group_runs("mv-3sources", recs)


def test_tuple_infonce_s_version_follows_sample_optimisation() -> None:
    """Eq. 8's zeta* rule changed (version 2), a part of the sample optimisation, which a run without it never calls:
    TupleInfoNCE's method is at version "2" with sample_optimisation: true and "1" without, so the committed
    tuple_infonce records (every one with it off) stay current and a record made with it on before the change would
    be stale. A grid searching the switch trains at both (the selection's trials): "1+2", which either version's
    change alters. Values by hand from that rule."""
    from fusebench.components.identity import method_versions
    from fusebench.spec.methods import METHODS, method_version

    cls = METHODS.get("tuple_infonce")
    assert method_version(cls, cls.Options()) == "1" and method_version(cls, cls.Options(sample_optimisation=True)) == "2"
    made_off = {"suite": fusebench.__version__, "objective": "1"}  # a record without versions.methods: version 1
    off = benchmarks.load("quickstart", overrides=TINY)
    on = benchmarks.load("quickstart", overrides={**TINY, "pretrain.methods.tuple_infonce.sample_optimisation": True})
    assert method_versions(off, "tuple_infonce") == {} and "methods" not in cell_versions(off, "tuple_infonce")
    assert method_versions(on, "tuple_infonce") == {"tuple_infonce": "2"}
    assert cell_versions(on, "tuple_infonce")["methods"] == {"tuple_infonce": "2"}
    assert method_versions(on, "infonce_pwe") == {}  # the method does not join infonce_pwe's runs
    assert code_changes(off, "tuple_infonce", made_off) == []
    assert code_changes(on, "tuple_infonce", made_off) == ["pretraining method 'tuple_infonce' version '1', now '2'"]
    assert code_changes(on, "tuple_infonce", {**made_off, "methods": {"tuple_infonce": "2"}}) == []
    assert code_changes(off, "tuple_infonce", {**made_off, "methods": {"tuple_infonce": "2"}}) == [
        "pretraining method 'tuple_infonce' version '2', now '1'"]
    grid = "pretrain.per_objective.tuple_infonce.grid"
    both = benchmarks.load("quickstart", overrides={**TINY, grid: {"methods.tuple_infonce.sample_optimisation": [True, False]}})
    assert method_versions(both, "tuple_infonce") == {"tuple_infonce": "1+2"}
    only_on = benchmarks.load("quickstart", overrides={**TINY, grid: {"methods.tuple_infonce.sample_optimisation": [True]}})
    assert method_versions(only_on, "tuple_infonce") == {"tuple_infonce": "2"}


def test_a_method_s_version_of_defaults_to_its_class_version_and_must_be_a_string() -> None:
    from dataclasses import dataclass

    from fusebench.spec.methods import PretrainMethod, method_version
    from fusebench.typed import ConfigError

    @dataclass
    class Opts:
        on: bool = False

    class Plain(PretrainMethod):
        id, Options, version = "plain_test", Opts, "3"

    class Switched(Plain):
        @classmethod
        def version_of(cls, options):
            return "4" if options.on else cls.version

    class Bad(Plain):
        @classmethod
        def version_of(cls, options):
            return True

    assert method_version(Plain, Opts()) == method_version(Plain, Opts(on=True)) == "3"
    assert (method_version(Switched, Opts()), method_version(Switched, Opts(on=True))) == ("3", "4")
    with pytest.raises(ConfigError, match="pretraining method 'plain_test': its version must be a string .* got bool"):
        method_version(Bad, Opts())
