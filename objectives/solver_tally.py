"""The convergence tally of an objective's iterative solver: how many of its calls stopped at ``max_iter``.

M3G and the 2-view matching gap solve an entropic optimal-transport problem by Sinkhorn iterations in every call
(:mod:`fusebench.objectives.sinkhorn`); a solve stops when the marginal error falls below ``tol`` or after
``max_iter`` sweeps. A solve stopped by ``max_iter`` gives an approximate gap and gradient (the step still trains,
as the authors' ott-jax solver does on ``converged = False``), and is warned in the run's log. The tally counts
them, so a record can say how many of a cell's solves did not converge and how far from the marginals the worst
one stopped, instead of leaving it to the log.

An objective with such a solver holds a :class:`SolverTally` as ``solver_tally`` and adds every call's ``stats``
(:meth:`SolverTally.add`: its ``converged`` and ``marginal_error`` entries, floats the solver's stopping test has
read already, so counting reads nothing from the device). The pretraining cell takes the tally at each epoch's end
(:meth:`SolverTally.take`) into the run's per-epoch curves ``solver_calls``, ``solver_not_converged`` and
``solver_worst_marginal_error``, and saves the epoch's running tally with every checkpoint
(:meth:`SolverTally.state_dict`), so a resumed cell counts what an uninterrupted one counts. Leaderboards sum the
curves per row (:func:`fusebench.leaderboard.table.solver_counts`); a hyper-parameter selection sums its trials'
curves per grid point (:func:`summed`, :func:`merged`; the ``solver`` entry of a score in ``hparam_selection``), and
the board's sensitivity section says which grid points' trials did not converge.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

#: the per-epoch curves of a pretraining run that hold the tally (:meth:`SolverTally.take`'s keys)
CURVES = ("solver_calls", "solver_not_converged", "solver_worst_marginal_error")


class SolverTally:
    """Solver calls, those that stopped at ``max_iter`` (not converged), and the largest marginal error a call
    stopped at, since the tally was last taken."""

    def __init__(self) -> None:
        self.calls = 0
        self.not_converged = 0
        self.worst = 0.0

    def add(self, stats: Mapping[str, Any]) -> None:
        """Count one call from its ``stats`` (``converged``: 1.0 / 0.0, ``marginal_error``: a float). A non-finite
        marginal error counts as not converged and leaves the worst error as it was (the call's loss is then
        non-finite too, and the training loop stops on it)."""
        self.calls += 1
        err = float(stats["marginal_error"])
        if not stats["converged"] or not math.isfinite(err):
            self.not_converged += 1
        if math.isfinite(err) and err > self.worst:
            self.worst = err

    def take(self) -> dict[str, float]:
        """The tally as ``{curve: value}`` (:data:`CURVES`), and start counting again from zero."""
        out = {"solver_calls": float(self.calls), "solver_not_converged": float(self.not_converged),
               "solver_worst_marginal_error": float(self.worst)}
        self.__init__()
        return out

    def state_dict(self) -> dict[str, float]:
        """The running tally (saved with a checkpoint): ``{"calls", "not_converged", "worst"}``."""
        return {"calls": self.calls, "not_converged": self.not_converged, "worst": self.worst}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s mapping (a ``ValueError`` naming the key for anything else)."""
        for key in ("calls", "not_converged"):
            v = state.get(key) if isinstance(state, Mapping) else None
            if type(v) is not int or v < 0:
                raise ValueError(f"solver tally: key {key!r}: expected an integer >= 0, got {v!r}")
        worst = state.get("worst")
        if isinstance(worst, bool) or not isinstance(worst, (int, float)) or not math.isfinite(worst) or worst < 0:
            raise ValueError(f"solver tally: key 'worst': expected a finite number >= 0, got {worst!r}")
        if state["not_converged"] > state["calls"]:
            raise ValueError(f"solver tally: not_converged {state['not_converged']} exceeds calls {state['calls']}")
        self.calls, self.not_converged, self.worst = state["calls"], state["not_converged"], float(worst)

    def __repr__(self) -> str:
        return f"SolverTally(calls={self.calls}, not_converged={self.not_converged}, worst={self.worst:.3g})"


def summed(curves: Mapping[str, Any]) -> dict[str, Any] | None:
    """One run's tally from its record's per-epoch ``curves`` (:data:`CURVES`): ``{"calls", "not_converged"}``
    summed over the epochs (integers) and ``worst_marginal_error``, the largest finite value over them (0.0 when
    none); None when the record does not hold the three curves (no iterative solver, or made before the count)."""
    if not all(isinstance(curves.get(c), list) for c in CURVES):
        return None
    worst = [float(x) for x in curves["solver_worst_marginal_error"] if math.isfinite(x)]
    return {"calls": int(round(sum(curves["solver_calls"]))),
            "not_converged": int(round(sum(curves["solver_not_converged"]))),
            "worst_marginal_error": max(worst, default=0.0)}


def merged(tallies: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The tallies of several runs (:func:`summed`) as one: counts summed, the largest error; None when the list is
    empty or any run has no tally (a partial count would read as a complete one)."""
    if not tallies or any(t is None for t in tallies):
        return None
    return {"calls": sum(t["calls"] for t in tallies), "not_converged": sum(t["not_converged"] for t in tallies),
            "worst_marginal_error": max(t["worst_marginal_error"] for t in tallies)}


def tally_of(objective: Any) -> SolverTally | None:
    """The objective's :class:`SolverTally` (its ``solver_tally``), or None for an objective without an iterative
    solver (or a plugin's that keeps none)."""
    tally = getattr(objective, "solver_tally", None)
    return tally if isinstance(tally, SolverTally) else None


__all__ = ["CURVES", "SolverTally", "tally_of"]
