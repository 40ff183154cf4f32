"""The board markdown of one benchmark (:func:`render_board`): title and description, then per
comparability group its data line, what it compares (primary metric, reference row), how to read the
cells, the table and its notes (:mod:`fusebench.leaderboard.table`), the published rows
(:mod:`fusebench.leaderboard.reported`), the protocol (selection, tests, views, cost, precision,
chosen hyper-parameters, compute), the curves plot and studies beside the board; the metadata
comment for the index last (:mod:`fusebench.leaderboard.meta`)."""

from __future__ import annotations

import json
import math

from fusebench.leaderboard.columns import md_code, md_text
from fusebench.leaderboard.grouping import group_key, group_runs
from fusebench.leaderboard.groups import (CI_RESAMPLES, CI_SEED, RANK_RESAMPLES, RANK_SEED, GroupView,
                                          make_view, oldest_first)
from fusebench.leaderboard.meta import KIND_TITLES, board_meta, meta_comment
from fusebench.leaderboard.reported import Reported, published_section
from fusebench.leaderboard.robustness import section_lines as robustness_lines
from fusebench.leaderboard.sensitivity import section_lines as sensitivity_lines
from fusebench.leaderboard.ties import ALPHA, SEED_SETS_DIFFER
from fusebench.leaderboard.table import notes_lines, table_lines
from fusebench.records import RunRecord, differing_fields


#: the Protocol line saying who set the comparison (:attr:`GroupView.compared_by`)
_COMPARED_BY = {
    "the benchmark": "the `comparison` block of the benchmark's current spec (read when the board is made; it "
                     "overrides the copy in the run records)",
    "the runs": "the `comparison` copied into the run records, the same in every record that has one (no spec of "
                "this benchmark is installed)",
    "": "neither the benchmark's spec nor the run records have a `comparison`: the records' selection metric and "
        "the default reference row",
}


def _data_line(view: GroupView) -> str:
    ds = view.recs[0].dataset
    if view.kind == "real":
        fp = f", data fingerprint `{ds.fingerprint.sha256[:12]}`" if ds.fingerprint else ""
        named = view.recs[0].raw["dataset"].get("data_file")  # the one file read (issue #32), typed by the schema
        if named is not None:
            fp += f", data file {md_code(named['name'])} (sha256 {md_code(named['sha256'][:16])})"
        return (f"Data: **real** (dataset `{ds.id}`, manifest {md_code(ds.manifest_hash[:16])}{fp}); "
                f"seeds {', '.join(map(str, view.seeds))}.")
    if view.kind == "pipeline_check":
        data = "synthetic** twin of dataset" if ds.synthetic else "real** dataset"
        why = f" Why: {md_text(ds.data_check)}" if ds.data_check else ""  # its splits share samples
        return (f"Data: **{data} `{ds.id}`. **Pipeline check**: a tiny smoke run that checks the pipeline end to "
                f"end; its numbers rank nothing (no best row, no tests).{why}")
    return (f"Data: **synthetic** (dataset `{ds.id}`, synthetic by design); a reproducible study whose ranking "
            f"holds for this data only.")


def _comparison_lines(view: GroupView) -> list[str]:
    """What the table compares: the primary metric (and why) and the reference row of the tests."""
    p = view.primary
    if not p:
        return []
    why = view.why.rstrip(".")
    if why[:1].isupper() and not why[1:2].isupper():  # a sentence's capital goes after "because"; an acronym stays
        why = why[0].lower() + why[1:]
    why = md_text(why) if why else ""
    line = f"Primary metric: `{p}`" + (f" (chosen because {why})" if why else "") + "."
    if view.ranked:
        if view.reference:
            line += f" Reference row of the tests: {view.reference_text}."
        else:
            line += f" No tests: {view.reference_text}."
    if view.spec_differences:  # the why above is the spec's text; the runs' own settings are under Protocol
        keys = [k for k, _, _ in view.spec_differences]
        line += (f" These runs were made with settings other than the current spec's ({', '.join(map(md_code, keys[:4]))}"
                 f"{f' and {len(keys) - 4} more' if len(keys) > 4 else ''}): the text above and the protocol notes "
                 f"describe the spec; the Protocol section gives the runs' values.")
    if view.code_differences:
        changes = "; ".join(f"{md_text(c)} ({n:,} of {len(view.recs):,} runs)" for c, n in view.code_differences)
        line += (f" **Made by other code than the current one**: {changes}. These numbers are what those runs "
                 f"computed; {md_code(f'fusebench run {view.name}')} would not reuse them but compute them again.")
    return [line, ""]


