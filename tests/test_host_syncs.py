"""No device-to-host read in the per-step path of training (issue 33, item 3).

A tensor-to-Python conversion (``item``, ``float()``, ``bool()``, ``int()``, ``tolist``, ``cpu``, ``numpy`` ...)
of a tensor on a GPU makes the host wait for the device: the CPU can then never queue the next step while the
GPU runs this one. On the CPU nothing waits, but the conversions are the same calls, so they are counted here
with a ``torch.overrides.TorchFunctionMode`` on the CPU: per training step of every pipeline (the standard
pretraining with each input kind of objective, also with missing views (``pretrain.missing_rate``: the masked
losses), the downstream head training of the linear probe and of fine-tuning) and per call of every registered
objective, with and without a mask where it honours one. Counted with them: a boolean selection ``x[mask]`` (its
size depends on the values) and indexing with a Python list (an index tensor made on the host and copied to the
device). Left out of the count, as the issue says: data loading (the loader's own draws) and the host-side
preparation of a batch before its copy (``hooks.host``: the presence mask is tested there, on the CPU batch, for
what the masked losses would refuse (no usable term, fewer than 2 samples with 2 views), as are the labels), the
optimisers' CPU step counters (``torch/optim``), and what happens at an epoch's end or a checkpoint. The loop
reads its losses once per :data:`~fusebench.engine.loop.LOSS_READ_EVERY` steps (``read_losses``): that read is
counted apart.

Exempt, explicitly:

* M3G and the matching gap (``objectives/m3g.py``, ``matching_gap.py``, ``sinkhorn*.py``): their Sinkhorn
  solvers decide when to stop from the marginal error, so they read the device by design. Off the CPU they read
  once per block of sweeps: M3G's scaling solver through the blocked runner (``objectives/sinkhorn_blocked.py``,
  on CUDA), and the reference solver the matching gap (and M3G's ``solver="reference"`` / ``cost="csd"``) uses
  through its own blocked mode (``dense_sinkhorn``, ``blocked``: the errors and potentials of up to
  ``DENSE_BLOCK_SWEEPS`` sweeps kept on the device, the statistics left as 0-dim tensors; counted in
  ``tests/test_matching_gap_blocked.py``). On the CPU (this test) both run their per-sweep loops (numpy /
  per-sweep reads), where a read waits for nothing.
* TupleInfoNCE's derangement (``random_derangement``): the permutation is drawn from the CPU generator (the
  same draws on every device) and its rejection test reads that CPU tensor, which waits for no device; the
  permutation then goes to the device through pinned memory without blocking.

A step's first call may read once to build what later steps reuse (the objectives' cached index tensors, the
TupleInfoNCE mixture weights); every later step must read nothing.
"""

from __future__ import annotations

import collections
import contextlib
import traceback
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from fusebench import benchmarks, objectives
from fusebench.engine import loop
from fusebench.cells import head_protocol, standard
from fusebench.cells.execute import run_cell
from fusebench.spec.request import CellRequest, RunOptions
from fusebench.runtime.utils import deferred_value_checks

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: the tensor-to-Python conversions (on a GPU tensor each one waits for the device)
CONVERSIONS = frozenset({"item", "__float__", "__bool__", "__int__", "__index__", "__format__", "__complex__",
                         "tolist", "cpu", "numpy", "equal", "allclose", "nonzero", "argwhere"})
#: code whose reads are exempt (module docstring: solver reads by design; the CPU derangement)
EXEMPT_FILES = ("objectives/m3g.py", "objectives/matching_gap.py", "objectives/sinkhorn")
EXEMPT_FUNCTIONS = ("random_derangement",)


def _bool_index(func, args) -> bool:
    """``x[mask]`` with a boolean tensor: its size depends on the mask's values (a read); ``x[[i, j]]`` with a
    Python list: an index tensor made on the host and copied to the device (a blocking copy on a GPU)."""
    if getattr(func, "__name__", "") not in ("__getitem__", "__setitem__") or len(args) < 2:
        return False
    idx = args[1] if isinstance(args[1], tuple) else (args[1],)
    return any(isinstance(i, list) or (isinstance(i, torch.Tensor) and i.dtype == torch.bool) for i in idx)


