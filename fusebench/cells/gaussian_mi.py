"""The poly-view paper's synthetic 1D Gaussian experiment (Shidani et al. 2024, Sec. 3.1, App. E.6).

Generative model: c_i ~ N(0, sigma0^2) for i in [K]; views x_{i,a} ~ N(c_i, sigma^2) for a in [M].
The true One-vs-Rest MI has the closed form (Eq. 26)

    I(x_a; X^{!=a}) = 1/2 log[(1 + sigma0^2/sigma^2) (1 - sigma0^2 / (sigma^2 + M sigma0^2))].

An MLP h (1 -> 32, GELU, 32 -> 32) is trained with each objective on batches of K samples x M views
(AdamW, lr 5e-4, weight decay 5e-3 as in the paper; a fresh batch every step). Theorems 2.2 and 2.4
give the lower bound c(B, M) - loss with B = K M and c(B, M) = log(B - M + 1); objectives that average a
two-view loss over view pairs (multi-crop, pairwise InfoNCE) use the two-view bound log(2K - 1) - loss
(Proposition 2.1), a lower bound on I(x_a; x_b) <= I(x_a; X^{!=a}).

Evaluation, per multiplicity M: n = ``options.eval_batches`` fresh batches (a generator of their own,
never seen in training); batch b gives the estimate e_b = c - loss_b. The run reports

    mi_bound_M = mean_b e_b,   true_mi_M = Eq. 26,   mi_gap_M = true_mi_M - mi_bound_M (lower is better;
    >= 0 for a valid bound up to evaluation noise).

Validity (``record["validity"] = {"valid": bool, "why": str}``; per-M details in
``record["mi_bound_checks"]``). For a fixed trained network the expected estimate E[e_b] of a valid
bound is at most the true MI, so each M is tested one-sided: with the sample standard deviation s of
the n batch estimates, SE = s / sqrt(n), and q = the (1 - alpha) quantile of Student's t with n - 1
degrees of freedom (alpha = ``options.validity_alpha``, default 0.01),

    the estimate exceeds the true MI  <=>  mi_bound_M - true_mi_M > q * SE

(the one-sided one-sample t-test of H0: E[e_b] <= true MI rejects at level alpha). A record is valid
when its objective has a proven bound (the objective's ``mi_bound_proof``; for ``pvc_arithmetic`` only the paper's
Eq. 12 variant) and no M exceeds. A record that is not valid is shown on the board as invalid, with the
reason, and is never ranked best. The test is per seed and per M: a bound whose expectation equals the
true MI exactly would be flagged in about alpha of those tests, a bound with a real gap rarely.

Why a "proven" bound can exceed the true MI here: the proofs (App. C.5, C.7) treat the B - M
negatives of an anchor as independent draws, but they are the M views (or M rest-set means) of each of
the K - 1 other samples, correlated within each sample. The correlation widens the spread of the softmax denominator,
which lowers E[log denominator] (Jensen) and so raises the estimate above the independent-candidates
value; the inflation shrinks as K grows. It is a property of the estimator, not of this code. Measured
for ``suff_stats`` at M = 10 (a trained network; the same anchors and positives scored once against the
batch's own negatives and once against B - M rest-sets of independent samples, paired over the evaluation
batches): +0.004 and +0.006 nats at K = 192 (+-0.0005), +0.03 nats at K = 32.

Shape: views [M, K, 32].
"""

from __future__ import annotations

import math
import time
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from fusebench.runtime import utils
from fusebench.pipelines import DEFAULT_VALIDITY_ALPHA, gaussian_mi_options_problems
from fusebench.spec import precision
from fusebench.runtime.progress import progress_bar
from fusebench.spec.request import CellRequest, objective_hparams


def true_one_vs_rest_mi(m: int, sigma0: float, sigma: float) -> float:
    """Eq. 26 of the poly-view paper (nats)."""
    r = sigma0**2 / sigma**2
    return 0.5 * math.log((1.0 + r) * (1.0 - sigma0**2 / (sigma**2 + m * sigma0**2)))


def c_bm(batch_size: int, m: int) -> float:
    """c(B, M) = log(B - M + 1) with B = K M (Theorems 2.2, 2.4)."""
    return math.log(batch_size - m + 1)


def bound_constant(objective: str, k: int, m: int) -> float:
    """The constant of the objective's MI bound: objectives that average a two-view loss over view pairs
    (``pairwise_mi_bound``) give the two-view bound, log(2K - 1) - loss = c(2K, 2) - loss, whatever M
    (Proposition 2.1); the others c(KM, M) - loss."""
    from fusebench import objectives

    return c_bm(2 * k, 2) if objectives.OBJECTIVES.get(objective).pairwise_mi_bound else c_bm(k * m, m)