def _cells_text(view: GroupView) -> str:
    text = ("Cells are mean ± std (n seeds), sample std; metrics marked (%) are fractions shown x100; "
            "arrows give the direction of better.")
    p = view.primary
    if view.ranked and p:
        text += (f" {p} 95% CI: percentile bootstrap of the mean over seeds ({CI_RESAMPLES:,} resamples, "
                 f"fixed seed; with few seeds it describes the seeds and is too narrow to be a calibrated interval).")
        if view.reference:
            n = sum(1 for r in view.tests.values() if r["p"] is not None)
            text += (f" Δ: mean over the seeds shared with `{view.reference}` of (row − `{view.reference}`) on "
                     f"`{p}`, in the column's units; in brackets the p-value of a two-sided paired t-test over "
                     f"those seeds, Holm-adjusted over the {n} row(s) tested.")
        if view.ranks:
            text += (f" Rank [95%]: the row's rank on `{p}` (1 = best; tied means share the better rank) and the "
                     f"2.5 / 97.5 percentiles of its rank over {RANK_RESAMPLES:,} bootstrap resamples of the seeds "
                     f"every row has (fixed seed). vs best: two-sided paired t-test against the best row over shared "
                     f"seeds, Holm-adjusted over the rows; `tied` where not separable (p > {ALPHA}).")
            why = next((r["why"] for r in view.ranks.values() if r.get("why")), None)
            if why == SEED_SETS_DIFFER:
                text += (f" No rank interval here: {why} (a rank comes from each row's mean over all its seeds, which "
                         f"resamples of the shared seeds alone need not contain), so the rank is shown bare.")
            elif why:
                text += f" No rank interval here ({why}): the rank is shown bare."
        text += (f" Bold: the best mean of a column, only when it is separable from the second-best row (paired "
                 f"t-test over shared seeds, Holm over the rows, p ≤ {ALPHA}); no bold where it is not.")
        text += _test_split_text(view)
    text += " Steps / samples seen: the pretraining budget of the row (0 for reference rows; — where not recorded)."
    if view.undefined:  # only boards with NaN metrics carry the note
        text += (" `k undefined`: runs whose value of the metric is undefined (null in their run.json, NaN in "
                 "older records; e.g. a correlation of constant predictions), left out of the mean, std, best and "
                 "tests.")
    return text


def _test_split_text(view: GroupView) -> str:
    """What the tests over seeds leave out, where every run is scored on one fixed test split (the records'
    ``dataset.splits.outer_test_seed``, or a test split the data file ships) of the same size: the sampling noise of
    that split, with its size."""
    sizes, fixed = set(), True
    for r in view.recs:
        ds = r.raw.get("dataset") if isinstance(r.raw.get("dataset"), dict) else {}
        splits = ds.get("splits") if isinstance(ds.get("splits"), dict) else {}
        n = (ds.get("sizes") or {}).get("test") if isinstance(ds.get("sizes"), dict) else None
        sizes.add(n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None)
        shipped = splits.get("shipped_split")  # {"train", "test", "used"} where the file ships a split
        fixed = fixed and (splits.get("outer_test_seed") is not None
                           or (isinstance(shipped, dict) and shipped.get("used") is True))
    if not fixed or len(sizes) != 1 or None in sizes:
        return ""
    n = sizes.pop()
    return (f" Every run is scored on the same test split of {n:,} samples: the seeds vary the initialisation and the "
            f"train / val partition, not the test samples, so the tests leave out the test split's own sampling noise "
            f"(two rows whose predictions differ on a fraction d of the test samples have an accuracy difference with "
            f"a test-sampling standard error of up to sqrt(d / n): {100 * math.sqrt(0.2 / n):.1f} points at d = 0.2); "
            f"a separable difference smaller than that may not hold on another test split.")


