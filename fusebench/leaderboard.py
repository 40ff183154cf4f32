"""``fusebench leaderboard``: markdown leaderboards generated from run.json files alone.

``write_leaderboards(runs_dir, out_dir)`` reads every ``run.json`` under ``runs_dir`` and writes
``<out_dir>/<benchmark>.md``, a training-curve plot ``<out_dir>/<benchmark>-curves.png`` and the index
``<out_dir>/README.md``. The output is a pure function of the run files: rerunning it gives
byte-identical markdown (records are sorted, numbers formatted at fixed precision, no timestamps).

Table: one row per objective, one column per metric (arrow = direction, from the run's
``metric_directions``), cells ``mean ± std (n)`` over seeds (sample std, ddof = 1; 0 when n = 1),
the best mean in bold, a dash where missing; cost columns (mean pretraining time, mean peak memory);
and a paired test across seeds against the best row on the primary metric: a two-sided paired
t-test (scipy.stats.ttest_rel) over the seeds both rows share, reported as a p-value ('n/a' with
fewer than 2 shared seeds, '—' for the best row itself).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from fusebench.training.utils import atomic_write_text

PERCENT_HINTS = ("acc", "f1", "mf1", "miou", "map", "mar", "bacc", "pixel", "ap_")


def load_runs(runs_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every valid run.json under ``runs_dir``, grouped by benchmark, in a deterministic order."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(Path(runs_dir).rglob("run.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"leaderboard: {path} is not valid JSON ({e})") from None
        if not isinstance(rec, dict) or not {"benchmark", "objective", "seed", "metrics"} <= set(rec):
            raise ValueError(f"leaderboard: {path} lacks benchmark/objective/seed/metrics")
        out[rec["benchmark"]].append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: (r["objective"], r["seed"]))
    return dict(sorted(out.items()))


def _natural(name: str) -> list:
    """Sort key putting 'M2' before 'M10'."""
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _is_percent(metric: str) -> bool:
    m = metric.lower()
    return any(m.startswith(h) or f"_{h}" in m for h in PERCENT_HINTS) and "mae" not in m


def _fmt(metric: str, values: list[float]) -> tuple[str, float]:
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    if _is_percent(metric):
        return f"{100 * mean:.2f} ± {100 * std:.2f} ({n})", mean
    return f"{mean:.4f} ± {std:.4f} ({n})", mean


def _paired_p(a: dict[int, float], b: dict[int, float]) -> str:
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return "n/a"
    x = [a[s] for s in seeds]
    y = [b[s] for s in seeds]
    diffs = [u - v for u, v in zip(x, y)]
    if all(d == diffs[0] for d in diffs):
        return "1.000" if diffs[0] == 0 else "0.000"
    from scipy.stats import ttest_rel

    p = float(ttest_rel(x, y).pvalue)
    return f"{p:.3f}"


def benchmark_table(name: str, recs: list[dict[str, Any]], plot_name: str | None = None) -> str:
    first = recs[0]
    cfg = first.get("config", {})
    metric_order = list(cfg.get("metrics") or [])
    seen = sorted({m for r in recs for m in r["metrics"]}, key=_natural)
    metrics = [m for m in metric_order if m in seen] + [m for m in seen if m not in metric_order]
    directions: dict[str, str] = {}
    for r in recs:
        directions.update(r.get("metric_directions", {}))
    primary = cfg.get("selection_metric") or (metric_order[0] if metric_order else (metrics[0] if metrics else ""))
    if primary not in metrics and metrics:
        primary = metrics[0]
    by_obj: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        by_obj[r["objective"]].append(r)
    objectives = sorted(by_obj)

    def values(obj: str, metric: str) -> dict[int, float]:
        return {r["seed"]: float(r["metrics"][metric]) for r in by_obj[obj]
                if metric in r["metrics"] and r["metrics"][metric] is not None and math.isfinite(float(r["metrics"][metric]))}

    higher = {m: directions.get(m, "higher") != "lower" for m in metrics}
    best: dict[str, str | None] = {}
    for m in metrics:
        means = {o: sum(v.values()) / len(v) for o in objectives if (v := values(o, m))}
        best[m] = None
        if means and len(set(means.values())) > 1:  # no bold where every row ties
            target = max(means.values()) if higher[m] else min(means.values())
            best[m] = sorted(o for o in means if means[o] == target)[0]
    arrows = {m: "↑" if higher[m] else "↓" for m in metrics}
    header = ["objective"] + [f"{m} {arrows[m]}" for m in metrics] + ["pretrain time (s) ↓", "peak memory (MiB) ↓",
                                                                     f"p vs best ({primary})"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for o in objectives:
        row = [f"`{o}`"]
        for m in metrics:
            v = values(o, m)
            if not v:
                row.append("—")
                continue
            text, _ = _fmt(m, list(v.values()))
            row.append(f"**{text}**" if best[m] == o else text)
        times = [float(r.get("pretrain_time_s", 0.0)) for r in by_obj[o]]
        mems = [float(r.get("peak_memory_mb", 0.0)) for r in by_obj[o]]
        row.append(f"{sum(times) / len(times):.1f}")
        row.append(f"{sum(mems) / len(mems):.0f}")
        if primary and best.get(primary):
            row.append("—" if o == best[primary] else _paired_p(values(o, primary), values(best[primary], primary)))  # type: ignore[arg-type]
        else:
            row.append("n/a")
        lines.append("| " + " | ".join(row) + " |")
    synthetic = sorted({bool(r.get("dataset", {}).get("synthetic", False)) for r in recs})
    data_label = "synthetic" if synthetic == [True] else "real" if synthetic == [False] else "mixed real and synthetic"
    protocol = {}
    for r in recs:
        protocol.update(r.get("protocol") or {})
    selection = first.get("selection", {}).get("rule", "")
    out = [f"# Leaderboard: {name}", ""]
    if cfg.get("description"):
        out += [cfg["description"], ""]
    out += [f"Data: **{data_label}**. Percent metrics shown x100; cells are mean ± std (n seeds).", ""]
    out += lines
    out += ["", "## Protocol", "",
            f"- data: {data_label} (dataset `{first.get('dataset', {}).get('id', '')}`)",
            f"- model selection: {selection}",
            f"- primary metric: `{primary}`; paired test: two-sided paired t-test over shared seeds (scipy.stats.ttest_rel) against the best row",
            "- cost: mean pretraining wall time; peak memory = the process's peak resident set on CPU (in a sweep it "
            "includes earlier cells of the same process) or the CUDA allocator peak on GPU (device in run.json)"]
    for key in sorted(protocol):
        out.append(f"- {key}: {protocol[key]}")
    suites = sorted({str(r.get('suite_version')) for r in recs})
    out.append(f"- runs: {len(recs)} run.json file(s), fusebench {', '.join(suites)}")
    if plot_name:
        out += ["", "## Training curves", "", f"![training curves]({plot_name})"]
    return "\n".join(out) + "\n"


def plot_curves(name: str, recs: list[dict[str, Any]], path: Path) -> bool:
    """Mean (over seeds) pretraining-loss curve per objective; returns False when there is no curve."""
    curves: dict[str, list[list[float]]] = defaultdict(list)
    for r in recs:
        c = r.get("curves", {})
        keys = sorted(k for k in c if k.startswith("pretrain_loss") or k.startswith("loss_M"))
        for key in keys:
            curves[f"{r['objective']} {key}" if key != "pretrain_loss" else r["objective"]].append(c[key])
    if not curves:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [lab for lab in sorted(curves) if min(len(c) for c in curves[lab]) > 0]
    ncols = min(3, len(labels))
    nrows = -(-len(labels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.4 * nrows), dpi=100, squeeze=False)
    for ax, label in zip(axes.flat, labels):  # one panel per objective: loss scales differ by objective
        runs = curves[label]
        n = min(len(c) for c in runs)
        for c in runs:
            ax.plot(range(1, n + 1), c[:n], color="0.8", linewidth=0.6)
        mean = [sum(c[i] for c in runs) / len(runs) for i in range(n)]
        ax.plot(range(1, n + 1), mean, color="C0", linewidth=1.3)
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(labels):]:
        ax.axis("off")
    fig.suptitle(f"{name}: pretraining loss per step (grey: seeds, blue: mean)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, format="png", metadata={"Software": None})
    plt.close(fig)
    tmp.replace(path)
    return True


def write_leaderboards(runs_dir: Path, out_dir: Path, plots: bool = True) -> list[Path]:
    runs = load_runs(Path(runs_dir))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    index = ["# fusebench leaderboards", "",
             "Generated by `fusebench leaderboard` from the run.json files under the runs folder; do not edit by hand.", "",
             "| benchmark | data | objectives | runs | best on primary metric |", "|---|---|---|---|---|"]
    for name, recs in runs.items():
        plot = f"{name}-curves.png"
        has_plot = plots and plot_curves(name, recs, out_dir / plot)
        md = benchmark_table(name, recs, plot if has_plot else None)
        path = out_dir / f"{name}.md"
        atomic_write_text(path, md)
        written.append(path)
        syn = sorted({bool(r.get("dataset", {}).get("synthetic", False)) for r in recs})
        label = "synthetic" if syn == [True] else "real" if syn == [False] else "mixed"
        best = _best_line(recs)
        index.append(f"| [{name}]({name}.md) | {label} | {len({r['objective'] for r in recs})} | {len(recs)} | {best} |")
    atomic_write_text(out_dir / "README.md", "\n".join(index) + "\n")
    written.append(out_dir / "README.md")
    return written


def _best_line(recs: list[dict[str, Any]]) -> str:
    cfg = recs[0].get("config", {})
    metrics = cfg.get("metrics") or sorted({m for r in recs for m in r["metrics"]})
    primary = cfg.get("selection_metric") or (metrics[0] if metrics else None)
    if not primary:
        return "—"
    lower = recs[0].get("metric_directions", {}).get(primary) == "lower"
    by: dict[str, list[float]] = defaultdict(list)
    for r in recs:
        if primary in r["metrics"]:
            by[r["objective"]].append(float(r["metrics"][primary]))
    if not by:
        return "—"
    means = {o: sum(v) / len(v) for o, v in by.items()}
    if len(means) > 1 and len(set(means.values())) == 1:
        return f"all tied ({primary} {_fmt(primary, next(iter(by.values())))[0]})"
    target = min(means.values()) if lower else max(means.values())
    o = sorted(k for k in means if means[k] == target)[0]
    text, _ = _fmt(primary, by[o])
    return f"`{o}` ({primary} {text})"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fusebench leaderboard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="leaderboards/runs", help="folder searched for run.json files")
    p.add_argument("--out", default="leaderboards", help="output folder for the markdown")
    p.add_argument("--no-plots", action="store_true")
    ns = p.parse_args(argv)
    if not Path(ns.runs).is_dir():
        print(f"fusebench leaderboard: runs folder {ns.runs} does not exist")
        return 2
    try:
        for path in write_leaderboards(Path(ns.runs), Path(ns.out), plots=not ns.no_plots):
            print(path)
    except ValueError as e:
        print(f"fusebench leaderboard: {e}")
        return 2
    return 0