def sample_views(k: int, m: int, sigma0: float, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """[M, K, 1] views of K latent samples."""
    c = sigma0 * torch.randn(k, generator=generator)
    return (c[None, :] + sigma * torch.randn(m, k, generator=generator)).unsqueeze(-1)


def proven_bound(objective: str, hparams: Mapping[str, Any] | None = None) -> str | None:
    """Where the paper proves that ``objective``'s number here lower-bounds the One-vs-Rest MI, or None.

    ``pvc_arithmetic`` counts only with ``variant="paper"`` (its default): the pseudocode variants are
    not Eq. 12 (``objectives/polyview.py``).
    """
    from fusebench import objectives

    cls = objectives.OBJECTIVES.get(objective)
    proof = getattr(cls, "mi_bound_proof", None)  # a plugin objective not derived from MultiViewObjective: none
    return proof(dict(hparams or {})) if callable(proof) else None


def bound_excess_test(batch_bounds: Sequence[float], true_mi: float,
                      alpha: float = DEFAULT_VALIDITY_ALPHA) -> dict[str, Any]:
    """One-sided test of "the expected bound estimate is at most the true MI" (module docstring).

    ``batch_bounds``: the n >= 2 per-batch estimates e_b = c - loss_b. Returns ``bound`` (mean e_b),
    ``true_mi``, ``excess`` (bound - true MI), ``se`` (s / sqrt(n), s the sample std, ddof 1),
    ``batches`` (n), ``alpha``, ``t_quantile`` (q = t_{1 - alpha, n - 1}), ``tolerance`` (q * SE) and
    ``exceeds`` (excess > tolerance; also True when an estimate is not finite).
    """
    from scipy import stats

    values = [float(v) for v in batch_bounds]
    n = len(values)
    if n < 2:
        raise ValueError(f"batch_bounds: expected at least 2 per-batch bound estimates (a standard error needs "
                         f"two), got {n}")
    if not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha: expected a level in (0, 1), got {alpha!r}")
    if not math.isfinite(float(true_mi)):
        raise ValueError(f"true_mi: expected a finite number, got {true_mi!r}")
    finite = all(math.isfinite(v) for v in values)
    mean = math.fsum(values) / n
    se = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1) / n) if finite else float("nan")
    q = float(stats.t.ppf(1.0 - float(alpha), n - 1))
    excess = mean - float(true_mi)
    return {"bound": mean, "true_mi": float(true_mi), "excess": excess, "se": se, "batches": n,
            "alpha": float(alpha), "t_quantile": q, "tolerance": q * se,
            "exceeds": (not finite) or excess > q * se}


