"""scripts/variant_hparams.py: a variant's spec takes its base board's selected hyper-parameters, and only those."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("variant_hparams", ROOT / "scripts" / "variant_hparams.py")
variant_hparams = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variant_hparams)


def _setup(tmp_path: Path) -> tuple[Path, Path, dict]:
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    for name in ("mv-cub", "mv-cub-4x"):
        shutil.copy(ROOT / "benchmarks" / f"{name}.yaml", bench / f"{name}.yaml")
    base = yaml.safe_load((bench / "mv-cub.yaml").read_text())
    sel = tmp_path / "runs" / "mv-cub" / "_selection"
    sel.mkdir(parents=True)
    chosen = {}
    for objective, table in base["pretrain"]["per_objective"].items():
        if "grid" not in table:
            continue
        choice = {k: values[-1] for k, values in table["grid"].items()}  # the last grid point: unlike the old file
        chosen[objective] = choice
        (sel / f"{objective}.json").write_text(json.dumps({
            "benchmark": "mv-cub", "objective": objective, "grid": table["grid"], "choice": choice,
            "metric": base["comparison"]["primary"]}))
    widths = base["options"]["embedding_eval"]["pca_widths"]  # raw_pca's width, selected like a hyper-parameter
    chosen["raw_pca"] = {"width": widths[1]}
    (sel / "raw_pca.json").write_text(json.dumps({
        "benchmark": "mv-cub", "objective": "raw_pca", "grid": {"width": widths}, "choice": chosen["raw_pca"],
        "metric": base["comparison"]["primary"]}))
    return bench, sel, chosen


def test_the_variant_takes_every_choice_and_nothing_else_changes(tmp_path: Path) -> None:
    bench, sel, chosen = _setup(tmp_path)
    before = (bench / "mv-cub-4x.yaml").read_text()
    argv = ["mv-cub-4x", "--runs", str(tmp_path / "runs"), "--benchmarks", str(bench)]
    assert variant_hparams.main([*argv, "--check"]) == 1  # differs: nothing written
    assert (bench / "mv-cub-4x.yaml").read_text() == before
    assert variant_hparams.main(argv) == 0
    after = (bench / "mv-cub-4x.yaml").read_text()
    new = yaml.safe_load(after)
    old = yaml.safe_load(before)
    hp = {o: t.get("hparams") for o, t in new["pretrain"]["per_objective"].items()}
    # raw_pca's chosen width: the variant's one width (its line rewritten, with a comment naming the base)
    assert new["options"]["embedding_eval"]["pca_widths"] == [chosen.pop("raw_pca")["width"]]
    assert "raw_pca" not in hp and "pca_widths: [4]  # mv-cub: the base board's choice" in after
    for objective, choice in chosen.items():
        plain = {k: v for k, v in choice.items() if not k.startswith("methods.")}
        if plain:
            assert hp[objective] == plain, objective
        for key, value in choice.items():
            if key.startswith("methods."):
                _, method, name = key.split(".", 2)
                assert new["pretrain"]["methods"][method][name] == value
    # everything else as it was: the other keys, the header comments
    for spec_ in (new, old):
        spec_["pretrain"].pop("per_objective")
        spec_["pretrain"]["methods"].pop("ema_teacher")
        spec_["options"]["embedding_eval"].pop("pca_widths")
    assert new == old
    assert [line for line in after.splitlines() if line.startswith("#")] == \
        [line for line in before.splitlines() if line.startswith("#")]
    assert variant_hparams.main([*argv, "--check"]) == 0


def test_a_selection_of_another_grid_or_disagreeing_methods_is_refused(tmp_path: Path) -> None:
    bench, sel, chosen = _setup(tmp_path)
    argv = ["mv-cub-4x", "--runs", str(tmp_path / "runs"), "--benchmarks", str(bench)]
    before = (bench / "mv-cub-4x.yaml").read_text()
    path = sel / "byol_avg.json"
    data = json.loads(path.read_text())
    data["choice"] = {k: v[0] for k, v in data["grid"].items()}  # byol_pwe chose the last point: one table cannot hold both
    path.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match=r"byol_pwe.json: chose methods.ema_teacher.momentum = 0.996, but byol_avg.json chose 0.9"):
        variant_hparams.main(argv)
    data["grid"] = {k: v[1:] for k, v in data["grid"].items()}  # an older, narrower grid
    path.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match=r"byol_avg.json: made over grid .* re-run mv-cub first"):
        variant_hparams.main(argv)
    assert (bench / "mv-cub-4x.yaml").read_text() == before  # nothing written
    path.unlink()  # a file of an objective the base does not select (its name would go into the spec)
    (sel / "no_such.json").write_text(json.dumps({**data, "objective": "no_such"}))
    with pytest.raises(SystemExit, match=r"no_such.json: 'no_such' is not a row mv-cub's spec selects"):
        variant_hparams.main(argv)
    assert (bench / "mv-cub-4x.yaml").read_text() == before


def test_a_variant_of_that_is_no_id_is_refused(tmp_path: Path) -> None:
    """variant_of names the base's spec file and is written into the variant's comments: an id only."""
    bench, _, _ = _setup(tmp_path)
    text = (bench / "mv-cub-4x.yaml").read_text()
    (bench / "mv-cub-4x.yaml").write_text(text.replace("variant_of: mv-cub", 'variant_of: "mv-cub\\n#x"'))
    with pytest.raises(SystemExit, match=r"variant_of 'mv-cub\\n#x' is not a benchmark id"):
        variant_hparams.main(["mv-cub-4x", "--runs", str(tmp_path / "runs"), "--benchmarks", str(bench)])
