"""TupleInfoNCE sample optimisation (Liu et al. 2021, ICCV, Sec. 4.3, Eqs. 3-8, Algorithm 1).

A Gaussian policy over the hyper-parameters of the TupleInfoNCE objective is learned by REINFORCE
while the encoder trains, in a single training pass:

* alpha - the K + 1 ratios of the negative types (alpha_0 plain negatives, alpha_k k-disturbed
  negatives, Sec. 4.2). The constraint sum_k alpha_k = 1 is relaxed for the policy (Sec. 4.3.1): a
  sample x is used as ``alpha = max(x, 0) / sum(max(x, 0))`` (uniform when every entry is <= 0);
* beta - the K per-modality augmentation strengths (std of the Gaussian noise added to each
  modality's pooled embedding before fusion, see ``fusebench.engine.pretrain``). A sample is used
  clamped to [0, beta_max].

Each policy is N(mu, s^2 I) with a fixed std ``s`` (the paper writes N(mu, sigma I); we name the std).
At the end of pretraining epoch e (Algorithm 1's t = e + 1) the optimiser

1. samples B candidates x_1..x_B from the policy of this epoch's hyper-parameter - alpha when t is
   even, beta when t is odd (Algorithm 1) - with its own ``torch.Generator``;
2. trains a copy of the current student g_t (every weight of the Pretrainer and the optimizer state)
   for ``candidate_steps`` steps with each candidate, on the same batches and from the same
   global RNG state (common random numbers, so candidates differ only by their hyper-parameter);
3. scores each trained copy on a held-out validation batch of M tuples:
   R(alpha) = sum_k A^k(g, beta) (Eq. 5) and
   R(beta) = 1 - sum_k A^k(g, beta) / K - lambda ||beta - zeta*(beta)||^2 / ||beta_max||^2 (Eq. 8),
   where A^k(g, zeta) is the cross-modal discrimination accuracy (Eqs. 3-4) with the augmentation
   zeta applied to modality k, and zeta*(beta) = argmax_zeta sum_k A^k(g, zeta) over beta and a grid;
4. updates the policy mean by REINFORCE (Eq. 7), with grad_mu log N(x; mu, s^2 I) = (x - mu) / s^2:
   mu <- mu + eta / B sum_b (R_b - b) (x_b - mu) / s^2, b = mean_b R_b (or b = 0, the literal Eq. 7);
5. keeps the candidate with the highest reward as g_{t+1} (Algorithm 1: "Update g_{t+1} = g^i_{t+1}"),
   ties going to the lowest index; the main loop then trains the next epoch with the point estimate
   of the policies (alpha and beta from the updated means).

Cross-modal discrimination (Eqs. 3-4) on the fused encoder g = fusion(concat_l proj_l(e_l)): a
missing modality is a zero placeholder in its slot of the concatenation (the paper's "placeholder
values", supplement H). g(v'^k) has only slot k filled, with the embedding of modality k augmented by
zeta_k (noise zeta_k * eps then the training dropout, 0.1 by default, eps and the dropout mask drawn once per
round and reused for every zeta - common random numbers); g(v_bar^k) has every slot but k filled,
unaugmented. Since A^k only depends on zeta_k, the argmax zeta* of sum_k A^k separates per modality:
zeta*_k = argmax of A^k(g, zeta_k) over beta_k and the grid, ties to the one nearest beta_k (:func:`best_zeta`).

Shape:
    mu_alpha, x_alpha: [K + 1];  mu_beta, x_beta: [K];  samples: [B, D], rewards: [B] -> new mu [D];
    val embeddings e: [K, M, F] -> projections [K, M, P] -> fused [M, P];  accuracies: [G, K].
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from fusebench.runtime import distributed, progress, utils

__all__ = ["relaxed_to_alpha", "clamp_beta", "reinforce_update", "alpha_reward", "beta_reward", "best_zeta",
           "fuse_partial", "discrimination_accuracies", "TupleSampleOptimiser"]


def _steps(batches: Iterable[Any], limit: int) -> int | None:
    """The training steps of one candidate: ``limit`` batches (0: all of them), None when unknown."""
    try:
        n = len(batches)  # type: ignore[arg-type]
    except TypeError:
        return limit or None
    return min(n, limit) if limit else n


# ---------------------------------------------------------------------------------------------
# pure pieces
# ---------------------------------------------------------------------------------------------
def relaxed_to_alpha(x: Sequence[float] | Tensor) -> list[float]:
    """A relaxed policy sample [K + 1] -> mixture ratios: clamp at 0, renormalise to sum 1."""
    t = torch.as_tensor(x, dtype=torch.float64).flatten().clamp_min(0.0)
    if not torch.isfinite(t).all():
        raise ValueError(f"tuple sample optimisation: alpha sample must be finite, got {t.tolist()}")
    s = float(t.sum())
    if s <= 0.0:  # every ratio clamped away: fall back to the uniform mixture
        return [1.0 / t.numel()] * t.numel()
    return (t / s).tolist()


def clamp_beta(x: Sequence[float] | Tensor, beta_max: float) -> list[float]:
    """A beta policy sample [K] -> augmentation strengths in [0, beta_max]."""
    t = torch.as_tensor(x, dtype=torch.float64).flatten()
    if not torch.isfinite(t).all():
        raise ValueError(f"tuple sample optimisation: beta sample must be finite, got {t.tolist()}")
    return t.clamp(0.0, float(beta_max)).tolist()


def reinforce_update(mu: Tensor, samples: Tensor, rewards: Tensor, sigma: float, lr: float, baseline: bool = True) -> Tensor:
    """Eq. 7: mu + lr * mean_b (R_b - b) * grad_mu log N(x_b; mu, sigma^2 I).

    mu: [D]; samples: [B, D]; rewards: [B]; sigma: the policy std; b = mean_b R_b when ``baseline``
    else 0. Returns the new mean [D] (float64).
    """
    mu = torch.as_tensor(mu, dtype=torch.float64)
    x = torch.as_tensor(samples, dtype=torch.float64)
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if mu.dim() != 1 or x.dim() != 2 or x.shape[1] != mu.shape[0] or r.shape != (x.shape[0],):
        raise ValueError(f"reinforce_update: expected mu [D], samples [B, D], rewards [B]; got "
                         f"{tuple(mu.shape)}, {tuple(x.shape)}, {tuple(r.shape)}")
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"reinforce_update: sigma must be a finite std > 0, got {sigma!r}")
    if not torch.isfinite(r).all():
        raise ValueError(f"reinforce_update: rewards must be finite, got {r.tolist()}")
    adv = r - r.mean() if baseline else r  # [B]
    grad_logp = (x - mu) / sigma**2  # [B, D], d/dmu log N(x; mu, sigma^2 I)
    return mu + lr * torch.einsum("b,bd->d", adv, grad_logp) / x.shape[0]


def alpha_reward(accuracies: Sequence[float] | Tensor) -> float:
    """Eq. 5: R(alpha) = sum_k A^k."""
    return float(torch.as_tensor(accuracies, dtype=torch.float64).sum())


def beta_reward(accuracies: Sequence[float] | Tensor, beta: Sequence[float] | Tensor, zeta_star: Sequence[float] | Tensor,
                beta_max: float, lam: float) -> float:
    """Eq. 8: 1 - sum_k A^k(g, beta) / K - lam ||beta - zeta*||^2 / ||beta_max||^2.

    accuracies: [K], A^k measured with zeta = beta; beta, zeta_star: [K]; beta_max: the scalar upper
    bound of every modality's strength (so ||beta_max||^2 = K beta_max^2).
    """
    a = torch.as_tensor(accuracies, dtype=torch.float64).flatten()
    b = torch.as_tensor(beta, dtype=torch.float64).flatten()
    z = torch.as_tensor(zeta_star, dtype=torch.float64).flatten()
    k = a.numel()
    if b.numel() != k or z.numel() != k:
        raise ValueError(f"beta_reward: accuracies, beta and zeta_star must all have K = {k} entries")
    if not beta_max > 0:
        raise ValueError(f"beta_reward: beta_max must be > 0, got {beta_max!r}")
    return float(1.0 - a.sum() / k - lam * ((b - z) ** 2).sum() / (k * beta_max**2))


def best_zeta(acc: Tensor, zetas: Sequence[float] | Tensor, beta: Sequence[float] | Tensor | None = None) -> list[float]:
    """zeta*_k = argmax of A^k (acc [G, K]) over the strengths ``zetas`` ([G], or [G, K]: row g gives modality k
    zetas[g, k]); ties: the one nearest ``beta_k`` ([K]), then the smaller (without beta: the smallest). With beta
    among the rows, zeta* = beta unless another strength scores strictly higher (module docstring)."""
    a, z = torch.as_tensor(acc, dtype=torch.float64), torch.as_tensor(zetas, dtype=torch.float64)
    z = z.view(-1, 1).expand_as(a) if z.dim() == 1 and a.dim() == 2 and len(z) == len(a) else z
    if a.dim() != 2 or z.shape != a.shape:
        raise ValueError(f"best_zeta: acc must be [G, K], zetas [G] or [G, K]; got {tuple(a.shape)}, {tuple(z.shape)}")
    b = None if beta is None else torch.as_tensor(beta, dtype=torch.float64).flatten()
    if b is not None and b.numel() != a.shape[1]:
        raise ValueError(f"best_zeta: beta must have K = {a.shape[1]} entries, got {b.numel()}")
    tied = [[float(z[i, k]) for i in torch.nonzero(a[:, k] == a[:, k].max()).flatten().tolist()] for k in range(a.shape[1])]
    return [min(t, key=lambda v: (abs(v - float(b[k])), v)) if b is not None else min(t) for k, t in enumerate(tied)]


# ---------------------------------------------------------------------------------------------
# cross-modal discrimination on the Pretrainer's fused encoder
# ---------------------------------------------------------------------------------------------
def fuse_partial(pre: nn.Module, z: Tensor, keep: Sequence[bool]) -> Tensor:
    """Fused embedding with the modalities not in ``keep`` replaced by zero placeholders.

    z: [K, M, P] per-modality projections; keep: K booleans -> [M, P].
    """
    slots = [z[l] if keep[l] else torch.zeros_like(z[l]) for l in range(z.shape[0])]
    return pre.fusion(torch.cat(slots, dim=-1))


@torch.no_grad()
def discrimination_accuracies(pre: nn.Module, batch: dict[str, Any], zetas: Tensor, seed: int, dropout: float = 0.1) -> Tensor:
    """A^k(g, zeta) (Eqs. 3-4) for each row of ``zetas`` [G, K] -> [G, K].

    The augmentation of modality k is ``(e_k + zeta_k * eps_k) * mask_k`` (the training augmentation:
    Gaussian noise, then dropout with probability ``dropout``); eps [K, M, F] and the dropout mask are
    drawn once from a generator seeded with ``seed`` and reused for every row (common random numbers).
    The G x K accuracies stay on the device until one copy at the end (with the test that every embedding
    was finite): no wait for the device per accuracy.
    """
    from fusebench.objectives.tuple_infonce import discrimination_hits

    was_training = pre.training
    pre.eval()
    try:
        emb = pre.model.embed(batch).float()  # [K, M, F]
        k = emb.shape[0]
        if zetas.dim() != 2 or zetas.shape[1] != k:
            raise ValueError(f"discrimination_accuracies: zetas must be [G, K={k}], got {tuple(zetas.shape)}")
        if emb.shape[1] < 2:
            raise ValueError("cross_modal_discrimination_accuracy: needs M >= 2 validation tuples")
        gen = torch.Generator().manual_seed(int(seed))
        eps = torch.randn(emb.shape, generator=gen, dtype=emb.dtype).to(emb.device)  # [K, M, F]
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"discrimination_accuracies: dropout must be in [0, 1), got {dropout!r}")
        keep_mask = (torch.rand(emb.shape, generator=gen) >= dropout).to(emb.device, emb.dtype) / (1.0 - dropout)
        z = pre.project(emb, pre.proj).float()  # [K, M, P], unaugmented
        rests = [fuse_partial(pre, z, [l != j for l in range(k)]) for j in range(k)]  # g(v_bar^j): [M, P]
        zeta = zetas.to(emb)  # [G, K]: one copy of the grid, the values zetas[gi].to(emb) gives row by row
        hits, finite = [], [torch.isfinite(r).all() for r in rests]
        for gi in range(zetas.shape[0]):
            aug = (emb + zeta[gi].view(k, 1, 1) * eps) * keep_mask  # [K, M, F]
            za = pre.project(aug, pre.proj).float()
            for j in range(k):
                single = fuse_partial(pre, za, [l == j for l in range(k)])  # g(v'^j): [M, P]
                hits.append(discrimination_hits(single, rests[j]))
                finite.append(torch.isfinite(single).all())
        if not hits:
            return torch.zeros(zetas.shape, dtype=torch.float64)
        values = torch.cat([torch.stack(hits), torch.stack(finite).all().double().view(1)]).tolist()  # the one copy
        if values[-1] != 1.0:
            raise ValueError("cross_modal_discrimination_accuracy: embeddings contain NaN or Inf")
        return torch.tensor(values[:-1], dtype=torch.float64).view(zetas.shape)  # on the host, as before
    finally:
        pre.train(was_training)


# ---------------------------------------------------------------------------------------------
# the optimiser (Algorithm 1)
# ---------------------------------------------------------------------------------------------
class TupleSampleOptimiser:
    """Algorithm 1 of the TupleInfoNCE paper attached to a ``Pretrainer`` (tuple kind): the epoch
    extension of the ``tuple_infonce`` pretraining method (:mod:`fusebench.components.tuple_method`),
    configured by its options (``TupleInfoNCEOptions``, ``pretrain.methods.tuple_infonce``).

    ``epoch_update`` runs once per pretraining epoch; ``state_dict``/``load_state_dict`` hold the
    policies (means, stds) and the sampling generator so that ``--resume`` reproduces the run.
    """

    #: the key of its state in last.pt
    state_key = "tuple_policy"

    @staticmethod
    def enabled(options: Any) -> bool:
        """Whether the method's options ask for it (``pretrain.methods.tuple_infonce.sample_optimisation``)."""
        return bool(options.sample_optimisation)

    @staticmethod
    def val_batch_size(options: Any) -> int:
        """The size of the held-out validation batch passed to :meth:`epoch_update` (M of Eq. 3)."""
        return int(options.val_size)

    def __init__(self, pre: nn.Module, options: Any, seed: int) -> None:
        key = "pretrain.methods.tuple_infonce."
        if getattr(pre, "kind", None) != "tuple":
            raise ValueError(f"{key}sample_optimisation applies to the tuple_infonce objective only")
        if not options.disturbed:
            raise ValueError(f"{key}sample_optimisation needs {key}disturbed: true (formerly pretrain.tuple_disturbed; "
                             "alpha weighs the k-disturbed negatives)")
        checks = [
            ("candidates", options.candidates >= 1, ">= 1"),
            # one candidate is its own mean-reward baseline: advantage 0, Eq. 7 would never move the policy
            ("candidates", options.candidates >= 2 or not options.policy_baseline, ">= 2 with policy_baseline: true"),
            ("candidate_steps", options.candidate_steps >= 0, ">= 0 (0 = a whole epoch)"),
            ("policy_lr", options.policy_lr >= 0, ">= 0"),
            ("policy_sigma", options.policy_sigma > 0, "> 0"),
            ("beta_sigma", options.beta_sigma > 0, "> 0"),
            ("beta_max", options.beta_max > 0, "> 0"),
            ("beta_lambda", options.beta_lambda >= 0, ">= 0"),
            ("zeta_grid", options.zeta_grid >= 2, ">= 2"),
            ("val_size", options.val_size >= 2, ">= 2"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"{key}{name} (formerly pretrain.tuple_{name}) must be {want}, "
                                 f"got {getattr(options, name)!r}")
        self.pre = pre
        self.options = options
        self.modalities = list(pre.model.modalities)
        k = len(self.modalities)
        a0 = relaxed_to_alpha(options.alpha if options.alpha else [1.0] * (k + 1))
        if len(a0) != k + 1:
            raise ValueError(f"{key}alpha needs k + 1 = {k + 1} weights (plain, then one per modality)")
        self.mu_alpha = torch.tensor(a0, dtype=torch.float64)  # [K + 1], normalised initial ratios
        self.mu_beta = torch.tensor(clamp_beta([options.embedding_noise] * k, options.beta_max), dtype=torch.float64)  # [K]
        self.generator = torch.Generator().manual_seed(int(seed) * 7_919 + 17)
        #: optimiser steps of the candidates: those in the kept candidates' history (the encoder the run goes on
        #: with), and all B x steps run (the compute); the run's budget adds them to its own steps
        self.kept_steps, self.candidate_steps_run = 0, 0
        self.apply()

    # -- policy point estimates ------------------------------------------------------------------
    def alpha(self) -> list[float]:
        return relaxed_to_alpha(self.mu_alpha)

    def beta(self) -> list[float]:
        return clamp_beta(self.mu_beta, self.options.beta_max)

    def apply(self) -> None:
        """Make the Pretrainer train with the point estimates of the policies."""
        self.pre.tuple_alpha = self.alpha()
        self.pre.tuple_beta = self.beta()

    # -- checkpointing -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"mu_alpha": self.mu_alpha.clone(), "mu_beta": self.mu_beta.clone(),
                "sigma_alpha": float(self.options.policy_sigma), "sigma_beta": float(self.options.beta_sigma),
                "generator": self.generator.get_state(), "kept_steps": self.kept_steps,
                "candidate_steps_run": self.candidate_steps_run}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("mu_alpha", "mu_beta", "generator"):
            if key not in state:
                raise ValueError(f"tuple sample optimisation: checkpoint state lacks {key!r}")
        if state["mu_alpha"].shape != self.mu_alpha.shape or state["mu_beta"].shape != self.mu_beta.shape:
            raise ValueError("tuple sample optimisation: checkpoint policy has the wrong number of modalities")
        self.mu_alpha = state["mu_alpha"].to(torch.float64).clone()
        self.mu_beta = state["mu_beta"].to(torch.float64).clone()
        self.generator.set_state(state["generator"])
        # (a checkpoint from before the steps were counted: counted from here on)
        self.kept_steps = int(state.get("kept_steps", 0))
        self.candidate_steps_run = int(state.get("candidate_steps_run", 0))
        self.apply()

    def budget(self) -> dict[str, int]:
        """What the candidates add to the run's pretraining budget: ``kept_steps``, the optimiser steps in the
        history of the encoder the run goes on with (one candidate's per epoch), and ``candidate_steps``, all the
        candidates' steps (B per epoch: the compute)."""
        return {"kept_steps": self.kept_steps, "candidate_steps": self.candidate_steps_run}

    # -- one epoch of Algorithm 1 ----------------------------------------------------------------
    def epoch_update(
        self,
        opt: torch.optim.Optimizer,
        epoch: int,
        train_batches: Callable[[], Iterable[dict[str, Any]]],
        val_batch: dict[str, Any],
        curves: dict[str, list[float]] | None = None,
        autocast: Any = None,
    ) -> dict[str, Any]:
        """Algorithm 1 at t = epoch + 1: sample, train B candidates, score, update mu, keep the best.

        ``train_batches()`` yields the candidates' training batches (the same for every candidate);
        ``val_batch`` is the held-out batch of M tuples. Appends the policy means and the rewards to
        ``curves``. Returns a log of the round.
        """
        opts, pre = self.options, self.pre
        dev = next(pre.parameters()).device
        which = "alpha" if (epoch + 1) % 2 == 0 else "beta"
        mu = self.mu_alpha if which == "alpha" else self.mu_beta
        sigma = opts.policy_sigma if which == "alpha" else opts.beta_sigma
        bsz = opts.candidates
        eps = torch.randn((bsz, mu.numel()), generator=self.generator, dtype=torch.float64)
        samples = mu + sigma * eps  # [B, D]
        reward_seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        val_batch = utils.to_device(val_batch, dev)
        k = len(self.modalities)
        grid = torch.linspace(0.0, opts.beta_max, opts.zeta_grid, dtype=torch.float64)  # [G]

        start_model = copy.deepcopy(pre.state_dict())
        start_opt = copy.deepcopy(opt.state_dict())
        start_rng = utils.rng_state()
        base_alpha, base_beta = self.alpha(), self.beta()
        rewards: list[float] = []
        details: list[dict[str, Any]] = []
        best: tuple[float, dict, dict, int] | None = None
        bar = None  # progress over the candidates' training steps (a bar, or log lines off a terminal)
        for b in range(bsz):
            pre.load_state_dict(start_model)
            opt.load_state_dict(copy.deepcopy(start_opt))  # load_state_dict may alias the tensors
            utils.set_rng_state(start_rng)  # common random numbers across candidates
            pre.tuple_alpha = relaxed_to_alpha(samples[b]) if which == "alpha" else base_alpha
            pre.tuple_beta = clamp_beta(samples[b], opts.beta_max) if which == "beta" else base_beta
            batches = train_batches()
            if bar is None:
                per = _steps(batches, opts.candidate_steps)
                bar = progress.cell_bar(bsz * per if per else None, f"tuple candidates (epoch {epoch}, {which})")
            bar.set_postfix(refresh=False, candidate=f"{b + 1}/{bsz}",
                            **({"best_reward": f"{max(rewards):.4f}"} if rewards else {}))
            trained = self._train(opt, batches, epoch, b, autocast, bar)
            self.candidate_steps_run += trained
            beta = torch.tensor(pre.tuple_beta, dtype=torch.float64)
            if which == "alpha":  # Eq. 5 with zeta = beta
                acc = discrimination_accuracies(pre, val_batch, beta.view(1, k), reward_seed, opts.dropout)[0]
                r = alpha_reward(acc)
                info = {"accuracies": acc.tolist()}
            else:  # Eq. 8: accuracies at zeta = beta, plus zeta* over the grid
                zetas = torch.cat([beta.view(1, k), grid.view(-1, 1).expand(-1, k)])  # [1 + G, K]: beta, then the grid
                acc_all = discrimination_accuracies(pre, val_batch, zetas, reward_seed, opts.dropout)
                acc = acc_all[0]
                zstar = best_zeta(acc_all, zetas, beta)  # over beta and the grid; ties: the one nearest beta
                r = beta_reward(acc, beta, zstar, opts.beta_max, opts.beta_lambda)
                info = {"accuracies": acc.tolist(), "zeta_star": zstar}
            rewards.append(r)
            details.append({"alpha": list(pre.tuple_alpha), "beta": list(pre.tuple_beta), "reward": r, **info})
            if best is None or r > best[0]:  # ties: the lowest index
                best = (r, copy.deepcopy(pre.state_dict()), copy.deepcopy(opt.state_dict()), trained)
        if best is None or bar is None:  # pragma: no cover - bsz >= 1 is checked in __init__
            raise RuntimeError("tuple sample optimisation: no candidate was trained")
        bar.set_postfix(refresh=False, candidate=f"{bsz}/{bsz}", best_reward=f"{max(rewards):.4f}")
        bar.close()
        pre.load_state_dict(best[1])
        opt.load_state_dict(best[2])
        self.kept_steps += best[3]
        new_mu = reinforce_update(mu, samples, torch.tensor(rewards), sigma, opts.policy_lr, opts.policy_baseline)
        if which == "alpha":
            self.mu_alpha = new_mu
        else:
            self.mu_beta = new_mu
        self.apply()
        pre.train()
        if curves is not None:
            for j, v in enumerate(self.mu_alpha.tolist()):
                curves.setdefault(f"tuple_alpha_mu_{j}", []).append(v)
            for m, v in zip(self.modalities, self.mu_beta.tolist()):
                curves.setdefault(f"tuple_beta_mu_{m}", []).append(v)
            curves.setdefault("tuple_updated_alpha", []).append(1.0 if which == "alpha" else 0.0)
            curves.setdefault("tuple_reward_best", []).append(max(rewards))
            curves.setdefault("tuple_reward_mean", []).append(sum(rewards) / len(rewards))
        return {"epoch": epoch, "updated": which, "samples": samples.tolist(), "rewards": rewards,
                "best": rewards.index(max(rewards)), "candidates": details, "mu": new_mu.tolist()}

    def _train(self, opt: torch.optim.Optimizer, batches: Iterable[dict[str, Any]], epoch: int, cand: int, autocast: Any,
               bar: Any = None) -> None:
        """Train the Pretrainer in place for ``candidate_steps`` steps (0: all the batches); ``bar``
        (:mod:`fusebench.runtime.progress`) counts the steps. Returns the number of optimiser steps taken."""
        pre = self.pre
        pre.train()
        dev = next(pre.parameters()).device
        limit = self.options.candidate_steps
        from fusebench.spec.precision import scaler_for

        scaler = scaler_for(autocast)  # precision 16-mixed: scaled losses, as in the main loop
        taken = 0
        unread: list[tuple[int, Tensor]] = []  # as in the main loop: no step waits for the device

        def check() -> None:  # the losses read in one copy; a non-finite one stops the cell, naming its step
            for (at, _), value in zip(unread, utils.read_losses([v for _, v in unread])):
                if not math.isfinite(value):
                    raise RuntimeError(f"tuple_infonce sample optimisation: loss {value} at candidate {cand} step "
                                       f"{at} (epoch {epoch}, alpha={pre.tuple_alpha}, beta={pre.tuple_beta})")
            unread.clear()

        host = getattr(pre, "host_batch", lambda b: b)  # the presence mask checked on the host, before the copy
        for step, batch in enumerate(batches):
            if limit and step >= limit:
                break
            batch = utils.to_device(host(batch), dev)
            with utils.deferred_value_checks():  # the input scans the loop checks on the host instead
                if autocast is not None:
                    with autocast:
                        loss = pre(batch, gather=distributed.gather_with_grad)
                else:
                    loss = pre(batch, gather=distributed.gather_with_grad)
                pre.optimise(loss, opt, scaler=scaler)
            unread.append((step, loss.detach()))
            if len(unread) >= utils.LOSS_READ_EVERY:
                check()
            taken += 1
            if bar is not None:
                bar.update(1)
        check()
        return taken