class HostReads(TorchFunctionMode):
    """Counts the conversions (and boolean selections) while ``active``, by step and code line."""

    def __init__(self) -> None:
        super().__init__()
        self.active = 0
        self.step = 0
        self.reads: list[tuple[int, str, str]] = []  # (step, what, where)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if self.active > 0 and (name in CONVERSIONS or _bool_index(func, args)):
            frames = traceback.extract_stack()[:-1]
            if not any("/torch/optim/" in f.filename for f in frames):  # the optimisers' CPU step counters
                ours = [f for f in frames if "/tests/" not in f.filename and "/torch/" not in f.filename]
                exempt = any(any(e in f.filename for e in EXEMPT_FILES) or f.name in EXEMPT_FUNCTIONS for f in ours)
                if not exempt:
                    where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno} ({ours[-1].name})" if ours else "?"
                    self.reads.append((self.step, name, where))
        return func(*args, **(kwargs or {}))

    def paused(self, fn):
        def run(*a, **k):
            self.active -= 1
            try:
                return fn(*a, **k)
            finally:
                self.active += 1
        return run


TINY = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 2, "pretrain.batch_size": 32,
        "downstream.epochs": 2, "downstream.batch_size": 32, "checkpoint_every": 1000}


def _count_cell(objective: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **overrides) -> tuple[HostReads, dict]:
    """Run a tiny quickstart cell, counting the reads inside the training loop's steps."""
    mode = HostReads()
    steps: collections.Counter = collections.Counter()
    real = standard.run_phase

    def counted(phase, epochs, hooks, *args, **kwargs):
        load = hooks.loader

        def loader(epoch, skip):  # data loading is not counted
            it = mode.paused(lambda: iter(load(epoch, skip)))()
            while True:
                try:
                    batch = mode.paused(next)(it)
                except StopIteration:
                    return
                mode.step = steps[phase.name]
                steps[phase.name] += 1
                yield batch

        hooks.loader = loader
        hooks.host = mode.paused(hooks.host)  # the CPU batch before its copy: masks and labels checked there
        hooks.on_epoch_start = mode.paused(hooks.on_epoch_start)
        hooks.on_epoch_end = mode.paused(hooks.on_epoch_end)
        mode.active += 1
        try:
            return real(phase, epochs, hooks, *args, **kwargs)
        finally:
            mode.active -= 1

    monkeypatch.setattr(standard, "run_phase", counted)  # pretraining
    monkeypatch.setattr(head_protocol, "run_phase", counted)  # the downstream head (linear_probe / finetune)
    monkeypatch.setattr(loop.Phase, "save", mode.paused(loop.Phase.save))
    monkeypatch.setattr(loop, "LOSS_READ_EVERY", 3)
    spec = benchmarks.load("quickstart", overrides={**TINY, **overrides})
    with mode:
        rec = run_cell(CellRequest(spec, objective, 0, tmp_path), RunOptions(progress=False))
    mode.steps = steps
    return mode, rec


def _per_step(mode: HostReads) -> tuple[list, list]:
    """(reads of the loop's every-N loss read, every other read after the first step)."""
    loss_reads = [r for r in mode.reads if "read_losses" in r[2]]
    others = [r for r in mode.reads if "read_losses" not in r[2] and r[0] >= 1]
    return loss_reads, others


# one objective per way the Pretrainer computes a loss: views (with and without a mask-honouring loss), the
# TupleInfoNCE method (tuple), the EMA teacher (pairs), M3G (its solver exempt); downstream: the linear probe.
# missing 0.3: a presence mask with missing views in every batch (the masked NT-Xent and MV losses; before:
# infonce_pwe 1 read per step, the term count; mv_dhel 2, the sample count and the selection of valid samples)
@pytest.mark.parametrize("objective, missing", [("infonce_pwe", 0), ("mv_dhel", 0), ("tuple_infonce", 0),
                                                ("byol_avg", 0), ("m3g", 0), ("infonce_pwe", 0.3), ("mv_dhel", 0.3)])
