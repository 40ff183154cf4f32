"""The plots of the boards, drawn with matplotlib (imported only to draw): the training curves of a
comparability group (:func:`plot_curves`: pretraining loss and validation primary metric per
objective, mean over seeds with a ± 1 std band) and the index's critical-difference diagram
(:func:`cd_diagram`, Demšar 2006). Both PNGs are deterministic and carry a hash of their inputs in a
text chunk (:data:`PLOT_KEY`, read back by :func:`png_text` with Pillow), so an unchanged plot is
never redrawn."""

from __future__ import annotations

import contextvars
import io
import math
import os
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from fusebench.io import atomic_write, canonical_json, sha256_hex
from fusebench.leaderboard.columns import mean_std, natural_key
from fusebench.leaderboard.groups import GroupView

PLOT_VERSION = 1  # bump when plot_curves draws differently: every plot is redrawn once
PLOT_KEY = "fusebench-inputs"  # PNG text chunk holding the hash of what a plot was drawn from
#: the largest magnitude a plot draws: past about 1e308 matplotlib cannot lay out an axis (its tick arithmetic
#: overflows: "arange: cannot compute length"), so a value beyond this bound is left out as a non-finite one is
DRAWABLE = 1e300


def drawable(x: float) -> bool:
    """Whether a plot draws ``x``: finite and of magnitude at most :data:`DRAWABLE`."""
    return abs(x) <= DRAWABLE  # False for NaN and the infinities


#: the PNGs drawn while :func:`staged_pngs` is active: path -> bytes, written by its caller once every file of a
#: regeneration is rendered (None: each PNG is written as it is drawn)
_STAGED: contextvars.ContextVar[dict[Path, bytes] | None] = contextvars.ContextVar("fusebench_staged_pngs",
                                                                                   default=None)


@contextmanager
def staged_pngs() -> Iterator[dict[Path, bytes]]:
    """Within this block every plot of the boards (:func:`save_png`) is drawn into memory instead of its file; the
    mapping it yields (path -> PNG bytes) is what the caller writes once everything else is rendered too, so a
    plot that fails to draw leaves no folder of part new, part old files (:mod:`fusebench.leaderboard.writer`)."""
    staged: dict[Path, bytes] = {}
    token = _STAGED.set(staged)
    try:
        yield staged
    finally:
        _STAGED.reset(token)


def tight_layout_once(fig: Any, **kwargs: Any) -> None:
    """``fig.tight_layout(**kwargs)``, then no layout engine on ``fig``: :func:`save_png` draws it once, at this
    layout. ``tight_layout`` leaves a placeholder engine behind, and ``savefig`` of a figure with any engine first
    draws it in full without rendering (to lay it out again) and then draws it to the PNG: every board plot was drawn
    twice. The placeholder's layout does nothing, so the PNG is the same, byte for byte (the committed plots redrawn:
    ``tests/test_leaderboard_regen.py``). The rc settings that would give a figure a layout engine by default are off
    while the engine is removed."""
    import matplotlib

    fig.tight_layout(**kwargs)
    with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)


def save_png(path: str | os.PathLike, fig: Any, metadata: Mapping[str, Any]) -> Path:
    """``fig`` as a PNG (with the text chunks ``metadata``, matplotlib's ``Software`` stamp left out) at ``path``:
    written atomically, or held in memory for the caller of :func:`staged_pngs` when that is active."""
    meta = {"Software": None, **dict(metadata)}
    staged = _STAGED.get()
    if staged is None:  # a temporary name of its own (two regenerations into one folder draw the same plot at once)
        return atomic_write(path, lambda f: fig.savefig(f, format="png", metadata=meta))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata=meta)
    staged[Path(path)] = buf.getvalue()
    return Path(path)


def _mean_band(series: list[list[float]]) -> tuple[list[float], list[float], list[float]]:
    """Per step (up to the shortest curve): mean of the drawable values over seeds (:func:`drawable`: NaN, the
    infinities and values beyond :data:`DRAWABLE` left out), and mean ∓ 1 sample std."""
    n = min(len(c) for c in series)
    mean, lo, hi = [], [], []
    for i in range(n):
        xs = [c[i] for c in series if drawable(c[i])]
        m, s = mean_std(xs) if xs else (math.nan, 0.0)  # values near the float limit: scaled, no overflow
        mean.append(m)
        lo.append(m - s)
        hi.append(m + s)
    return mean, lo, hi


def _curve_series(view: GroupView) -> tuple[dict[str, dict[str, list[list[float]]]], dict[str, list[list[float]]]]:
    """(objective -> loss key -> per-seed curves, objective -> per-seed validation primary-metric curves)."""
    val_key = f"val_{view.primary}" if view.primary else ""
    loss: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    val: dict[str, list[list[float]]] = defaultdict(list)
    for r in view.recs:
        for key in sorted(r.curves):
            if (key == "pretrain_loss" or key.startswith("loss_M")) and r.curves[key]:
                loss[r.objective][key].append(r.curves[key])
        if val_key and r.curves.get(val_key):
            val[r.objective].append(r.curves[val_key])
    return loss, val


