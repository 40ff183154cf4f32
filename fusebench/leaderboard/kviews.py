"""The k-views study's board (:mod:`fusebench.studies.kviews`): its run records read back and indexed
(:func:`collect`), the paired gaps (:func:`pairs`), and the markdown table and plot (:func:`render`)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fusebench.components.rows import BASELINE, RAW
from fusebench.io import canonical_json
from fusebench.leaderboard.columns import md_code, md_text, mean_std
from fusebench.studies.kviews import ARMS, CELL_NAME, LEGACY_CELL_NAME, METRICS, OBJECTIVES, PRIMARY
from fusebench.studies.kviews import PAIRED_WITH  # the rows the gaps are paired with


# ---------------------------------------------------------------------------------------------
# reading the records back
# ---------------------------------------------------------------------------------------------
@dataclass
class StudyRuns:
    """The study's records, indexed: ``values[arm][k][cell name][objective][seed] = {metric: value}``;
    ``budgets``: one (objective, steps, samples seen, batch, micro-batch, epochs) per pretrained run;
    ``cells[arm][k]``: cell name -> its parsed ``protocol_notes.kviews`` (or the view set); ``widths``: the
    encoders' features per view (``encoder.config.num_features``) the records name."""

    values: dict[str, dict[int, dict[str, dict[str, dict[int, dict[str, float]]]]]]
    budgets: list[tuple[str, int, int, int | None, int | None, int]]
    cells: dict[str, dict[int, dict[str, dict[str, Any]]]]
    records: int = 0
    widths: frozenset = frozenset()
    # per pretrained objective: {its hyper-parameters as canonical JSON: runs}, the cells whose records hold a
    # selection (``hparam_selection``: the study's selection cell), and the cells that the other cells' JSON note
    # names as where its values were chosen (``hparams_chosen_in``, :func:`fusebench.studies.kviews.chosen_overrides`)
    hparams: dict[str, dict[str, int]] = field(default_factory=dict)
    selected_in: dict[str, set[str]] = field(default_factory=dict)
    noted_in: dict[str, set[str]] = field(default_factory=dict)

    def objectives(self) -> list[str]:
        seen = {o for arm in self.values.values() for k in arm.values() for c in k.values() for o in c}
        return [o for o in OBJECTIVES if o in seen] + sorted(seen - set(OBJECTIVES))

    def ks(self) -> list[int]:
        return sorted({k for arm in self.values.values() for k in arm})

    def arms(self) -> list[str]:
        return [a for a in ARMS if self.values.get(a)]

    def metrics(self) -> list[tuple[str, str]]:
        """(id, label) of the :data:`~fusebench.studies.kviews.METRICS` some record holds, in that order: the
        first is the board's primary (records of the first design hold ``acc`` and ``cluster_acc`` only)."""
        seen = {m for arm in self.values.values() for k in arm.values() for c in k.values() for o in c.values()
                for v in o.values() for m in v}
        return [(m, label) for m, label in METRICS if m in seen]

    def seeds(self) -> list[int]:
        return sorted({s for arm in self.values.values() for k in arm.values() for c in k.values()
                       for o in c.values() for s in o})


