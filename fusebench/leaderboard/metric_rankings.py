"""The cross-dataset ranking under each metric of the boards (the index's "Under each metric" section).

The index ranks the objectives over the real-data boards by each board's primary metric
(:func:`fusebench.leaderboard.index.cross_dataset_ranking`). Whether that ranking is decided by the objectives
or by the choice of metric is a question the index answers beside it: :func:`metric_rankings` computes the same
ranking (average ranks, Friedman test; the same merges of rows computing one loss) with every other metric the
boards report in place of the primary one, over the boards that report it (a board's per-metric means are in its
metadata comment, ``metric_means``: :func:`fusebench.leaderboard.meta.board_meta`), and Kendall's tau-b between
each such ranking's average ranks and the primary ranking's (``scipy.stats.kendalltau``; 1: the same order).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from fusebench.leaderboard.columns import fmt_p, md_code


def metric_rankings(boards: dict[str, dict[str, Any]], ranking: dict[str, Any],
                    rank: Callable[[dict[str, dict[str, Any]]], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{metric: ranking}`` for each metric of the boards ``ranking`` ranks other than the one every board ranks
    by, in the order of their ids (numbers as numbers): the
    ranking ``rank`` makes (:func:`~fusebench.leaderboard.index.cross_dataset_ranking`, which the index passes) of
    those boards with that metric as each board's primary metric, over the boards that report it (``missing``: the
    others), with ``tau`` / ``tau_p``: Kendall's tau-b between its average ranks and ``ranking``'s over the
    objectives both rank (None with fewer than 3). Empty when ``ranking`` ranks nothing."""
    used = ranking.get("boards", [])
    if "friedman" not in ranking:
        return {}
    primaries = set(ranking["primary"].values())
    metrics = sorted({m for n in used for m in boards[n]["groups"][0].get("metric_means", {}) if primaries != {m}},
                     key=_natural)
    out: dict[str, dict[str, Any]] = {}
    for m in metrics:
        sub = {}
        for n in used:
            g = boards[n]["groups"][0]
            entry = g.get("metric_means", {}).get(m)
            if entry and entry["means"]:
                sub[n] = {**boards[n], "groups": [{**g, "primary": m, "direction": entry["direction"],
                                                   "means": entry["means"]}]}
        r = rank(sub)
        r["missing"] = [n for n in used if n not in sub]
        r["tau"] = r["tau_p"] = None
        both = [o for o in ranking["methods"] if o in r.get("avg", {})]
        if len(both) >= 3:
            from scipy.stats import kendalltau

            res = kendalltau([ranking["avg"][o] for o in both], [r["avg"][o] for o in both])
            r["tau"], r["tau_p"] = float(res.statistic), float(res.pvalue)
        out[m] = r
    return out


def _natural(metric: str) -> list[Any]:
    """Sort key of a metric id with its numbers compared as numbers (``fs5_acc`` before ``fs10_acc``)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", metric)]


def metric_rankings_section(ranking: dict[str, Any], by_metric: dict[str, dict[str, Any]],
                            label: Any, ordered: list[str]) -> list[str]:
    """The index's "Under each metric" section: one column per metric of ``by_metric`` (average rank and place of
    each objective of ``ranking``, rows in ``ordered``, labelled by ``label(objective)``), then per column the
    boards, Friedman's p-value and Kendall's tau-b with the primary ranking."""
    if not by_metric:
        return []
    primaries = sorted(set(ranking["primary"].values()))
    metrics = [m for m, r in by_metric.items() if "friedman" in r]
    out = ["", "### Under each metric", "",
           f"The same ranking with each other metric of the boards in place of the primary metric "
           f"({', '.join(md_code(p) for p in primaries)}), over the boards that report it: the objective's average "
           f"rank and, in brackets, its place (1 = best). Where the order changes from column to column, the choice "
           f"of metric decides it as much as the objectives do: the primary ranking answers the question of its "
           f"metric only. Last rows: the boards ranked, Friedman's p-value, and Kendall's tau-b between the column's "
           f"average ranks and the primary ranking's (1 = the same order)."]
    unranked = {m: r.get("problem", "") for m, r in by_metric.items() if "friedman" not in r}
    if unranked:
        out += ["", "Not ranked: " + "; ".join(f"{md_code(m)} (it {why})" for m, why in unranked.items()) + "."]
    if not metrics:
        return out
    head = ["objective", "primary"] + [md_code(m) for m in metrics]
    out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for o in ordered:
        cells = [label(o), f"{ranking['avg'][o]:.2f} ({ranking['places'][o]['rank']})"]
        for m in metrics:
            r = by_metric[m]
            cells.append(f"{r['avg'][o]:.2f} ({r['places'][o]['rank']})" if o in r["avg"] else "—")
        out.append("| " + " | ".join(cells) + " |")
    n = len(ranking["boards"])
    out.append("| boards | " + " | ".join([str(n)] + [
        str(len(by_metric[m]["boards"])) + (f" (not {', '.join(f'[{b}]({b}.md)' for b in by_metric[m]['missing'])})"
                                            if by_metric[m]["missing"] else "") for m in metrics]) + " |")
    out.append("| Friedman p | " + " | ".join([fmt_p(ranking["friedman"].pvalue)] + [
        fmt_p(by_metric[m]["friedman"].pvalue) for m in metrics]) + " |")
    out.append("| tau-b with primary | 1 | " + " | ".join(
        "—" if by_metric[m]["tau"] is None else f"{by_metric[m]['tau']:.2f}" for m in metrics) + " |")
    return out


__all__ = ["metric_rankings", "metric_rankings_section"]