def has_curves(view: GroupView) -> bool:
    """Whether the group has a curve to plot (pretraining loss or validation primary metric)."""
    loss, val = _curve_series(view)
    return bool(loss or val)


def png_text(path: Path) -> dict[str, str]:
    """The text chunks of a PNG file that come before its image data, where Pillow (and so matplotlib)
    writes them, as ``{keyword: text}``; read with Pillow without decoding a pixel. {} for a missing
    file or one that is not a readable PNG."""
    from PIL import Image

    try:
        with Image.open(path, formats=["PNG"]) as im:
            # ``info`` holds the text chunks read before the image data (``text`` would decode the image to
            # look for more after it) beside other entries (dpi, gamma, ...), none of which is a string
            return {k: v for k, v in im.info.items() if isinstance(k, str) and isinstance(v, str)}
    except (OSError, SyntaxError, ValueError):
        return {}


def plot_key(view: GroupView, loss: dict, val: dict) -> str:
    """A hash of everything a board's plot is drawn from (curves, seeds, metric, unit, plot version):
    an unchanged key means the PNG on disk is already the plot of these runs."""
    seeds = {o: sorted({r.seed for r in view.recs if r.objective == o}) for o in view.objectives}
    unit = view.info(view.primary).unit if view.primary else "raw"
    return sha256_hex(canonical_json({"v": PLOT_VERSION, "name": view.name, "primary": view.primary, "unit": unit,
                                      "objectives": list(view.objectives), "seeds": seeds, "loss": loss, "val": val},
                                     compact=False))