def group_section(view: GroupView, reported: list[Reported], plot_name: str | None, level: int = 2,
                  missing_plot: str | None = None, sensitivity_plot: str | None = None) -> list[str]:
    """Table, notes, published rows (when given), missing-view robustness (when the runs have it), protocol
    and curves of one group (headings at ``level``)."""
    h = "#" * level
    out = [_data_line(view), ""] + _comparison_lines(view) + [_cells_text(view), ""]
    out += table_lines(view)
    out += notes_lines(view)
    if reported:
        out += [""] + published_section([view], reported, level)
    out += robustness_lines(view, missing_plot, level)  # nothing for runs without missing-view metrics
    out += sensitivity_lines(view, sensitivity_plot, level)  # nothing without a tuned objective
    unknown = [m.id for m in view.metrics if m.direction is None]
    first = view.recs[0]
    suites = sorted({r.suite_version for r in view.recs})
    out += ["", f"{h} Protocol", "",
            f"- data: {KIND_TITLES[view.kind]} (dataset `{first.dataset.id}`"
            + (f"; modality family {md_text(view.family)}" if view.family else "") + ")",
            *([f"- a variant of [{view.variant_of}]({view.variant_of}.md) (the same data and rows with the setting "
               f"its protocol notes name changed): left out of the cross-dataset ranking, compared with that board in "
               f"the index"] if view.variant_of else []),
            f"- model selection: {md_text(first.selection.get('rule', ''))}"]
    if view.ranked:
        ref = f"the fixed reference row `{view.reference}`" if view.reference else "no reference row: no tests"
        out.append(f"- primary metric: `{view.primary}`; paired test: two-sided paired t-test over shared seeds "
                   f"(scipy.stats.ttest_rel) against {ref}, Holm-adjusted over the rows tested; 95% CI: "
                   f"percentile bootstrap of the mean ({CI_RESAMPLES:,} resamples, seed {CI_SEED})"
                   + (f"; ties: paired t-test of every row against the best row, Holm-adjusted, alpha {ALPHA}; rank "
                      f"interval: bootstrap over seeds ({RANK_RESAMPLES:,} resamples, seed {RANK_SEED})"
                      if view.ranks else ""))
    else:
        out.append(f"- primary metric: `{view.primary}`; pipeline check: no best row and no tests")
    out.append(f"- comparison (primary metric, reference row, why): {_COMPARED_BY[view.compared_by]}")
    if view.num_views:
        out.append(f"- views: k = {view.num_views}")
    out.append("- cost: mean pretraining wall time; peak memory = the process's peak resident set on CPU (in a sweep "
               "it includes earlier cells of the same process) or the CUDA allocator peak on GPU (device in run.json)")
    if unknown:
        out.append(f"- direction unknown (never bolded): {', '.join(f'`{m}`' for m in unknown)}")
    out.append(_precision_line(view))
    protocol: dict[str, str] = {}
    if view.protocol_notes is not None:  # the benchmark's current spec (a changed sentence needs no re-run)
        protocol = dict(view.protocol_notes)
    else:
        for r in oldest_first(view.recs):  # no spec installed: the newest record's text of a note wins
            protocol.update(r.protocol)
    differ = _spec_difference_line(view)
    if differ:
        out.append(differ)
    for key in sorted(protocol):
        out.append(f"- {md_text(key)}: {md_text(protocol[key])}")
    out.append(f"- runs: {len(view.recs)} run.json file(s), seeds {', '.join(map(str, view.seeds))}, "
               f"fusebench {md_text(', '.join(suites))}, comparability key `{group_key(view.recs)}`")
    chosen = _chosen_hparams(view)
    if chosen:
        out.append(f"- hyper-parameters chosen on the validation split: {chosen}")
    wall = sum(float(r.raw.get("wall_time_s") or 0.0) for r in view.recs)  # fields typed by validate_record
    # one run per grid point and selection seed (records of several selection seeds list the seeds)
    trials = sum(len((r.raw.get("hparam_selection") or {}).get("scores", []))
                 * max(1, len((r.raw.get("hparam_selection") or {}).get("seeds") or []))
                 for r in _first_per_objective(view))
    out.append(f"- compute: {wall / 60:.1f} min in all, the sum of the {len(view.recs)} runs' wall times "
               f"(device {md_text(first.raw.get('device') or '?')}, "
               f"{_or_unknown((first.raw.get('host') or {}).get('cpu_count'))} CPUs)"
               + (f", plus {trials} selection run(s) on the validation split" if trials else ""))
    if plot_name:
        out += ["", f"{h} Training curves", "", f"![training curves]({plot_name})"]
    for study in view.studies:
        out += ["", f"{h} Study: {study[0]}", "", f"[{study[0]}]({study[1]}) — ![{study[0]}]({study[2]})"]
    return out


def _setting(value: object, limit: int = 60) -> str:
    """A config value as a board shows it: its JSON text as a code span (shortened past ``limit`` characters)."""
    if isinstance(value, str) and len(value) <= limit:
        return md_code(value)
    text = json.dumps(value, sort_keys=True, default=str)
    return md_code(text if len(text) <= limit else text[:limit - 1] + "…")


def _spec_difference_line(view: GroupView, most: int = 12) -> str | None:
    """A protocol line when the runs' config differs from the current spec whose notes (below it) and comparison
    (above the table) the board shows (:attr:`GroupView.spec_differences`): each setting with the runs' value and
    the spec's, so a note's "100 restarts" is not read as what these runs did."""
    diffs = view.spec_differences
    if not diffs:
        return None
    parts = [f"{md_code(key)} {' / '.join(_setting(v) for v in runs)} (spec: {_setting(spec)})"
             for key, spec, runs in diffs[:most]]
    more = f"; and {len(diffs) - most} more" if len(diffs) > most else ""
    return ("- **these runs' config differs from the benchmark's current spec**, which the notes below and the "
            "comparison above the table describe (where they state one of these settings, the runs' value is the one "
            "given here, setting: runs' value (spec's)): " + "; ".join(parts) + more)