def test_no_host_read_per_training_step(objective: str, missing: float, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    masks: list = []
    if missing:
        from fusebench.engine import pretrain

        real_mask = pretrain.Pretrainer._mask
        monkeypatch.setattr(pretrain.Pretrainer, "_mask", lambda self, b: masks.append(real_mask(self, b)) or masks[-1])
    mode, rec = _count_cell(objective, monkeypatch, tmp_path, **({"pretrain.missing_rate": missing} if missing else {}))
    if missing:  # the masked path ran: a mask with a missing view in the steps
        assert masks and all(m is not None and not bool(m.all()) for m in masks)
    loss_reads, others = _per_step(mode)
    assert not others, f"{objective}: host reads in the steps: " + "; ".join(f"step {s}: {w} at {c}" for s, w, c in others)
    pre, down = mode.steps["pretrain"], mode.steps["downstream"]
    assert pre >= 6 and down >= 4
    # one read (a tolist) per 3 steps or per epoch end, whichever comes first: 2 epochs of 4 / of 3 or 4 steps
    per_epoch = lambda n: -(-(n // 2) // 3)  # noqa: E731 - ceil(steps per epoch / 3)
    assert [w for _, w, _ in loss_reads] == ["tolist"] * len(loss_reads)
    assert len(loss_reads) == 2 * per_epoch(pre) + 2 * per_epoch(down), loss_reads
    # the curves are the losses of every step
    assert len(rec["curves"]["pretrain_loss"]) == pre and len(rec["curves"]["downstream_loss"]) == down


def test_no_host_read_per_finetuning_step(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    mode, rec = _count_cell("infonce_pwe", monkeypatch, tmp_path, **{"downstream.protocol": "finetune"})
    _, others = _per_step(mode)
    assert not others, "host reads in the fine-tuning steps: " + "; ".join(f"step {s}: {w} at {c}" for s, w, c in others)
    assert mode.steps["downstream"] >= 4 and len(rec["curves"]["downstream_loss"]) == mode.steps["downstream"]


def test_the_counter_sees_the_reads_it_must() -> None:
    """The mode counts each kind of conversion (so a test above cannot pass by counting nothing)."""
    mode = HostReads()
    t, m = torch.tensor([1.5]), torch.tensor([True, False])
    mode.active = 1
    with mode:
        float(t), bool(m[0]), int(t), t.item(), t.tolist(), t.cpu(), t.numpy(), f"{t[0]}", t[m[:1]], t[[0]]
    assert [w for _, w, _ in mode.reads] == ["__float__", "__bool__", "__int__", "item", "tolist", "cpu", "numpy",
                                             "__format__", "__getitem__", "__getitem__"]


# ------------------------------------------------------------------------------------------ every objective
def _inputs(module, k: int, n: int = 8, d: int = 6):
    g = torch.Generator().manual_seed(k)
    kind = getattr(module, "input_kind", "views")
    if kind == "tuple":
        anchor = torch.randn(n, d, generator=g, requires_grad=True)
        return (anchor, torch.randn(n, d, generator=g), torch.randn(n, 2 * n, d, generator=g)), \
            {"weights": torch.rand(2 * n, generator=g) + 0.1}
    views = torch.randn(k, n, d, generator=g, requires_grad=True)
    if kind == "pairs":
        return (views, torch.randn(k, n, d, generator=g)), {}
    return (views,), {}


def _view_counts(module) -> list[int]:
    lo, hi = module.min_views, module.max_views
    return [k for k in (2, 3) if k >= lo and (hi is None or k <= hi)]


@pytest.mark.parametrize("name", objectives.OBJECTIVES.builtin())  # fusebench's (a plugin here is its author's)
def test_every_objective_reads_nothing_in_a_training_step(name: str) -> None:
    """Each registered objective, called as in a training step (inside the loop's deferred checks), forward and
    backward: no read from its second call on (the first may build cached index tensors). Before issue 33:
    infonce_pwe 4 reads per call (the NaN scan, the term count, two statistics), mv_dhel 3, tuple_infonce 8+."""
    module = objectives.build(name)
    for k, masked in [(k, m) for k in _view_counts(module) for m in (False, True) if not m or module.supports_mask]:
        args, kwargs = _inputs(module, k)
        if masked:  # a missing view (as the Pretrainer passes it: the host found one, and what the loss refuses)
            mask = torch.ones(k, args[0].shape[1], dtype=torch.bool)
            mask[0, :3] = False
            mask[-1, 5] = False
            kwargs = {**kwargs, "mask": mask}
        mode = HostReads()
        with mode, deferred_value_checks():
            for call in range(3):
                mode.step, mode.active = call, 1
                loss = module(*args, **kwargs)
                loss.backward()
                mode.active = 0
        later = [r for r in mode.reads if r[0] >= 1]
        assert not later, f"{name} (k={k}, mask={masked}): " + "; ".join(f"{w} at {c}" for _, w, c in later)
        assert all(isinstance(v, (float, torch.Tensor)) for v in module.stats.values())


def test_statistics_stay_tensors_until_read() -> None:
    """The statistics are 0-dim detached tensors (read by whoever wants them), with the values worked out by hand."""
    z = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]])  # cosines of the positives: 1 and 0
    module = objectives.build("infonce_pwe", tau=0.5)
    module(z)
    pos_cos = module.stats["pos_cos"]
    assert isinstance(pos_cos, torch.Tensor) and pos_cos.dim() == 0 and not pos_cos.requires_grad
    assert float(pos_cos) == pytest.approx(0.5) and float(module.stats["terms"]) == 4.0  # 2 anchors x 2 samples


# ------------------------------------------------------------------------------------------ the loop's guard
def test_a_non_finite_loss_read_late_stops_before_the_next_checkpoint(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """The losses are read every N steps; a NaN at the 6th step (read at the checkpoint of step 8) stops the cell
    naming step 6, and last.pt stays the checkpoint of step 4, written before (finite parameters)."""
    from fusebench.engine import pretrain
    from fusebench.engine.loop import RunError

    calls = {"n": 0}
    real = pretrain.Pretrainer.forward

    def nan_at_step_5(self, batch, gather=None):
        calls["n"] += 1
        loss = real(self, batch, gather)
        return loss * float("nan") if calls["n"] == 6 else loss

    monkeypatch.setattr(pretrain.Pretrainer, "forward", nan_at_step_5)
    monkeypatch.setattr(loop, "LOSS_READ_EVERY", 16)
    spec = benchmarks.load("quickstart", overrides={**TINY, "checkpoint_every": 4, "pretrain.epochs": 4})
    with pytest.raises(RunError, match=r"objective 'infonce_pwe' is nan at pretraining step 6 \(epoch 1\); "
                                       r"checkpoint kept at .*last.pt \(step 4, written before the loss diverged\)"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False))
    assert calls["n"] == 8  # the steps after it ran until the read (the device never waited for the host)
    ckpt = torch.load(tmp_path / "quickstart" / "infonce_pwe" / "seed0" / "last.pt", weights_only=True)
    assert ckpt["step"] == 4 and len(ckpt["curves"]["pretrain_loss"]) == 4
    assert all(torch.isfinite(v).all() for v in ckpt["pretrainer"].values() if v.is_floating_point())


def test_a_step_that_fails_after_a_non_finite_loss_names_the_loss(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """A step that raises on what a non-finite loss left (here: any error after it) reports the divergence."""
    from fusebench.engine import pretrain
    from fusebench.engine.loop import RunError

    calls = {"n": 0}
    real = pretrain.Pretrainer.forward

    def nan_then_error(self, batch, gather=None):
        calls["n"] += 1
        if calls["n"] == 3:
            raise ValueError("the solver saw NaN")
        loss = real(self, batch, gather)
        return loss * float("nan") if calls["n"] == 2 else loss

    monkeypatch.setattr(pretrain.Pretrainer, "forward", nan_then_error)
    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(RunError, match=r"is nan at pretraining step 2 \(epoch 0\); no checkpoint written yet"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False))


def test_a_finite_loss_with_a_non_finite_gradient_never_reaches_a_checkpoint(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    """loss + sqrt(loss - loss) is the loss (finite) with a NaN gradient: the step's weights are NaN although no
    loss is. At the checkpoint's own step no later loss shows it, so the checkpoint is refused (it used to be
    written, said to be from 'before the loss diverged', and resumed from forever); last.pt stays the finite one of
    step 4, and the error names the step. (A NaN gradient before it shows in the next loss: the loss guard.)"""
    from fusebench.engine import pretrain
    from fusebench.engine.loop import RunError

    calls = {"n": 0}
    real = pretrain.Pretrainer.optimise

    def nan_gradient_at_step_8(self, loss, optimizer, all_reduce=True, scaler=None):
        calls["n"] += 1
        if calls["n"] == 8:  # the step of the second checkpoint
            loss = loss + torch.sqrt(loss - loss)  # value unchanged, gradient 0 * inf = NaN
        return real(self, loss, optimizer, all_reduce, scaler)

    monkeypatch.setattr(pretrain.Pretrainer, "optimise", nan_gradient_at_step_8)
    spec = benchmarks.load("quickstart", overrides={**TINY, "checkpoint_every": 4, "pretrain.epochs": 4})
    with pytest.raises(RunError, match=r"the pretrain weights are not finite after step 8 \(epoch \d\) although its "
                                       r"losses were: a non-finite gradient \(pretrainer\..*checkpoint .*last.pt not "
                                       r"written; the checkpoint .*last.pt is from before"):
        run_cell(CellRequest(spec, "infonce_pwe", 0, tmp_path), RunOptions(progress=False))
    ckpt = torch.load(tmp_path / "quickstart" / "infonce_pwe" / "seed0" / "last.pt", weights_only=True)
    assert ckpt["step"] == 4
    assert all(torch.isfinite(v).all() for v in ckpt["pretrainer"].values() if v.is_floating_point())


def test_a_numerical_error_in_a_step_names_the_phase_step_and_epoch(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """A loss that refuses what it is given (M3G: "the Gram matrix of the views is not finite") said neither the
    step nor the epoch; now the RunError does, with the loss's error chained."""
    from fusebench.engine import pretrain
    from fusebench.engine.loop import RunError

    calls = {"n": 0}
    real = pretrain.Pretrainer.forward

    def refuses_at_step_3(self, batch, gather=None):
        calls["n"] += 1
        if calls["n"] == 3:
            raise ValueError("m3g: the Gram matrix of the views is not finite")
        return real(self, batch, gather)

    monkeypatch.setattr(pretrain.Pretrainer, "forward", refuses_at_step_3)
    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(RunError, match=r"^pretrain step 3 \(epoch 0\): ValueError: m3g: the Gram matrix of the views "
                                       r"is not finite; no checkpoint written yet") as err:
        run_cell(CellRequest(spec, "m3g", 0, tmp_path), RunOptions(progress=False))
    assert isinstance(err.value.__cause__, ValueError)
    # after a checkpoint, it is named as written before that step (the losses before it were finite: no divergence)
    calls["n"] = 0
    every = {**TINY, "checkpoint_every": 2}
    with pytest.raises(RunError, match=r"^pretrain step 3 \(epoch 0\): ValueError: .*; checkpoint kept at "
                                       r".*last\.pt \(step 2, written before this step\)$"):
        run_cell(CellRequest(benchmarks.load("quickstart", overrides=every), "m3g", 0, tmp_path / "b"),
                 RunOptions(progress=False))


def test_votenet_labels_are_checked_on_the_host_batch() -> None:
    """Inside the loop's steps VoteNet's loss reads no label bound (deferred); the host hook checks them on the
    CPU batch before the copy, with the error a direct call gives."""
    from fusebench.encoders import build
    from fusebench.components.model import for_backbone

    torch.manual_seed(0)
    backbone = build("votenet", config="tiny")
    model = for_backbone(backbone)
    batch = backbone.example_batch(dict(config="tiny"), batch_size=2, num_points=256)
    assert model.check_batch(batch) is batch
    out = model(batch)
    mode = HostReads()
    mode.active = 1
    with mode, deferred_value_checks():
        model.task_loss(out, batch)
    assert not mode.reads, mode.reads
    bad = dict(batch, target=[dict(t) for t in batch["target"]])
    bad["target"][0]["labels"] = torch.tensor([0, 11])
    bad["target"][0]["boxes"] = torch.zeros(2, 7)
    with pytest.raises(ValueError, match=r"target 0 labels must be in \[0, 10\)"):
        model.check_batch(bad)


def test_a_downstream_epoch_with_non_finite_weights_writes_no_best_pt(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """The same NaN gradient at the last step of the first downstream epoch: that epoch's validation is not run and
    no best.pt is written from it (a NaN model used to be scored, kept as best.pt, and the run could 'succeed')."""
    from fusebench.engine.loop import RunError
    from fusebench.spec import precision

    calls = {"n": 0}
    real = precision.backward_step

    def nan_gradient_at_the_fourth_downstream_step(loss, opt, scaler):
        calls["n"] += 1
        if calls["n"] == 4:
            loss = loss + torch.sqrt(loss - loss)  # value unchanged, gradient 0 * inf = NaN
        return real(loss, opt, scaler)

    monkeypatch.setattr(head_protocol.precision, "backward_step", nan_gradient_at_the_fourth_downstream_step)
    spec = benchmarks.load("quickstart", overrides=TINY)
    with pytest.raises(RunError, match=r"the downstream weights are not finite after step 4 \(epoch 0\) .*the "
                                       r"epoch's validation and .*best.pt not written"):
        run_cell(CellRequest(spec, "none", 0, tmp_path), RunOptions(progress=False))
    assert not (tmp_path / "quickstart" / "none" / "seed0" / "best.pt").exists()


# ------------------------------------------------------------------------------------------ the gaussian_mi cell
def _gaussian_mi_cell(objective: str, tmp_path: Path, mode: HostReads | None = None):
    """The polyview-gaussian-mi synthetic cell (K = 128, M in {2, 4}, 5 steps, 2 evaluation batches per M), with the
    objective's calls counted in ``mode`` (the n-th call of the objective built for an M is ``mode.step`` n: a first
    call may build what later calls reuse, e.g. the cached index tensors of a new view count)."""
    spec = benchmarks.load("polyview-gaussian-mi", synthetic=True)
    real_build = objectives.build
    calls = [0]

    def build(*a, **k):
        module = real_build(*a, **k)
        forward, mine = module.forward, [0]

        def counted(*x, **y):
            mode.step, mine[0], calls[0] = mine[0], mine[0] + 1, calls[0] + 1
            mode.active += 1
            try:
                return forward(*x, **y)
            finally:
                mode.active -= 1

        if mode is not None:
            module.forward = counted
        return module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(objectives, "build", build)
        with (mode or contextlib.nullcontext()):
            rec = run_cell(CellRequest(spec, objective, 0, tmp_path), RunOptions(progress=False, synthetic=True))
    return rec, calls[0]


@pytest.mark.parametrize("objective", ["suff_stats", "pvc_geometric"])
def test_no_host_read_per_gaussian_mi_step(objective: str, tmp_path: Path) -> None:
    """The poly-view Gaussian MI cell's own training and evaluation loops (cells/gaussian_mi.py) read nothing per
    call of the objective after its first for an M (before: the objective's NaN scan of its inputs, one read per
    training step and per evaluation batch: 13 of its 14 calls); its losses are read once per M."""
    mode = HostReads()
    rec, calls = _gaussian_mi_cell(objective, tmp_path, mode)
    assert calls == 2 * (5 + 2)  # M in {2, 4}: 5 training steps and 2 evaluation batches each
    later = [r for r in mode.reads if r[0] >= 1]
    assert not later, f"{objective}: " + "; ".join(f"call {s}: {w} at {c}" for s, w, c in later)
    assert [len(rec["curves"][f"loss_M{m}"]) for m in (2, 4)] == [5, 5]


@pytest.mark.parametrize("bad_call, message", [
    (3, r"M=2: the training loss is nan at step 3 of 5; no record written"),  # the 3rd training batch of M = 2
    (7, r"M=2: the network's embeddings of the evaluation batches are not finite"),  # its 2nd evaluation batch
])
def test_a_non_finite_gaussian_mi_step_stops_the_cell_naming_m_and_step(bad_call: int, message: str,
                                                                         tmp_path: Path) -> None:
    """With the objective's input scan deferred, a NaN in a step is found when the losses are read (per M): the
    cell stops with a RunError naming M and the step, and writes no record (before: the next step's scan raised a
    bare ValueError of the objective, naming neither)."""
    from fusebench.cells import gaussian_mi

    real, drawn = gaussian_mi.sample_views, [0]

    def sample(*a, **k):  # the training batches of M = 2 are draws 1-5, its evaluation batches draws 6-7
        x = real(*a, **k)
        drawn[0] += 1
        return torch.where(torch.arange(x.shape[1])[None, :, None] == 0, float("nan"), x) if drawn[0] == bad_call else x

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gaussian_mi, "sample_views", sample)
        with pytest.raises(loop.RunError, match=rf"^polyview-gaussian-mi/suff_stats/seed0: {message}"):
            _gaussian_mi_cell("suff_stats", tmp_path)
    assert not (tmp_path / "run.json").exists() and not list(tmp_path.rglob("run.json"))
