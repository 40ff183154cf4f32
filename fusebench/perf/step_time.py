"""``fusebench bench objectives --step-time``: a quickstart pretraining step, M3G against InfoNCE-pwe.

One pretraining step per objective in the quickstart benchmark's configuration (its encoder, heads,
batch size, optimiser and objective hyperparameters; same first batch): forward, backward, optimiser
step. The two objectives alternate; medians and the M3G / InfoNCE-pwe ratio against ``STEP_TARGET``;
``--profile`` adds a torch.profiler table of M3G steps. Results: docs/benchmarks-objectives.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from fusebench.perf.timing import fmt_ms, machine_description, quiet_stderr

STEP_TARGET = 1.5


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def quickstart_steps(objectives: tuple[str, ...] = ("m3g", "infonce_pwe"), benchmark: str = "quickstart",
                     seed: int = 0) -> dict[str, Callable[[], float]]:
    """One pretraining step per objective in ``benchmark``'s configuration (its encoder, heads, batch size,
    optimiser and objective hyperparameters), each with its own model built from the same seed, on the
    same first training batch: ``loss = Pretrainer(batch)``, backward, optimiser step (what the training
    loop does per step, without data loading, scheduler and logging)."""
    from fusebench import benchmarks
    from fusebench import objectives as objs
    from fusebench.engine.data import build_datasets, make_loader
    from fusebench.engine.optim import build_optimizer
    from fusebench.engine.pretrain import Pretrainer
    from fusebench.spec.request import objective_hparams
    from fusebench.cells.standard import build_model

    spec = benchmarks.load(benchmark)
    data = build_datasets(spec, False, None, seed, roles=("train",))
    loader, per_epoch = make_loader(data["train"], spec.pretrain.settings(objectives[0]).batch_size, True, seed, 0)
    batch = next(iter(loader))
    steps = {}
    for name in objectives:
        torch.manual_seed(seed)
        model = build_model(spec, data["train"])
        obj = objs.build(name, **objective_hparams(spec, name))
        pre = Pretrainer(model, obj, spec.pretrain, total_steps=per_epoch * spec.pretrain.epochs)
        opt = build_optimizer(pre.student_parameters(), spec.pretrain.optimizer, spec.pretrain.lr,
                              spec.pretrain.weight_decay)
        pre.train()

        def step(pre=pre, opt=opt) -> float:
            loss = pre(batch)
            pre.optimise(loss, opt, all_reduce=False)
            return float(loss.detach())

        steps[name] = step
    return steps


def bench_step_time(rounds: int = 100, warmup: int = 10, benchmark: str = "quickstart") -> dict:
    """Median step times (alternating, after ``warmup`` steps each) and the M3G / InfoNCE-pwe ratio."""
    steps = quickstart_steps(benchmark=benchmark)
    for _ in range(warmup):
        for f in steps.values():
            f()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        names = list(steps) if r % 2 == 0 else list(reversed(steps))
        for name in names:
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    per_round = [a / b for a, b in zip(times["m3g"], times["infonce_pwe"])]
    return {"median": med, "ratio": med["m3g"] / med["infonce_pwe"], "ratio_p10": _pct(per_round, 0.1),
            "ratio_p90": _pct(per_round, 0.9), "rounds": rounds}


def profile_step(objective: str = "m3g", steps: int = 50, rows: int = 15, benchmark: str = "quickstart") -> str:
    """torch.profiler table (self CPU time) of ``steps`` quickstart pretraining steps of ``objective``."""
    from torch.profiler import ProfilerActivity, profile

    step = quickstart_steps((objective,), benchmark=benchmark)[objective]
    for _ in range(5):
        step()
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def run(ns: argparse.Namespace) -> int:
    rounds = ns.rounds  # --rounds, else 100 (--quick: 30; fusebench.perf.objectives)
    print("# fusebench bench objectives --step-time")
    print()
    print(machine_description())
    print()
    print(f"Quickstart pretraining step (benchmarks/quickstart.yaml: 3 modalities, MLP encoders, projection 32, "
          f"batch 64; M3G eps=0.2, InfoNCE-pwe tau=0.2): forward (encoders, heads, loss), backward, AdamW step, "
          f"same first batch; the two alternate, {rounds} rounds after 10 warm-up steps each; medians.")
    print()
    r = bench_step_time(rounds=rounds)
    med = r["median"]
    print("| objective | step (median) |")
    print("|---|---|")
    for name, t in med.items():
        print(f"| {name} | {fmt_ms(t)} |")
    print()
    met = r["ratio"] <= STEP_TARGET
    print(f"M3G / InfoNCE-pwe step time: **{r['ratio']:.2f}x** (per-round ratios p10-p90 {r['ratio_p10']:.2f}-"
          f"{r['ratio_p90']:.2f}); target <= {STEP_TARGET}x: {'met' if met else 'NOT MET'}")
    if ns.profile:
        print()
        print("torch.profiler, 50 M3G steps, top operators by self CPU time:")
        print()
        print(profile_step())
    return 0
