"""Scoring a model on a split (engine layer): the spec's metrics through the dataset's task, frozen
features and embeddings for probes and diagnostics."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fusebench.runtime import utils
from fusebench.runtime.gather import HostGather
from fusebench.spec.config import BenchmarkSpec
from fusebench.engine.data import input_views, make_loader
from fusebench.runtime.progress import cell_track

@torch.no_grad()
def evaluate(model: nn.Module, ds, spec: BenchmarkSpec, device: torch.device, seed: int) -> dict[str, float]:
    """Score ``model`` on ``ds`` with the spec's metrics, in the form of the dataset's task
    (:mod:`fusebench.tasks`)."""
    from fusebench import tasks

    model.eval()
    task = tasks.for_dataset(ds)
    loader, _ = make_loader(ds, spec.downstream.batch_size, False, seed, 0)
    for batch in loader:
        batch = utils.to_device(batch, device)
        task.add(model.predict(model(batch), batch), batch["target"])
    return task.score(spec.metrics)


@torch.no_grad()
def embeddings(model: nn.Module, ds, spec: BenchmarkSpec, device: torch.device, seed: int, limit: int = 512) -> torch.Tensor:
    """The per-view embeddings ``[k, n, f]`` (float32, on the host) of the first ``limit`` samples of ``ds``."""
    model.eval()
    loader, _ = make_loader(ds, spec.downstream.batch_size, False, seed, 0)
    out, n = HostGather(), 0
    for batch in loader:
        z = model.embed(utils.to_device(batch, device))
        out.add(z.float())
        n += z.shape[1]  # a shape: no read of the device
        if n >= limit:
            break
    return torch.cat(out.result(), dim=1)[:, :limit]


@torch.no_grad()
def features(model: nn.Module | None, ds, spec: BenchmarkSpec, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All of ``ds`` as frozen features [n, k * f] and labels [n]: the concatenated per-view
    embeddings of ``model``, or with ``model=None`` the adapter's (standardised) input views."""
    if model is None:
        views, y = input_views(ds, spec, seed)
        return torch.from_numpy(np.concatenate(views, axis=1)).float(), y
    model.eval()
    loader, per_epoch = make_loader(ds, spec.downstream.batch_size, False, seed, 0)
    xs = HostGather()  # copied to the host in blocks of batches: no wait for the device at each batch
    ys = []
    for batch in cell_track(loader, per_epoch, f"features {getattr(ds, 'split', '')}"):  # lines when slow
        z = model.embed(utils.to_device(batch, device)).float()  # [k, n, f]
        xs.add(z.permute(1, 0, 2).reshape(z.shape[1], -1))
        ys.append(batch["target"].reshape(-1))  # the loader's batch, on the CPU: no copy
    return torch.cat(xs.result()), torch.cat(ys)
