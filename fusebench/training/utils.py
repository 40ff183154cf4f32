"""Reproducibility and bookkeeping helpers: seeds, RNG states, devices, atomic writes, git info."""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool = True) -> dict[str, Any]:
    """Seed python, numpy and torch; switch on deterministic algorithms. Returns the flags set."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    flags = {"seed": seed, "deterministic_algorithms": False, "cudnn_benchmark": False}
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        flags.update(deterministic_algorithms=True, cudnn_deterministic=True)
    return flags


def rng_state() -> dict[str, Any]:
    """RNG states as tensors and plain containers only, so checkpoints load with ``weights_only=True``."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(tuple(state["python"][:1]) + (tuple(state["python"][1]),) + tuple(state["python"][2:]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks cuda, then mps, then cpu."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name not in ("cpu", "cuda", "mps") and not name.startswith("cuda:"):
        raise ValueError(f"--device {name!r}: expected auto, cpu, cuda, cuda:N or mps")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available on this machine")
    return torch.device(name)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_torch_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: tracked paths that runs and leaderboard regeneration write to; they never make a checkout "dirty"
GENERATED_PATHS = ("leaderboards",)


def git_info(repo: str | Path | None = None) -> dict[str, Any]:
    """The suite's git sha and dirty flag (None where not a git checkout).

    ``dirty`` is True when a tracked source file differs from the commit; the generated outputs under
    :data:`GENERATED_PATHS` (leaderboard markdown, plots, committed run records) are excluded, since a
    sweep rewrites them itself and must not mark its own later cells dirty. ``dirty_files`` lists the
    first 20 modified paths so a dirty record says why."""
    here = Path(repo) if repo is not None else Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return {"sha": None, "dirty": None}
        excludes = [f":(exclude){p}" for p in GENERATED_PATHS]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *excludes],
                               cwd=here, capture_output=True, text=True, timeout=10)
        files = [line[3:] for line in dirty.stdout.splitlines() if line.strip()]
        return {"sha": sha.stdout.strip(), "dirty": bool(files), "dirty_files": files[:20]}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process: CUDA allocator peak on GPU, max RSS on CPU (MiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list):
        return [to_device(v, device) for v in batch]
    return batch