def collect(runs: str | Path, benchmark: str) -> StudyRuns:
    """The records of ``<runs>/<benchmark>-kv-<arm>-k<k>d<j>/<objective>/seed<s>/run.json``.
    Raises ValueError when there is none (naming the superseded design's cells when only those exist)."""
    from fusebench.records import find_records, load_record

    runs = Path(runs)
    values: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(dict))))
    cells: dict = defaultdict(lambda: defaultdict(dict))
    budgets = []
    widths = set()
    hparams: dict[str, dict[str, int]] = {}
    selected_in: dict[str, set[str]] = {}
    noted_in: dict[str, set[str]] = {}
    legacy = 0
    count = 0
    for path in (find_records(runs) if runs.is_dir() else []):  # the leaderboard's rule of what a record file is
        parts = path.relative_to(runs).parts
        if len(parts) != 4 or not parts[2].startswith("seed"):
            continue
        m = CELL_NAME.fullmatch(parts[0])
        if m is None or m["bench"] != benchmark:
            legacy += bool(parts[0].startswith(f"{benchmark}-k") and LEGACY_CELL_NAME.fullmatch(parts[0]))
            continue
        rec = load_record(path)
        if rec.benchmark != parts[0]:
            continue
        arm, k = m["arm"], int(m["k"])
        values[arm][k][rec.benchmark][rec.objective][rec.seed] = {mid: float(rec.metrics[mid])
                                                                 for mid, _ in METRICS if mid in rec.metrics}
        note = rec.config.get("protocol_notes", {}).get("kviews")
        try:
            info = json.loads(note) if note else {}
        except ValueError:
            info = {}
        info = cells[arm][k][rec.benchmark] = info if isinstance(info, dict) else {}
        encoder = rec.config.get("encoder") if isinstance(rec.config.get("encoder"), dict) else {}
        width = (encoder.get("config") or {}).get("num_features") if isinstance(encoder.get("config"), dict) else None
        if isinstance(width, int) and not isinstance(width, bool):
            widths.add(width)
        if rec.objective not in PAIRED_WITH and isinstance(rec.raw.get("hparams"), dict):
            key = canonical_json(rec.raw["hparams"], compact=True, default=None)
            hparams.setdefault(rec.objective, defaultdict(int))[key] += 1
            if isinstance(rec.raw.get("hparam_selection"), dict):
                selected_in.setdefault(rec.objective, set()).add(rec.benchmark)
            chosen_in = info.get("hparams_chosen_in")  # the selection cell, as this cell's note names it
            if (isinstance(chosen_in, str) and CELL_NAME.fullmatch(chosen_in)
                    and rec.objective in (info.get("hparams_chosen") or [])):
                noted_in.setdefault(rec.objective, set()).add(chosen_in)
        b = rec.raw.get("budget") or {}
        if b.get("batch_size") is not None:  # a pretrained run (none / raw kinds pretrain nothing)
            budgets.append((rec.objective, int(b.get("optimizer_steps", -1)), int(b.get("samples_seen", -1)),
                            b.get("batch_size"), b.get("micro_batch"), int(b.get("epochs", -1))))
        count += 1
    if not count:
        old = (f"; {legacy} record(s) of the superseded design (one subset per k, {benchmark}-k<k>s<j>) are there: "
               "rerun `fusebench study kviews`" if legacy else "; run the study first")
        raise ValueError(f"kviews: no run records of {benchmark}-kv-<arm>-k<k>d<draw> under {runs}{old}")
    return StudyRuns(values, budgets, cells, count, frozenset(widths), {o: dict(v) for o, v in hparams.items()},
                     selected_in, noted_in)


def pairs(study: StudyRuns, arm: str, k: int, objective: str, reference: str | None, metric: str) -> list[float]:
    """The paired gaps ``m(objective, c, s) - m(reference, c, s)`` over the cells c and seeds s of (arm,
    k) where both runs exist, in (cell, seed) order; ``reference=None``: the values themselves."""
    out = []
    for name in sorted(study.values.get(arm, {}).get(k, {})):
        rows = study.values[arm][k][name]
        for s in sorted(rows.get(objective, {})):
            v = rows[objective][s].get(metric)
            if v is None or not math.isfinite(v):  # an undefined metric (null in the record) takes no part
                continue
            if reference is None:
                out.append(v)
                continue
            r = rows.get(reference, {}).get(s, {}).get(metric)
            if r is not None and math.isfinite(r):
                out.append(v - r)
    return out


# ---------------------------------------------------------------------------------------------
# the board
# ---------------------------------------------------------------------------------------------
def _fmt(values: list[float], signed: bool) -> str:
    if not values:
        return "—"
    mean, std = mean_std(values)
    value = f"{100 * mean:{'+' if signed else ''}.2f}"
    return f"{value} ± {100 * std:.2f} ({len(values)})" if len(values) > 1 else f"{value} (1)"  # no spread of one


def _pts(x: float) -> str:
    return f"{100 * x:+.2f}"


