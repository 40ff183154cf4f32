"""The index ``README.md`` of a leaderboards folder (:func:`build_index`): every board in the folder
(from the metadata comments, :mod:`fusebench.leaderboard.meta`) by kind, real data, synthetic
studies, pipeline checks; and the cross-dataset ranking of the objectives over the real-data boards
of the ``embedding_eval`` protocol (:func:`cross_dataset_ranking`: average ranks, Friedman test,
Nemenyi critical difference; Demšar 2006) with its CD diagram (:func:`draw_cd_diagram`), the same ranking
under each other metric of the boards (:mod:`fusebench.leaderboard.metric_rankings`), then within each modality
family of at least three boards (:func:`family_rankings`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fusebench.components.protocols import PROTOCOLS
from fusebench.io import canonical_json, sha256_hex
from fusebench.leaderboard.columns import fmt_p, md_code, md_inline, md_text
from fusebench.leaderboard.plots import PLOT_KEY, cd_diagram, png_text

CD_PLOT = "cd-diagram.png"  # the index's critical-difference diagram
CD_PLOT_VERSION = 1  # bump when the diagram is drawn differently
CD_ALPHA = 0.05
PLACE_RESAMPLES, PLACE_SEED = 10000, 0  # the bootstrap over boards of each objective's place in the ranking


def _seeds_text(seeds: list[Any]) -> str:
    return ", ".join(str(s) for s in seeds)


def cross_dataset_ranking(boards: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Average ranks of the objectives over the real-data boards of the protocols that join it
    (``Protocol.cross_dataset_ranking``: ``embedding_eval``).

    From each board's metadata (first group: the largest when split) of kind ``real`` with such a protocol: the
    per-row means of its primary metric (valid rows, displayed ids). The
    objectives present on every such board are ranked within each (rank 1 = best in the metric's
    direction, ties share the average rank) and the ranks averaged; Friedman's test
    (:func:`fusebench.leaderboard.stats.friedman`) and the Nemenyi critical difference at ``CD_ALPHA``
    (:func:`fusebench.leaderboard.stats.nemenyi_cd`) follow (Demšar 2006). Returns a dict with ``boards``
    (names used), ``skipped`` ({name: why}), ``methods``, ``ranks`` ({method: {board: rank}}),
    ``avg`` ({method: average rank}), ``primary`` ({board: metric}), and when at least 2 boards and
    2 common objectives exist, ``friedman``, ``cd``, ``places`` ({method: {"rank", "low", "high"}}: its place
    by average rank and a bootstrap interval over the boards, :func:`fusebench.leaderboard.ties.
    dataset_rank_intervals`) and ``merged_references`` ({row: reference rows merged into it on some board});
    otherwise ``problem`` says what is missing."""
    used: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for name in sorted(boards):
        groups = boards[name]["groups"]
        g = groups[0] if groups else None
        if g is None or g.get("kind") != "real":
            continue
        if "means" not in g or "protocol" not in g:
            skipped[name] = "board written by an older fusebench without per-row means: regenerate it"
            continue
        protocol = g.get("protocol")  # the runs' text: any JSON value (a list would not even hash)
        if (not isinstance(protocol, str) or protocol not in PROTOCOLS
                or not PROTOCOLS.get(protocol).cross_dataset_ranking):
            continue
        if g.get("variant_of"):  # a re-run of another board's data: counted once, under its base
            skipped[name] = (f"a variant of {md_code(g['variant_of'])}, the same data with a changed setting: compared "
                             f"with it under 'Variants'")
            continue
        if g.get("direction") not in ("higher", "lower"):
            skipped[name] = f"primary metric {md_code(g.get('primary'))} has no known direction"
            continue
        if not isinstance(g.get("means"), dict) or not g["means"]:
            skipped[name] = "no row has a value of the primary metric"
            continue
        used[name] = g
    out: dict[str, Any] = {"boards": list(used), "skipped": skipped, "methods": [], "ranks": {}, "avg": {},
                           "primary": {n: g["primary"] for n, g in used.items()},
                           "other_code": {n: list(g["other_code"]) for n, g in used.items() if g.get("other_code")}}
    means, once = _credited_means(used)
    common = sorted(set.intersection(*(set(m) for m in means.values()))) if used else []
    out["methods"] = common
    out["merged_objectives"] = {o: a for o, a in once.items() if o in common}
    out["credited"] = {m: sorted(n for n, g in used.items() if m not in g["means"]) for m in common
                       if any(m not in g["means"] for g in used.values())}
    if len(used) < 2 or len(common) < 2:
        out["problem"] = (f"needs at least 2 real-data boards of the {_joining()} protocol and 2 objectives "
                          f"run on all of them; here {len(used)} board(s) and {len(common)} common objective(s)")
        return out
    from fusebench.leaderboard import stats

    scores = [[(1.0 if used[n]["direction"] == "higher" else -1.0) * float(means[n][m]) for m in common]
              for n in used]
    ranks = stats.average_ranks(scores, higher_is_better=True)
    out["ranks"] = {m: {n: float(ranks[i, j]) for i, n in enumerate(used)} for j, m in enumerate(common)}
    res = stats.friedman(scores, higher_is_better=True)
    out["avg"] = dict(zip(common, res.avg_ranks))
    out["friedman"] = res
    out["cd"] = stats.nemenyi_cd(len(common), len(used), CD_ALPHA)
    out["q"] = stats.nemenyi_q(len(common), CD_ALPHA)
    from fusebench.leaderboard.ties import dataset_rank_intervals

    out["places"] = dataset_rank_intervals(scores, common, n_boot=PLACE_RESAMPLES, seed=PLACE_SEED)
    merged: dict[str, set[str]] = {}
    for g in used.values():
        for o, aliases in (g.get("merged_references") or {}).items():
            if isinstance(aliases, list):
                merged.setdefault(str(o), set()).update(map(str, aliases))
    out["merged_references"] = {o: sorted(a) for o, a in sorted(merged.items()) if o in common}
    return out