def bound_validity(objective: str, hparams: Mapping[str, Any] | None,
                   checks: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """``{"valid": bool, "why": str}`` of one record from its per-M :func:`bound_excess_test` results.

    Valid <=> the objective has a proven bound (:func:`proven_bound`) and no M exceeds. ``why`` names the
    theorem and the largest excess when valid; otherwise each failing M (estimate, true MI, tolerance)
    and/or that no bound is proven.
    """
    if not checks:
        raise ValueError("checks: expected the bound test of at least one multiplicity M, got none")
    where = proven_bound(objective, hparams)
    problems = []
    if where is None:
        problems.append(f"no MI lower bound is proven for {objective}"
                        + (f" (variant {hparams['variant']!r})" if hparams and "variant" in hparams else "")
                        + "; number shown for comparison only")
    for m in sorted(checks):
        c = checks[m]
        if c["exceeds"]:
            problems.append(f"M={m}: estimate {c['bound']:.4f} > true MI {c['true_mi']:.4f} + tolerance "
                            f"{c['tolerance']:.4f} nats (t-test, alpha {c['alpha']:g}, {c['batches']} batches)")
    if problems:
        return {"valid": False, "why": "; ".join(problems)}
    worst = max(sorted(checks), key=lambda m: checks[m]["excess"])
    c = checks[worst]
    return {"valid": True, "why": f"proven bound ({where}); estimate <= true MI + tolerance at every M "
                                  f"(largest excess {c['excess']:+.4f} nats at M={worst}, tolerance "
                                  f"{c['tolerance']:.4f})"}


def run_cell(request: CellRequest, options: Any, context: Mapping[str, Any], trackers: Any = None) -> dict[str, Any]:
    """The ``gaussian_mi`` pipeline's cell (:class:`fusebench.pipelines.GaussianMIPipeline`): float32 with
    TF32 off on CUDA (its precision policy), then :func:`run_gaussian_mi`."""
    with precision.backend_flags(precision.get(request.spec.precision)):
        return run_gaussian_mi(request, device=options.device, progress=options.progress, context=context)


def run_gaussian_mi(request: CellRequest, device: str = "auto", progress: bool = True,
                    context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Train and evaluate one (objective, seed) cell for every M; write and return its run record."""
    from fusebench import objectives
    from fusebench.engine.loop import RunError
    from fusebench.records.cell_file import write_record
    from fusebench.records.builder import CellRun, Scores, record_of

    spec, objective, seed = request.spec, request.objective, request.seed

    opt_cfg = spec.options
    problems = gaussian_mi_options_problems(opt_cfg)
    if problems:
        raise ValueError(f"{spec.name}: " + "; ".join(problems))
    t0 = time.time()
    dev = utils.resolve_device(device)
    flags = utils.seed_everything(seed)
    k = int(opt_cfg.get("samples_per_batch", 1024))
    ms = [int(m) for m in opt_cfg.get("multiplicities", [2, 4, 8, 10])]
    sigma0, sigma = float(opt_cfg.get("sigma0", 1.0)), float(opt_cfg.get("sigma", 0.5))
    steps = int(opt_cfg.get("steps_per_epoch", 10)) * spec.pretrain.epochs
    eval_batches = int(opt_cfg.get("eval_batches", 8))
    alpha = float(opt_cfg.get("validity_alpha", DEFAULT_VALIDITY_ALPHA))
    hp = objective_hparams(spec, objective, context)  # the hyper-parameters the record states
    metrics: dict[str, float] = {}
    directions: dict[str, str] = {}
    curves: dict[str, list[float]] = {}
    checks: dict[int, dict[str, Any]] = {}
    n_params = 0
    for m in ms:
        torch.manual_seed(seed * 1000 + m)
        net = nn.Sequential(nn.Linear(1, 32), nn.GELU(), nn.Linear(32, 32)).to(dev)
        n_params = sum(p.numel() for p in net.parameters())
        loss_fn = objectives.build(objective, **hp)
        opt = utils.optimizer_class(torch.optim.AdamW)(net.parameters(), lr=spec.pretrain.lr, weight_decay=spec.pretrain.weight_decay)
        g = torch.Generator().manual_seed(seed * 7919 + m)
        bar = progress_bar(steps, 0, f"{spec.name}/{objective}/seed{seed} M={m}", enabled=progress)
        losses = []  # kept on the device: one host sync per multiplicity, not per step
        shown = max(1, steps // 20)  # the bar's loss is read (a sync) every `shown` steps only
        # every batch drawn on the CPU generator (device-independent numbers), then one copy to the device:
        # a pageable host-to-device copy per step would wait for the GPU at every step
        batches = torch.stack([sample_views(k, m, sigma0, sigma, g) for _ in range(steps)]).to(dev) if steps else None
        # the objective's NaN / Inf scan of its inputs would read the device at every step: deferred, as in the
        # training loop (engine/loop.py); the losses are read once per M below and a non-finite one stops the cell
        with utils.deferred_value_checks():
            for step in range(steps):
                loss = loss_fn(net(batches[step]))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
                if progress and (step + 1) % shown == 0:
                    bar.set_postfix(refresh=False, loss=f"{float(losses[-1]):.4f}")
                bar.update(1)
        bar.close()
        curve = torch.stack(losses).tolist() if losses else []
        bad = next((i for i, v in enumerate(curve) if not math.isfinite(v)), None)
        if bad is not None:
            raise RunError(f"{spec.name}/{objective}/seed{seed}: M={m}: the training loss is {curve[bad]} at step "
                           f"{bad + 1} of {steps}; no record written")
        curves[f"loss_M{m}"] = curve
        ge = torch.Generator().manual_seed(10**6 + seed * 31 + m)  # fresh evaluation batches
        const = bound_constant(objective, k, m)
        with torch.no_grad(), utils.deferred_value_checks():  # one read per M (below), not one per batch
            held_out = torch.stack([sample_views(k, m, sigma0, sigma, ge) for _ in range(eval_batches)]).to(dev)
            outs = [net(x) for x in held_out]
            evals = torch.stack([loss_fn(o) for o in outs])
            finite = torch.stack([torch.isfinite(o).all() for o in outs]).all() if outs else torch.tensor(True)
        if not bool(finite):  # what the objective's scan refused: e.g. weights a last non-finite gradient left
            raise RunError(f"{spec.name}/{objective}/seed{seed}: M={m}: the network's embeddings of the evaluation "
                           "batches are not finite (its weights after training: a non-finite gradient?); no record "
                           "written")
        batch_bounds = [const - v for v in evals.tolist()]
        true = true_one_vs_rest_mi(m, sigma0, sigma)
        check = bound_excess_test(batch_bounds, true, alpha)
        checks[m] = {**check, "batch_bounds": batch_bounds}
        metrics[f"mi_bound_M{m}"] = check["bound"]
        metrics[f"true_mi_M{m}"] = true
        metrics[f"mi_gap_M{m}"] = true - check["bound"]
        directions.update({f"mi_bound_M{m}": "higher", f"true_mi_M{m}": "higher", f"mi_gap_M{m}": "lower"})
    elapsed = time.time() - t0
    run = CellRun(request, True, dev, flags, None, context, curves=curves, wall_time=elapsed, pretrain_time=elapsed)
    record = record_of(run, Scores(
        metrics, directions=directions,
        fields={
            "parameters": n_params,
            # the pretraining budget of the cell: one network per M, each trained for `steps` steps of K
            # samples (M views each)
            "budget": {"optimizer_steps": steps * len(ms), "samples_seen": steps * len(ms) * k, "batch_size": k,
                       "micro_batch": None, "epochs": int(spec.pretrain.epochs)},
            "selection": {"rule": "none: no model selection (closed-form target, fresh evaluation batches)",
                          "metric": None, "best_epoch": -1, "val_metrics": None},
            "validity": bound_validity(objective, hp, checks),
            "mi_bound_checks": {f"M{m}": c for m, c in checks.items()},
        }))
    write_record(request.cell, record)
    return record
