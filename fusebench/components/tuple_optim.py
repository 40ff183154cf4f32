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
2. trains a copy of the current student g_t (every weight of the Pretrainer, the optimizer state and, at
   precision ``16-mixed``, the main loop's gradient scaler state) for ``candidate_steps`` steps with each
   candidate, on the same batches and from the same global RNG state (common random numbers, so candidates
   differ only by their hyper-parameter);
3. scores each trained copy on a held-out validation batch of M tuples:
   R(alpha) = sum_k A^k(g, beta) (Eq. 5) and
   R(beta) = 1 - sum_k A^k(g, beta) / K - lambda ||beta - zeta*(beta)||^2 / ||beta_max||^2 (Eq. 8),
   where A^k(g, zeta) is the cross-modal discrimination accuracy (Eqs. 3-4) with the augmentation
   zeta applied to modality k, and zeta*(beta) = argmax_zeta sum_k A^k(g, zeta) over beta and a grid;
4. updates the policy mean by REINFORCE (Eq. 7), with grad_mu log N(x; mu, s^2 I) = (x - mu) / s^2:
   mu <- mu + eta / B sum_b (R_b - b) (x_b - mu) / s^2, b = mean_b R_b (or b = 0, the literal Eq. 7);
5. keeps the candidate with the highest reward as g_{t+1} (Algorithm 1: "Update g_{t+1} = g^i_{t+1}"),
   ties going to the lowest index, with its optimizer and gradient scaler states; the main loop then trains
   the next epoch with the point estimate of the policies (alpha and beta from the updated means).

Cross-modal discrimination (Eqs. 3-4) on the fused encoder g = fusion(concat_l proj_l(e_l)): a
missing modality is a zero placeholder in its slot of the concatenation (the paper's "placeholder
values", supplement H). g(v'^k) has only slot k filled, with the embedding of modality k augmented by
zeta_k (noise zeta_k * eps then the training dropout, 0.1 by default, eps and the dropout mask drawn once per
round and reused for every zeta - common random numbers); g(v_bar^k) has every slot but k filled,
unaugmented. Since A^k only depends on zeta_k, the argmax zeta* of sum_k A^k separates per modality:
zeta*_k = argmax of A^k(g, zeta_k) over beta_k and the grid, ties to the one nearest beta_k (:func:`best_zeta`).

The pure pieces (Eqs. 5, 7, 8, zeta*) and the accuracies (Eqs. 3-4) are in
:mod:`fusebench.components.tuple_rewards`, whose names this module re-exports.

Shape:
    mu_alpha, x_alpha: [K + 1];  mu_beta, x_beta: [K];  samples: [B, D], rewards: [B] -> new mu [D];
    val embeddings e: [K, M, F] -> projections [K, M, P] -> fused [M, P];  accuracies: [G, K].
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

from fusebench.components.tuple_rewards import (alpha_reward, best_zeta, beta_reward, clamp_beta,
                                                discrimination_accuracies, fuse_partial, reinforce_update,
                                                relaxed_to_alpha)
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
        scaler: Any = None,
    ) -> dict[str, Any]:
        """Algorithm 1 at t = epoch + 1: sample, train B candidates, score, update mu, keep the best.

        ``train_batches()`` yields the candidates' training batches (the same for every candidate);
        ``val_batch`` is the held-out batch of M tuples. Appends the policy means and the rewards to
        ``curves``. Returns a log of the round. ``autocast``: the phase's autocast context; ``scaler``: the main
        loop's gradient scaler (precision ``16-mixed``; None: no loss scaling): every candidate starts from its
        state (``state_dict``), as from the weights and the optimizer state, and the kept candidate's scaler state
        is loaded back into it, so the main loop goes on with the scale that candidate found.
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
        start_scaler = copy.deepcopy(scaler.state_dict()) if scaler is not None else None
        start_rng = utils.rng_state()
        base_alpha, base_beta = self.alpha(), self.beta()
        rewards: list[float] = []
        details: list[dict[str, Any]] = []
        best: tuple[float, dict, dict, int, dict | None] | None = None
        bar = None  # progress over the candidates' training steps (a bar, or log lines off a terminal)
        for b in range(bsz):
            pre.load_state_dict(start_model)
            opt.load_state_dict(copy.deepcopy(start_opt))  # load_state_dict may alias the tensors
            if scaler is not None:  # 16-mixed: the main loop's scale, not a fresh scaler's 65536
                scaler.load_state_dict(copy.deepcopy(start_scaler))
            utils.set_rng_state(start_rng)  # common random numbers across candidates
            pre.tuple_alpha = relaxed_to_alpha(samples[b]) if which == "alpha" else base_alpha
            pre.tuple_beta = clamp_beta(samples[b], opts.beta_max) if which == "beta" else base_beta
            batches = train_batches()
            if bar is None:
                per = _steps(batches, opts.candidate_steps)
                bar = progress.cell_bar(bsz * per if per else None, f"tuple candidates (epoch {epoch}, {which})")
            bar.set_postfix(refresh=False, candidate=f"{b + 1}/{bsz}",
                            **({"best_reward": f"{max(rewards):.4f}"} if rewards else {}))
            trained = self._train(opt, batches, epoch, b, autocast, scaler, bar)
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
                best = (r, copy.deepcopy(pre.state_dict()), copy.deepcopy(opt.state_dict()), trained,
                        copy.deepcopy(scaler.state_dict()) if scaler is not None else None)
        if best is None or bar is None:  # pragma: no cover - bsz >= 1 is checked in __init__
            raise RuntimeError("tuple sample optimisation: no candidate was trained")
        bar.set_postfix(refresh=False, candidate=f"{bsz}/{bsz}", best_reward=f"{max(rewards):.4f}")
        bar.close()
        pre.load_state_dict(best[1])
        opt.load_state_dict(best[2])
        if scaler is not None:
            scaler.load_state_dict(best[4])
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
               scaler: Any = None, bar: Any = None) -> int:
        """Train the Pretrainer in place for ``candidate_steps`` steps (0: all the batches), the losses scaled by
        ``scaler`` (None: unscaled) as in the main loop; ``bar`` (:mod:`fusebench.runtime.progress`) counts the
        steps. Returns the number of optimiser steps taken."""
        pre = self.pre
        pre.train()
        dev = next(pre.parameters()).device
        limit = self.options.candidate_steps
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