def _joining() -> str:
    """The protocols whose boards join the ranking (``Protocol.cross_dataset_ranking``), as the index names them."""
    return ", ".join(md_code(p) for p in PROTOCOLS.available() if PROTOCOLS.get(p).cross_dataset_ranking)


def _credited_means(used: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, float]], dict[str, list[str]]]:
    """Each board's means with every objective merged into a row there (``merged_objectives``: it computes that
    row's loss on this board, e.g. at k = 2 views) credited with the row's mean, so an objective run on every board
    is ranked on every board; and the objectives merged into the same row on **every** board (the same loss
    everywhere: one row, ``{row: [aliases]}``), which are left out of the means and counted once under their row."""
    means: dict[str, dict[str, float]] = {}
    into: dict[str, dict[str, str]] = {}  # board -> {alias: row}
    for n, g in used.items():
        m = dict(g["means"])
        into[n] = {}
        for row, aliases in (g.get("merged_objectives") or {}).items():
            if row in m and isinstance(aliases, list):
                for a in aliases:
                    if a not in g["means"]:
                        m[a] = m[row]
                        into[n][str(a)] = str(row)
        means[n] = m
    once: dict[str, list[str]] = {}
    for a in sorted(set.intersection(*(set(x) for x in into.values())) if into else set()):
        rows = {into[n][a] for n in used}
        if len(rows) == 1:  # merged into one row on every board: that row again, counted once
            once.setdefault(rows.pop(), []).append(a)
    for aliases in once.values():
        for a in aliases:
            for m in means.values():
                m.pop(a, None)
    return means, once


def _family_label(ranking: dict[str, Any], m: str) -> str:
    merged = [*ranking.get("merged_references", {}).get(m, []), *ranking.get("merged_objectives", {}).get(m, [])]
    return md_code(m) + (f" (≡ {', '.join(md_code(a) for a in merged)})" if merged else "")


def _family_line(ranking: dict[str, Any]) -> str:
    """Which rows the ranking compares: the pretrained objectives and the distinct reference rows, each once."""
    from fusebench.components.rows import is_reference

    methods = ranking["methods"]
    refs = [m for m in methods if is_reference(m)]
    pre = [m for m in methods if not is_reference(m)]
    return (f"Family of the tests: {len(methods)} rows, each counted once: {len(pre)} pretrained objective(s) "
            f"({', '.join(md_code(m) for m in pre) or 'none'}) and {len(refs)} distinct reference row(s) "
            f"({', '.join(_family_label(ranking, m) for m in refs) or 'none'}). Objectives computing the same loss "
            f"and reference rows that are the same features for every probe are one row (`≡`).")