def _budget_text(study: StudyRuns) -> str:
    kinds = defaultdict(int)
    for _, steps, samples, batch, micro, ep in study.budgets:
        kinds[(steps, samples, batch, ep)] += 1
    micro = sorted({(o, m) for o, *_, m, _ in study.budgets if m})
    mtext = "; ".join(f"`{o}` computed its loss on micro-batches of {m} accumulated over that batch" for o, m in micro)
    if not kinds:
        return "no pretrained run took an optimiser step (no budget with a batch size in the records)"
    if len(kinds) == 1:
        (steps, samples, batch, ep), n = next(iter(kinds.items()))
        text = (f"all {n} pretrained runs took the same budget: {steps} optimiser steps on batches of {batch} "
                f"({ep} epoch{'' if ep == 1 else 's'}), {samples} training samples seen")
    else:
        listed = "; ".join(f"{n} runs: {s} steps, {sm} samples, batch {b}, {e} epochs"
                           for (s, sm, b, e), n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        text = f"the pretrained runs did NOT all take the same budget ({listed})"
    return text + (f" ({mtext})" if mtext else "")


def _hparams_text(study: StudyRuns, pretrained: list[str]) -> str:
    """Per pretrained objective, the hyper-parameters its runs used (read from the records' ``hparams``) and
    where they were chosen: on validation in the cell whose records hold its ``hparam_selection``, else in the cell
    the other cells' protocol note names (that cell's records of it are missing), else not at all (the spec's
    values)."""
    parts = []
    for o in pretrained:
        seen = study.hparams.get(o)
        if not seen:
            continue
        shown = []
        for key, n in sorted(seen.items(), key=lambda kv: -kv[1]):
            hp = json.loads(key)
            shown.append((", ".join(f"{md_text(k)} = {md_text(v)}" for k, v in sorted(hp.items())) or "none")
                         + (f" ({n} runs)" if len(seen) > 1 else f" in all {n} runs"))
        where = study.selected_in.get(o)
        part = f"{md_code(o)} " + ("; ".join(shown) if len(seen) == 1 else "NOT the same in every run: "
                                   + "; ".join(shown))
        noted = study.noted_in.get(o)
        part += (f", chosen on validation in {', '.join(md_code(c) for c in sorted(where))} (its records' "
                 "`hparam_selection`)" if where else
                 f", chosen on validation in {', '.join(md_code(c) for c in sorted(noted))} (the other cells' "
                 "protocol note; that cell's records of it are not here)" if noted else
                 ", not selected on validation (the spec's values)")
        parts.append(part)
    return "Hyper-parameters: " + ("; ".join(parts) if parts else "none recorded") + "."


def _shown(value: Any) -> str:
    """A value of a cell's protocol note (record text) as the Cells table shows it: a number, or a list of numbers,
    as Python writes it; anything else escaped (:func:`md_text`: a ``|`` or a tag in a note never breaks the
    table or reaches a page as markup)."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if number(value) or (isinstance(value, list) and all(number(v) for v in value)):
        return str(value)
    return md_text(value)


def _cells_text(study: StudyRuns, arm: str, k: int) -> str:
    parts = []
    for name in sorted(study.cells.get(arm, {}).get(k, {}), key=lambda n: int(CELL_NAME.fullmatch(n)["draw"])):
        info = study.cells[arm][k][name]
        draw = CELL_NAME.fullmatch(name)["draw"]
        if arm == "views":
            views = info.get("views", [])
            shown = ", ".join(_shown(v) for v in views) if isinstance(views, list) else _shown(views)
            parts.append(f"d{draw}: {{{shown}}} of {_shown(info.get('permutation', '?'))}")
        else:
            vc = info.get("view_copies", {})
            vc = vc if isinstance(vc, dict) else {}
            parts.append(f"d{draw}: base {_shown(vc.get('base'))}, noise {_shown(vc.get('noise'))}, mask "
                         f"{_shown(vc.get('mask'))}, seed {_shown(vc.get('seed'))}")
    return "; ".join(parts) or "—"


def _summary(study: StudyRuns, pretrained: list[str], metric: str) -> list[str]:
    """Sentences whose every number is computed from the runs (of ``metric``, the board's primary)."""
    out = []
    ks = study.ks()
    for arm in study.arms():
        arm_ks = [k for k in ks if k in study.values[arm]]
        if not arm_ks:
            continue
        lo, hi = arm_ks[0], arm_ks[-1]
        refs = []
        for r in PAIRED_WITH:
            a, b = pairs(study, arm, lo, r, None, metric), pairs(study, arm, hi, r, None, metric)
            if a and b:
                refs.append(f"`{r}` {100 * mean_std(a)[0]:.2f} -> {100 * mean_std(b)[0]:.2f}")
        line = f"- **{arm}** arm, k = {lo} -> {hi}: " + ", ".join(refs) if refs else f"- **{arm}** arm"
        for r in PAIRED_WITH:
            # the rows with gaps at both ends: a row missing at one end would change the mean by its absence
            gaps = {k: {o: pairs(study, arm, k, o, r, metric) for o in pretrained} for k in (lo, hi)}
            both = [o for o in pretrained if gaps[lo][o] and gaps[hi][o]]
            means = {k: [mean_std(gaps[k][o])[0] for o in both] for k in (lo, hi)}
            if both:
                line += (f"; pretrained - `{r}` (mean over the {len(both)} pretrained rows) "
                         f"{_pts(sum(means[lo]) / len(both))} -> {_pts(sum(means[hi]) / len(both))} points")
        wins = [(o, k) for o in pretrained for k in arm_ks if (g := pairs(study, arm, k, o, RAW, metric))
                and mean_std(g)[0] > 0]
        total = sum(1 for o in pretrained for k in arm_ks if pairs(study, arm, k, o, RAW, metric))
        line += f"; a pretrained row beats `{RAW}` on average in {len(wins)} of {total} (objective, k) entries."
        out.append(line)
    return out


def render(runs: str | Path, board: str | Path, benchmark: str = "mv-handwritten") -> tuple[Path, Path]:
    """Write ``<board>/<benchmark>-kviews.md`` and ``-kviews.png`` from the study's run records, together or not
    at all (:func:`fusebench.io.atomic_write_together`): both are rendered to temporary files beside them first,
    so a render interrupted or failing (Ctrl-C while the plot is drawn) leaves the pair that was there as it was
    and never a new markdown without its plot. The temporary files a killed render left (older than
    :data:`fusebench.leaderboard.writer.STALE_TEMP_S`, as the boards' writer removes them) are removed first."""
    from fusebench.io import atomic_write_together, remove_stale_temps
    from fusebench.leaderboard.writer import STALE_TEMP_S
    from fusebench.registry import ID_RULE, valid_id

    if not valid_id(benchmark):  # it names the files written under ``board``
        raise ValueError(f"kviews: benchmark {benchmark!r} is not an id ({ID_RULE})")
    study = collect(Path(runs), benchmark)
    board = Path(board)
    board.mkdir(parents=True, exist_ok=True)
    order = study.objectives()
    metrics = study.metrics()
    pretrained = [o for o in order if o not in PAIRED_WITH]
    ks, arms = study.ks(), study.arms()
    head = "| objective | arm | " + " | ".join(f"k = {k}" for k in ks) + " |"
    rule = "|---|---|" + "---|" * len(ks)
    md = [f"# k-views study: {benchmark}", "",
          "Does a multi-view objective gain from more views beyond what the views themselves add? Two arms, the "
          "same rows, seeds and k: **views** (the first k views of seeded random view orders, nested in k) and "
          "**copies** (k augmented copies of the same base view, the information-fixed control of the poly-view "
          "claim). The quantity is the paired gap of each pretrained row to the random-init `none` row and to the "
          "`raw` row (the standardised input views concatenated), in points, mean ± std over seeds x cells (n); "
          "design and reasons: docs/kviews.md (`fusebench.studies.kviews`).", "",
          f"Read from {study.records} run records: seeds {study.seeds()}; k = {', '.join(map(str, ks))}; "
          f"{_budget_text(study)}.", "", _hparams_text(study, [o for o in study.objectives()
                                                               if o not in PAIRED_WITH]), "",
          "The probes read the views' embeddings side by side, so their input width grows with k ("
          + (f"{' or '.join(map(str, sorted(study.widths)))} features per view" if study.widths
             else "the encoder's features per view") + " for the encoder rows, the input views' own widths for "
          "`raw`): a value that rises with k mixes "
          "what the views add with the probe's capacity. A pretrained row and `none` have the same width at every "
          "k, so the gap pretrained - `none` is free of it; the values and the gaps to `raw` are not.", "",
          *([] if metrics[0][0] == PRIMARY else [
              f"These records hold no `{PRIMARY}`: they were made under the study's first protocol (before issue "
              f"#30: the full linear probe and k-means only, a test split drawn per seed); `fusebench study kviews` "
              f"runs the study under the current one (the boards' 1-shot probes, one fixed outer test split).", ""]),
          f"## Summary ({metrics[0][1]}, computed from the runs)", "", *_summary(study, pretrained, metrics[0][0]),
          ""]
    png = board / f"{benchmark}-kviews.png"
    for m, label in metrics:
        for r in PAIRED_WITH:
            md += [f"## {label}: pretrained - `{r}` (points)", "", head, rule]
            rows = pretrained + ([BASELINE] if r == RAW and BASELINE in order else [])
            for o in rows:
                for arm in arms:
                    md.append(f"| `{o}` | {arm} | " + " | ".join(_fmt(pairs(study, arm, k, o, r, m), True)
                                                                 for k in ks) + " |")
            md.append("")
    for m, label in metrics:
        md += [f"## {label} (%)", "", head, rule]
        for o in order:
            for arm in arms:
                md.append(f"| `{o}` | {arm} | " + " | ".join(_fmt(pairs(study, arm, k, o, None, m), False)
                                                             for k in ks) + " |")
        md.append("")
    md += ["## Cells", "", "Arm views: d<j>: the view set {...} = the first k of draw j's permutation [...], sorted "
           "(a draw whose set repeats an earlier draw's at that k is not run again); arm copies: the "
           "`view_copies` option of draw j.", "", "| arm | k | cells |", "|---|---|---|"]
    for arm in arms:
        for k in ks:
            if k in study.values[arm]:
                md.append(f"| {arm} | {k} | {_cells_text(study, arm, k)} |")
    md += ["", f"![k-views study: gaps vs k]({png.name})", ""]
    mdp = board / f"{benchmark}-kviews.md"
    text = "\n".join(md).encode("utf-8")
    for path in (png, mdp):  # what a render killed mid-write left: never kept forever
        remove_stale_temps(path, older_than=STALE_TEMP_S)
    # the markdown, which links the plot, is renamed into place last
    atomic_write_together([(png, lambda f: _plot(study, pretrained, ks, f, benchmark)),
                           (mdp, lambda f: f.write(text))])
    return mdp, png


def _plot(study: StudyRuns, pretrained: list[str], ks: list[int], out: IO[bytes], benchmark: str) -> None:
    """The PNG written to ``out`` (:func:`render` hands it a temporary file). Rows: metrics; columns: (arm,
    reference); one line per pretrained objective (error bars: std over the pairs), the `none` row's gap to `raw`
    dashed in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fusebench.leaderboard.plots import tight_layout_once

    panels = [(arm, r) for arm in study.arms() for r in PAIRED_WITH]
    metrics = study.metrics()
    fig, axes = plt.subplots(len(metrics), len(panels), figsize=(4.2 * len(panels), 3.6 * len(metrics)),
                             squeeze=False, sharey="row")
    colors = plt.get_cmap("tab10")
    for i, (m, label) in enumerate(metrics):
        for j, (arm, r) in enumerate(panels):
            ax = axes[i][j]
            rows = pretrained + ([BASELINE] if r == RAW else [])
            for n, o in enumerate(rows):
                gaps = {k: g for k in ks if (g := pairs(study, arm, k, o, r, m))}
                if not gaps:
                    continue
                xs, stats = list(gaps), [mean_std(g) for g in gaps.values()]
                ax.errorbar([x + 0.04 * (n - len(rows) / 2) for x in xs], [100 * s[0] for s in stats],
                            yerr=[100 * s[1] for s in stats], marker="o", capsize=2, label=o,
                            color="grey" if o == BASELINE else colors(n), linestyle="--" if o == BASELINE else "-")
            ax.axhline(0, color="black", linewidth=0.8)
            ax.set_xticks(ks)
            ax.set_xlabel("number of views k")
            ax.set_title(f"{arm}: pretrained - {r}", fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{label}\ngap (points)", fontsize=9)
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"{benchmark}: k-views study (mean ± std over seeds x cells)", fontsize=11)
    tight_layout_once(fig)
    try:
        fig.savefig(out, format="png", dpi=100, metadata={"Software": None})
    finally:
        plt.close(fig)


__all__ = ["StudyRuns", "collect", "pairs", "render"]
