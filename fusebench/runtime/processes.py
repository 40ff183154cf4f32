"""Whether a process of this host is alive: the one check behind a cell's lock (:mod:`fusebench.engine.locks`) and
the work folders a killed ``fusebench data prepare`` left (:func:`fusebench.datasets.cache.remove_stale_work_folders`).
Layer 0: the dataset layer may import it."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host: a signal 0 reaches it, or it exists and is another user's
    (PermissionError). A pid no process can have (negative, beyond the platform's range) is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):  # e.g. a pid read from a folder's name, beyond pid_t
        return False
    return True


__all__ = ["pid_alive"]