def _ordered(ranking: dict[str, Any]) -> list[str]:
    """The ranked objectives, best average rank first (ties by id)."""
    return sorted(ranking["methods"], key=lambda m: (ranking["avg"][m], m))


def _rank_cells(ranking: dict[str, Any], m: str) -> list[str]:
    """An objective's first cells in a ranking table: its label, average rank and place with its interval."""
    place = ranking["places"][m]
    return [_family_label(ranking, m), f"{ranking['avg'][m]:.2f}", f"{place['rank']} [{place['low']}-{place['high']}]"]


def _iman_davenport(ranking: dict[str, Any]) -> str:
    """Iman and Davenport's F_F of a ranking with its degrees of freedom and p-value."""
    k, n, res = len(ranking["methods"]), len(ranking["boards"]), ranking["friedman"]
    if not math.isfinite(res.iman_davenport):
        return "Iman-Davenport F_F infinite (every board ranks the objectives alike), p = 0"
    return f"Iman-Davenport F_F = {res.iman_davenport:.3f} ({k - 1}, {(k - 1) * (n - 1)} df), p = {fmt_p(res.iman_davenport_p)}"


def _cd_title(ranking: dict[str, Any]) -> str:
    return (f"Average rank over {len(ranking['boards'])} real-data boards (1 = best); "
            f"Nemenyi CD at alpha = {CD_ALPHA} = {ranking['cd']:.2f}")


def _ranking_section(ranking: dict[str, Any], cd_plot: str | None) -> list[str]:
    out = ["## Cross-dataset ranking", ""]
    boards = ranking["boards"]
    skipped = "".join(f" Not included: [{n}]({n}.md) ({why})." for n, why in sorted(ranking["skipped"].items()))
    if "problem" in ranking:
        return out + [f"No cross-dataset ranking: it {ranking['problem']}.{skipped}"]
    k, n = len(ranking["methods"]), len(boards)
    res = ranking["friedman"]
    credited = ranking.get("credited") or {}
    where = "; ".join(f"{md_code(m)} on {', '.join(f'[{b}]({b}.md)' for b in credited[m])}" for m in sorted(credited))
    out += [f"The {k} objectives run on every real-data board of the {_joining()} protocol ({n} boards), ranked "
            f"on each board by the mean over seeds of its primary metric (rank 1 = best; ties share the average "
            f"rank), then averaged over the boards (Demšar 2006, JMLR 7:1-30). Rows flagged invalid are left out. "
            f"An objective merged on a board into a row that computes the same loss there (e.g. at k = 2 views) is "
            f"ranked there with that row's mean, tied with it"
            + (f" ({where})" if where else "")
            + f"; one merged into the same row on every board is that row and counts once, under its displayed "
            f"id.{skipped}", ""]
    other = ranking.get("other_code", {})
    if any(other.get(b) for b in boards):
        out += ["**Boards made by other code than the current one** (their runs' numbers, which a rerun would compute "
                "again; each board says what changed): " + "; ".join(
                    f"[{b}]({b}.md) ({', '.join(md_text(c) for c in other[b])})" for b in boards if other.get(b))
                + ". The ranking mixes them with the others until they are re-run.", ""]
    out += [_family_line(ranking), ""]
    head = ["objective", "average rank", "place [95%]"] + [f"[{b}]({b}.md) ({md_code(ranking['primary'][b])})"
                                                         for b in boards]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in _ordered(ranking):
        out.append("| " + " | ".join(_rank_cells(ranking, m) + [f"{ranking['ranks'][m][b]:.1f}" for b in boards])
                   + " |")
    out += ["", f"Friedman test (tie-corrected chi-square, {k - 1} df): chi2_F = {res.statistic:.3f}, "
                f"p = {fmt_p(res.pvalue)}; {_iman_davenport(ranking)}. Nemenyi critical difference at alpha = {CD_ALPHA}: "
                f"CD = q_alpha sqrt(k (k + 1) / (6 N)) = {ranking['q']:.3f} x sqrt({k} x {k + 1} / (6 x {n})) = "
                f"{ranking['cd']:.2f}; two objectives whose average ranks differ by less than CD are not "
                f"significantly different (joined by a bar in the diagram). With {n} datasets the test has little "
                f"power: read the ranks as a summary, not a verdict. Place [95%]: the objective's place by average "
                f"rank (1 = best; equal averages share the better place) and the 2.5 / 97.5 percentiles of its place "
                f"over {PLACE_RESAMPLES:,} bootstrap resamples of the {n} boards (with replacement, fixed seed)."]
    if cd_plot:
        out += ["", f"![critical difference diagram]({cd_plot})"]
    return out