def _precision_line(view: GroupView) -> str:
    """The group's precision policy (one per group: it is part of the comparability key) and the
    devices its runs were made on (``numerics.device_name`` where recorded, else ``device``)."""
    from fusebench.spec.precision import PRECISIONS

    name = view.recs[0].precision
    devices: dict[str, int] = {}
    for r in view.recs:
        numerics = r.raw.get("numerics") or {}  # typed by validate_record
        dev = md_text(r.raw.get("device") or "?")
        label = f"{dev} ({md_text(numerics['device_name'])})" if numerics.get("device_name") else dev
        devices[label] = devices.get(label, 0) + 1
    shown = ", ".join(f"{d} x{n}" for d, n in sorted(devices.items()))
    return (f"- precision: `{name}` ({PRECISIONS[name].summary}); objectives and metrics compute in float32 or "
            f"wider whatever the precision (docs/gpu.md); runs on {shown}")


def _first_per_objective(view: GroupView) -> list[RunRecord]:
    seen: dict[str, RunRecord] = {}
    for r in view.recs:
        seen.setdefault(r.objective, r)
    return [seen[o] for o in sorted(seen)]


def _chosen_hparams(view: GroupView) -> str:
    """``obj`` name=value (grid) per objective whose records carry a validation-split selection."""
    parts = []
    for r in _first_per_objective(view):
        sel = r.raw.get("hparam_selection")
        if not isinstance(sel, dict) or not isinstance(sel.get("choice"), dict):
            continue
        grid = sel.get("grid") or {}
        edge = sel.get("at_edge") if isinstance(sel.get("at_edge"), list) else []  # issue #30; absent in older records
        choice = ", ".join(f"{md_text(k)}={_value_text(v)} of {_value_text(grid.get(k))}"
                           + (" (on the grid's edge)" if k in edge else "")
                           for k, v in sorted(sel["choice"].items()))
        parts.append(f"`{r.objective}` {choice}")
    return "; ".join(parts)


def _or_unknown(v: object) -> object:
    return "?" if v is None else v


def _value_text(v: object) -> str:
    """A hyper-parameter value from a record as markdown text: a list as ``[a, b]`` (strings quoted, as
    Python prints a list), anything else as :func:`md_text` of its text."""
    if isinstance(v, list):
        return "[" + ", ".join(md_text(repr(x)) if isinstance(x, str) else _value_text(x) for x in v) + "]"
    return md_text(v)


def render_board(name: str, views: list[GroupView], reported: list[Reported],
                 plot_names: list[str | None], missing_plots: list[str | None] | None = None,
                 sensitivity_plots: list[str | None] | None = None) -> str:
    """The whole board markdown of one benchmark (one section per group when split; the published
    rows once, in a section of their own). ``missing_plots``: per group, the missing-view plot's file
    name (None: no plot)."""
    missing_plots = list(missing_plots) if missing_plots is not None else [None] * len(views)
    sensitivity_plots = list(sensitivity_plots) if sensitivity_plots is not None else [None] * len(views)
    out = [f"# Leaderboard: {name}", ""]
    desc = oldest_first(views[0].recs)[-1].description
    if desc:
        out += [md_text(desc), ""]
    metas = []
    if len(views) == 1:
        out += group_section(views[0], reported, plot_names[0], level=2, missing_plot=missing_plots[0],
                             sensitivity_plot=sensitivity_plots[0])
        metas.append(board_meta(views[0], None))
    else:
        fields = differing_fields([v.recs[0] for v in views])  # a config key is a record's text: escaped
        out += [f"The runs of this benchmark fall into {len(views)} comparability groups (runs that must not be "
                f"compared), one table each; they differ in {', '.join(map(md_code, fields))}.", ""]
        for i, (view, plot, missing, sens) in enumerate(zip(views, plot_names, missing_plots, sensitivity_plots), 1):
            title = f"group {i} of {len(views)}"
            out += [f"## Group {i} of {len(views)}: key `{group_key(view.recs)}`", ""]
            out += group_section(view, [], plot, level=3, missing_plot=missing, sensitivity_plot=sens)
            out.append("")
            metas.append(board_meta(view, title))
        out = out[:-1]
        if reported:
            out += [""] + published_section(views, reported, level=2)
    out += ["", meta_comment(name, metas)]
    return "\n".join(out) + "\n"


def benchmark_table(name: str, recs: list[RunRecord], plot_name: str | None = None,
                    reported: list[Reported] = ()) -> str:
    """The board of one benchmark whose runs form one comparability group."""
    (group,) = group_runs(name, recs)
    return render_board(name, [make_view(name, group)], list(reported), [plot_name])
