"""Hyper-parameter grids (bottom layer, no torch): :func:`points`, a grid's points in the one order every
selection runs and records them, and :func:`at_edge`, the one rule for "the chosen value lies on an edge of its
grid", used where a selection is made (:mod:`fusebench.sweep.selection`) and where a board reads one back from
records written without it (:mod:`fusebench.leaderboard.sensitivity`)."""

from __future__ import annotations

import itertools
from typing import Any, Mapping


def points(grid: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Every point of ``grid`` (``{name: values}``), in grid order: names sorted, the last varying fastest;
    ``[{}]`` for an empty grid.

    >>> points({"tau": [0.1, 0.2], "m": ["a"]})
    [{'m': 'a', 'tau': 0.1}, {'m': 'a', 'tau': 0.2}]
    """
    names = sorted(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]


def at_edge(grid: Mapping[str, list[Any]], choice: Mapping[str, Any]) -> list[str]:
    """The grid keys (sorted) whose chosen value is the smallest or the largest of a numeric grid of at least
    two distinct values: the optimum may lie outside the grid, which the board says. Non-numeric grids (a
    boolean is not a number here) have no edge, nor has a key the choice does not name.

    >>> at_edge({"tau": [0.05, 0.1, 0.2], "m": ["a", "b"]}, {"tau": 0.05, "m": "a"})
    ['tau']
    """
    out = []
    for name, values in grid.items():
        nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(set(nums)) < 2 or len(nums) != len(values) or name not in choice:
            continue
        if choice[name] in (min(nums), max(nums)):
            out.append(name)
    return sorted(out)


__all__ = ["at_edge", "points"]