def plot_curves(view: GroupView, path: Path) -> bool:
    """Per objective: the pretraining loss per step and the validation primary metric per downstream
    epoch, mean over seeds with a ± 1 std band. Returns False (and writes nothing) without curves.
    The PNG carries a hash of its inputs (:func:`plot_key`); when the file on disk already has the
    same hash it is left untouched (no redraw: regenerating unchanged boards costs no plotting)."""
    loss, val = _curve_series(view)
    objectives = [o for o in view.objectives if o in loss or o in val]
    if not objectives:
        return False
    inputs_key = plot_key(view, loss, val)
    if png_text(path).get(PLOT_KEY) == inputs_key:
        return True
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_val = bool(val)
    unit = view.info(view.primary).unit if view.primary else "raw"
    scale = 100.0 if unit == "fraction" else 1.0
    per_row = 2 if has_val else 3  # objectives per figure row
    ncols = per_row * (2 if has_val else 1)
    nrows = -(-len(objectives) // per_row)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.1 * ncols, 2.5 * nrows), dpi=90, squeeze=False)
    flat = list(axes.flat)
    val_axes = []
    for i, o in enumerate(objectives):
        n_seeds = len({r.seed for r in view.recs if r.objective == o})
        ax = flat[i * (2 if has_val else 1)]
        if loss.get(o):
            for j, (key, series) in enumerate(sorted(loss[o].items(), key=lambda kv: natural_key(kv[0]))):
                mean, lo, hi = _mean_band(series)
                xs = list(range(1, len(mean) + 1))
                label = f"M = {key[len('loss_M'):]}" if key != "pretrain_loss" else None
                ax.plot(xs, mean, color=f"C{j}", linewidth=1.2, label=label)
                ax.fill_between(xs, lo, hi, color=f"C{j}", alpha=0.25, linewidth=0)
            if len(loss[o]) > 1:
                ax.legend(fontsize=6, loc="upper right")
        else:
            ax.text(0.5, 0.5, "no pretraining", ha="center", va="center", fontsize=8, transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
        ax.set_title(f"{o} (n={n_seeds}): pretraining loss", fontsize=8)
        ax.set_xlabel("pretraining step", fontsize=7)
        ax.set_ylabel("loss", fontsize=7)
        ax.tick_params(labelsize=6)
        if has_val:
            vax = flat[i * 2 + 1]
            if val.get(o):
                mean, lo, hi = _mean_band([[scale * x for x in c] for c in val[o]])
                xs = list(range(1, len(mean) + 1))
                vax.plot(xs, mean, color="C1", linewidth=1.2, marker="o", markersize=2)
                vax.fill_between(xs, lo, hi, color="C1", alpha=0.25, linewidth=0)
                val_axes.append((vax, lo, hi))
            else:
                vax.text(0.5, 0.5, "no validation curve", ha="center", va="center", fontsize=8,
                         transform=vax.transAxes)
                vax.set_xticks([])
                vax.set_yticks([])
            vax.set_title(f"{o} (n={n_seeds}): validation {view.primary}", fontsize=8)
            vax.set_xlabel("downstream epoch", fontsize=7)
            vax.set_ylabel(f"{view.primary}{' (%)' if unit == 'fraction' else ''}", fontsize=7)
            vax.tick_params(labelsize=6)
    finite = [x for _, lo, hi in val_axes for x in lo + hi if math.isfinite(x)]
    if finite:  # one y range for every validation panel so objectives compare by eye
        lo_all, hi_all = min(finite), max(finite)
        pad = 0.05 * (hi_all - lo_all) or 0.5
        for vax, _, _ in val_axes:
            vax.set_ylim(lo_all - pad, hi_all + pad)
    for ax in flat[len(objectives) * (2 if has_val else 1):]:
        ax.axis("off")
    what = "pretraining loss" + (f" and validation {view.primary}" if has_val else "")
    fig.suptitle(f"{view.name}: {what}; line = mean over seeds, band = ± 1 std", fontsize=10)
    tight_layout_once(fig)
    try:
        save_png(path, fig, {PLOT_KEY: inputs_key})
    finally:
        plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------
# the critical-difference diagram of the index
# ---------------------------------------------------------------------------------------------
def cd_diagram(avg_ranks: Mapping[str, float], cd: float, path: str | os.PathLike, title: str,
               metadata: Mapping[str, str] | None = None) -> Path:
    """Draw a critical-difference diagram (Demšar 2006, Fig. 1 layout) to the PNG file ``path``.

    A rank axis from 1 (best, left) to k on top; each method hangs from its average rank by a line
    to its label, the better half labelled on the left, the other half on the right; thick bars
    join the groups of :func:`fusebench.leaderboard.stats.cd_groups` (consecutive methods whose ranks
    differ by less than ``cd``: not significantly different); a segment of length ``cd`` above the axis shows the
    critical difference. The file is deterministic: the same inputs give the same bytes (no
    timestamp or software version is written; ``metadata`` adds PNG text chunks). It is written
    through a temporary file in the same folder and renamed into place, with mode
    ``0o666 & ~umask``. Returns ``path``.

    Raises ``ValueError`` for fewer than 2 methods, non-finite ranks, or ``cd`` <= 0."""
    import numpy as np
    from matplotlib.figure import Figure

    from fusebench.leaderboard import stats

    groups = stats.cd_groups(avg_ranks, cd)  # checks avg_ranks and cd
    order = stats.ranked_methods(avg_ranks)
    cd = float(cd)

    k = len(order)
    lo_axis, hi_axis = 1.0, float(max(k, math.ceil(max(r for _, r in order))))
    half = (k + 1) // 2
    left, right = order[:half], order[half:]
    rows = max(len(left), len(right))
    height = 1.55 + 0.28 * rows + 0.12 * len(groups)
    # label space beside the axis from the longest label (8 pt text, ~0.075 in per character)
    label_in = max(1.2, 0.075 * max(len(name) + 8 for name, _ in order) + 0.3)
    axis_in = max(3.5, 0.45 * (hi_axis - lo_axis))
    fig = Figure(figsize=(2 * label_in + axis_in, height), dpi=100)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    # data coordinates: x = rank, y grows downward from the axis at y = 0
    margin = label_in * (hi_axis - lo_axis) / axis_in
    ax.set_xlim(lo_axis - margin, hi_axis + margin)
    top = -1.15
    bottom = 0.45 + 0.12 * len(groups) + 0.28 * rows + 0.25
    ax.set_ylim(bottom, top)
    ax.plot([lo_axis, hi_axis], [0, 0], color="black", linewidth=1.0)
    for tick in range(1, int(hi_axis) + 1):
        ax.plot([tick, tick], [0, -0.08], color="black", linewidth=0.8)
        ax.text(tick, -0.12, str(tick), ha="center", va="bottom", fontsize=8)
    for minor in np.arange(1.5, hi_axis, 1.0):
        ax.plot([minor, minor], [0, -0.04], color="black", linewidth=0.5)
    # the critical difference, above the axis on the left
    ax.plot([lo_axis, lo_axis + cd], [-0.55, -0.55], color="black", linewidth=1.0)
    for x in (lo_axis, lo_axis + cd):
        ax.plot([x, x], [-0.5, -0.6], color="black", linewidth=1.0)
    ax.text(lo_axis + cd / 2, -0.6, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=8)
    # group bars, just below the axis
    for g, members in enumerate(groups):
        ranks = [r for name, r in order if name in members]
        y = 0.2 + 0.12 * g
        ax.plot([min(ranks) - 0.03, max(ranks) + 0.03], [y, y], color="black", linewidth=3.0,
                solid_capstyle="butt")
    first_label = 0.45 + 0.12 * len(groups)
    for i, (name, r) in enumerate(left):
        y = first_label + 0.28 * i
        ax.plot([r, r, lo_axis - 0.15], [0, y, y], color="black", linewidth=0.8)
        ax.text(lo_axis - 0.2, y, f"{name} ({r:.2f})", ha="right", va="center", fontsize=8)
    for i, (name, r) in enumerate(reversed(right)):
        y = first_label + 0.28 * i
        ax.plot([r, r, hi_axis + 0.15], [0, y, y], color="black", linewidth=0.8)
        ax.text(hi_axis + 0.2, y, f"({r:.2f}) {name}", ha="left", va="center", fontsize=8)
    ax.text((lo_axis + hi_axis) / 2, top + 0.02, title, ha="center", va="top", fontsize=9)
    return save_png(path, fig, dict(metadata or {}))