FAMILY_MIN_BOARDS = 3  # a modality family is ranked on its own from this many boards (issue #31)


def family_rankings(boards: dict[str, dict[str, Any]], ranking: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{family: the cross_dataset_ranking of its boards, or {"boards": [...]}}``: the boards of the overall
    ``ranking`` grouped by the ``family`` of their first group (the modality family of their data:
    :func:`fusebench.leaderboard.groups.spec_family`; boards without one are in no family), each family with at
    least :data:`FAMILY_MIN_BOARDS` boards ranked the same way over its boards alone (:func:`cross_dataset_ranking`),
    a smaller one listed by its boards."""
    by: dict[str, list[str]] = {}
    for name in ranking.get("boards", []):
        fam = boards[name]["groups"][0].get("family")
        if isinstance(fam, str) and fam:
            by.setdefault(fam, []).append(name)
    return {fam: (cross_dataset_ranking({n: boards[n] for n in names}) if len(names) >= FAMILY_MIN_BOARDS
                  else {"boards": names})
            for fam, names in sorted(by.items())}


def _family_sections(families: dict[str, dict[str, Any]]) -> list[str]:
    """The index's rankings within each modality family (below the ranking over all boards)."""
    if not families:
        return []
    out = ["", "### Within each modality family", "",
           f"The same ranking over the boards of one modality family (of their data: the benchmark spec's `family`, "
           f"else its dataset's), for each family with at least {FAMILY_MIN_BOARDS} boards; with so few datasets it "
           f"has even less power than the ranking over all boards."]
    small = {f: r["boards"] for f, r in families.items() if "methods" not in r}
    if small:
        out += ["", f"Not ranked on their own (fewer than {FAMILY_MIN_BOARDS} boards): "
                + "; ".join(f"{md_code(f)} ({', '.join(f'[{b}]({b}.md)' for b in names)})"
                            for f, names in small.items()) + "."]
    for fam, r in families.items():
        if "methods" not in r:
            continue
        boards = r["boards"]
        out += ["", f"#### {md_code(fam)}: {len(boards)} boards ({', '.join(f'[{b}]({b}.md)' for b in boards)})", ""]
        if "problem" in r:
            out.append(f"No ranking: it {r['problem']}.")
            continue
        k, n, res = len(r["methods"]), len(boards), r["friedman"]
        out += ["| objective | average rank | place [95%] |", "|---|---|---|"]
        out += ["| " + " | ".join(_rank_cells(r, m)) + " |" for m in _ordered(r)]
        out += ["", f"{k} objectives on all {n} boards. Friedman chi2_F = {res.statistic:.3f} ({k - 1} df), p = "
                    f"{fmt_p(res.pvalue)}; {_iman_davenport(r)}; Nemenyi CD at alpha = {CD_ALPHA}: {r['cd']:.2f}."]
    return out


def variant_comparisons(boards: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """For each real-data board whose first group names a base board (``variant_of``, a benchmark id) that is
    here too: the rows both rank (valid rows with a mean of the same primary metric), their ranks on each board
    (rank 1 = best, ties share the average rank) and Kendall's tau-b between the two boards' means of the
    pretrained rows (``scipy.stats.kendalltau``; None with fewer than 3 of them): a reference row computes the same
    features on both boards, so it would count as agreement whatever the objectives did. Sorted by variant name."""
    from fusebench.components.rows import is_reference
    from fusebench.leaderboard import stats
    from fusebench.registry import valid_id

    out = []
    for name in sorted(boards):
        groups = boards[name]["groups"]
        g = groups[0] if groups else None
        base = g.get("variant_of") if g else None
        if not valid_id(base) or base not in boards or not boards[base]["groups"]:
            continue
        b = boards[base]["groups"][0]
        if not isinstance(g.get("means"), dict) or not isinstance(b.get("means"), dict) or \
                g.get("primary") != b.get("primary") or g.get("direction") not in ("higher", "lower"):
            continue
        rows = sorted(set(g["means"]) & set(b["means"]))
        entry: dict[str, Any] = {"variant": name, "base": base, "primary": g["primary"], "rows": rows,
                                 "means": {"base": {r: float(b["means"][r]) for r in rows},
                                           "variant": {r: float(g["means"][r]) for r in rows}},
                                 "ranks": {}, "tau": None, "p": None}
        if len(rows) >= 2:
            sign = 1.0 if g["direction"] == "higher" else -1.0
            for which in ("base", "variant"):
                ranks = stats.average_ranks([[sign * entry["means"][which][r] for r in rows]], higher_is_better=True)
                entry["ranks"][which] = {r: float(ranks[0, j]) for j, r in enumerate(rows)}
        pretrained = [r for r in rows if not is_reference(r)]
        entry["pretrained"] = pretrained
        if len(pretrained) >= 3:
            from scipy.stats import kendalltau

            res = kendalltau([entry["means"]["base"][r] for r in pretrained],
                             [entry["means"]["variant"][r] for r in pretrained])
            entry["tau"], entry["p"] = float(res.statistic), float(res.pvalue)
        out.append(entry)
    return out


def _variant_sections(comparisons: list[dict[str, Any]]) -> list[str]:
    """The index's 'Variants' section: each variant board's ranking beside its base board's."""
    if not comparisons:
        return []
    from fusebench.leaderboard.columns import fmt_value, metric_info

    out = ["", "### Variants", "",
           "Boards that re-run another board's data with one setting changed (the spec's `variant_of`; what changed "
           "is in the variant's protocol notes), each beside its base board: the rows both rank, their means of the "
           "primary metric and their ranks on each (rank 1 = best; ties share the average rank), and Kendall's "
           "tau-b between the two boards' means of the pretrained rows (1: the same order). A variant is not in the "
           "rankings above."]
    for c in comparisons:
        v, b, primary = c["variant"], c["base"], c["primary"]
        unit = metric_info(primary, []).unit
        out += ["", f"#### [{v}]({v}.md) against [{b}]({b}.md) ({md_code(primary)}{' (%)' if unit == 'fraction' else ''})",
                ""]
        if not c["ranks"]:
            out.append("Fewer than 2 rows on both boards: nothing to compare.")
            continue
        out += [f"| row | {md_code(b)} | rank | {md_code(v)} | rank | change |", "|---|---|---|---|---|---|"]
        order = sorted(c["rows"], key=lambda r: (c["ranks"]["variant"][r], r))
        for r in order:
            rb, rv = c["ranks"]["base"][r], c["ranks"]["variant"][r]
            out.append(f"| {md_code(r)} | {fmt_value(unit, c['means']['base'][r])} | {rb:g} | "
                       f"{fmt_value(unit, c['means']['variant'][r])} | {rv:g} | {rb - rv:+g} |")
        tau = ("Kendall's tau-b between the two boards' means: not computed (fewer than 3 pretrained rows)"
               if c["tau"] is None else
               f"Kendall's tau-b between the two boards' means over the {len(c['pretrained'])} pretrained rows (the "
               f"reference rows compute the same features on both): {c['tau']:.3f} (p = {fmt_p(c['p'])})")
        out += ["", f"{tau}; change: the row's rank on {md_code(b)} minus its rank on {md_code(v)} (positive: a "
                    f"better place on the variant)."]
    return out


def build_index(boards: dict[str, dict[str, Any]], cd_plot: str | None = None,
                ranking: dict[str, Any] | None = None) -> str:
    """The index markdown from ``{benchmark: board metadata}``: real data, the cross-dataset ranking of
    the real-data boards (``cd_plot``: the CD diagram's file name to link, None for none), synthetic
    studies, then the pipeline checks (which rank nothing). ``ranking`` is
    :func:`cross_dataset_ranking` of ``boards`` (computed when not given)."""
    rows: dict[str, list[str]] = {"real": [], "study": [], "pipeline_check": []}
    for name in sorted(boards):
        for g in boards[name]["groups"]:
            # name: a benchmark id (checked by read_board_meta); the title and the best line are text of a board
            # file found in the folder: escaped, so no file can put markup into the index or break its table
            link = f"[{name}]({name}.md)" + (f" ({md_text(g['title'])})" if g.get("title") else "")
            seeds = _seeds_text(g.get("seeds", []))
            if g["kind"] == "pipeline_check":
                data = "synthetic" if g.get("synthetic", True) else "real"
                rows["pipeline_check"].append(
                    f"- {link}: dataset {md_code(g.get('dataset'))} ({data}), {g.get('objectives')} objectives, "
                    f"seeds {seeds} ({g.get('runs')} runs)")
            else:
                rows[g["kind"]].append(f"| {link} | {md_code(g.get('dataset'))} | {g.get('objectives')} | {seeds} | "
                                       f"{g.get('runs')} | {md_inline(g.get('best')) or '—'} |")
    if ranking is None:
        ranking = cross_dataset_ranking(boards)
    head = "| benchmark | dataset | objectives | seeds | runs | best on primary metric |\n|---|---|---|---|---|---|"
    out = ["# fusebench leaderboards", "",
           "Generated by `fusebench leaderboard` from run.json files; do not edit by hand. This index lists every "
           "board in this folder (each board ends with a metadata comment), so regenerating boards from a runs "
           "folder holding only some benchmarks keeps the others. Format and rules: docs/leaderboards.md.", "",
           "## Real data", "",
           "Runs on real data files (each run record carries the dataset's manifest hash or a fingerprint of the "
           "files read); rows rank the objectives on that data. Reference rows: `none` = random-init encoders, "
           "`raw` = the standardised input views, `raw_*` = other features of the input views (per-view L2, "
           "tf-idf, view-balanced, PCA; docs/benchmarks.md); when one of them is best, the best pretrained "
           "objective follows.", ""]
    out += [head] + rows["real"] if rows["real"] else ["No real-data runs yet."]
    out += [""] + _ranking_section(ranking, cd_plot)
    if "friedman" in ranking:
        from fusebench.leaderboard.metric_rankings import metric_rankings, metric_rankings_section

        out += metric_rankings_section(ranking, metric_rankings(boards, ranking, cross_dataset_ranking),
                                       lambda m: _family_label(ranking, m), _ordered(ranking))
        out += _family_sections(family_rankings(boards, ranking))
    out += _variant_sections(variant_comparisons(boards))
    out += ["", "## Synthetic studies", "",
            "Reproducible studies on data that is synthetic by design; rankings hold for that data only.", ""]
    out += [head] + rows["study"] if rows["study"] else ["None."]
    out += ["", "## Pipeline checks", "",
            "Tiny smoke runs, mostly synthetic twins of the real-data benchmarks. They check the pipeline end to "
            "end and **rank nothing**: no best row, no tests.", ""]
    out += rows["pipeline_check"] if rows["pipeline_check"] else ["None."]
    return "\n".join(out) + "\n"


def draw_cd_diagram(ranking: dict[str, Any], path: Path) -> bool:
    """Draw the index's CD diagram of ``ranking`` to ``path`` unless the PNG there was already drawn
    from the same inputs (its ``fusebench-inputs`` text chunk holds their hash). Returns False (and
    draws nothing) when there is no ranking."""
    if "cd" not in ranking:
        return False
    title = _cd_title(ranking)
    key = sha256_hex(canonical_json({"v": CD_PLOT_VERSION, "avg": ranking["avg"], "cd": ranking["cd"], "title": title},
                                    compact=False, default=None))
    if png_text(path).get(PLOT_KEY) == key:
        return True
    cd_diagram(ranking["avg"], ranking["cd"], path, title, metadata={PLOT_KEY: key})
    return True
