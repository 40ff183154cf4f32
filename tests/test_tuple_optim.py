"""TupleInfoNCE sample optimisation (Algorithm 1): REINFORCE update, rewards (Eqs. 5, 8), the
cross-modal discrimination accuracies, determinism, best-candidate selection, resume and the runner."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

import fusebench
from fusebench import benchmarks, encoders, objectives
from fusebench.sweep import runner
from fusebench.runtime import utils
from fusebench.components import tuple_optim as T
from fusebench.spec.config import ConfigError, PretrainConfig
from fusebench.engine.pretrain import Pretrainer
from fusebench.components.tuple_method import TupleInfoNCEOptions
from fusebench.cells.execute import run_cell
from fusebench.spec.request import CellRequest, RunOptions

MODS = ["a", "b", "c"]


# ---------------------------------------------------------------------------------------------
# pure pieces, worked by hand
# ---------------------------------------------------------------------------------------------
def test_reinforce_update_hand_worked() -> None:
    # mu = (0.5, 0.2), std 0.5 (variance 0.25), eta = 0.1; x1 = (1.0, 0.2) with R = 3, x2 = (0.0, 0.7) with R = 1.
    # grad log p: (x1 - mu) / 0.25 = (2, 0), (x2 - mu) / 0.25 = (-2, 2).
    # baseline 2: advantages (1, -1): mean of (2, 0) - (-2, 2) = (4, -2) / 2 = (2, -1) -> mu + 0.1 (2, -1) = (0.7, 0.1).
    # no baseline (Eq. 7 as printed): (3 (2, 0) + 1 (-2, 2)) / 2 = (2, 1) -> (0.7, 0.3).
    mu = torch.tensor([0.5, 0.2])
    x = torch.tensor([[1.0, 0.2], [0.0, 0.7]])
    r = torch.tensor([3.0, 1.0])
    torch.testing.assert_close(T.reinforce_update(mu, x, r, 0.5, 0.1), torch.tensor([0.7, 0.1], dtype=torch.float64))
    torch.testing.assert_close(T.reinforce_update(mu, x, r, 0.5, 0.1, baseline=False),
                               torch.tensor([0.7, 0.3], dtype=torch.float64))
    # equal rewards with the baseline: no move
    torch.testing.assert_close(T.reinforce_update(mu, x, torch.tensor([2.0, 2.0]), 0.5, 0.1), mu.double())
    with pytest.raises(ValueError, match="sigma"):
        T.reinforce_update(mu, x, r, 0.0, 0.1)
    with pytest.raises(ValueError, match="samples"):
        T.reinforce_update(mu, x[:, :1], r, 0.5, 0.1)


def test_rewards_hand_worked() -> None:
    assert T.alpha_reward([1.0, 0.5, 0.25]) == pytest.approx(1.75)  # Eq. 5
    # Eq. 8: 1 - (1 + 0.5 + 0.25) / 3 - 2 * ((0.2-0.2)^2 + (0.4-0.1)^2 + (0.6-0.6)^2) / (3 * 1^2)
    #      = 1 - 0.583333 - 0.06 = 0.356667
    r = T.beta_reward([1.0, 0.5, 0.25], [0.2, 0.4, 0.6], [0.2, 0.1, 0.6], beta_max=1.0, lam=2.0)
    assert r == pytest.approx(1 - 1.75 / 3 - 0.06)
    # beta_max = 2 -> ||beta_max||^2 = 3 * 4 = 12: penalty 2 * 0.09 / 12 = 0.015
    assert T.beta_reward([1.0, 0.5, 0.25], [0.2, 0.4, 0.6], [0.2, 0.1, 0.6], 2.0, 2.0) == pytest.approx(1 - 1.75 / 3 - 0.015)
    with pytest.raises(ValueError, match="K = 3"):
        T.beta_reward([1.0, 0.5, 0.25], [0.2, 0.4], [0.2, 0.1, 0.6], 1.0, 1.0)


def test_alpha_relaxation_beta_clamp_and_best_zeta() -> None:
    assert T.relaxed_to_alpha([1.0, 1.0, -1.0, 2.0]) == pytest.approx([0.25, 0.25, 0.0, 0.5])
    assert T.relaxed_to_alpha([-1.0, -0.5, 0.0]) == pytest.approx([1 / 3] * 3)  # all clamped: uniform
    assert T.clamp_beta([-0.1, 0.3, 2.0], 1.0) == pytest.approx([0.0, 0.3, 1.0])
    acc = torch.tensor([[0.5, 0.2], [0.7, 0.2], [0.7, 0.1]])  # [G=3, K=2]
    assert T.best_zeta(acc, [0.0, 0.5, 1.0]) == [0.5, 0.0]  # ties -> the smaller zeta


def test_zeta_star_is_beta_unless_another_strength_is_strictly_better() -> None:
    # rows: zeta = beta = (0.35, 0.35, 0.35, 0.8), then the grid 0, 0.5, 1 for every modality. Modality 0: a plateau
    # (beta ties the grid) -> beta itself, penalty 0 (the smallest-zeta rule gave 0 and a penalty 0.35^2 from a tie);
    # modality 1: beta strictly best though off the grid -> beta; modality 2: zeta = 0 strictly better -> 0;
    # modality 3: a tie of 0.5 and 1.0 (beta = 0.8 scores less) -> the nearer to beta, 1.0.
    acc = torch.tensor([[0.5, 0.9, 0.6, 0.1],
                        [0.5, 0.7, 0.8, 0.2],
                        [0.5, 0.8, 0.6, 0.4],
                        [0.3, 0.6, 0.5, 0.4]])
    zetas = torch.tensor([[0.35, 0.35, 0.35, 0.8]] + [[g] * 4 for g in (0.0, 0.5, 1.0)])
    assert T.best_zeta(acc, zetas, [0.35, 0.35, 0.35, 0.8]) == pytest.approx([0.35, 0.35, 0.0, 1.0])
    # Eq. 8 with those: 1 - mean A(beta) - lambda ||beta - zeta*||^2 / (K beta_max^2) = 1 - 0.525 - (0.35^2 + 0.2^2) / 4
    r = T.beta_reward(acc[0], [0.35, 0.35, 0.35, 0.8], [0.35, 0.35, 0.0, 1.0], 1.0, 1.0)
    assert r == pytest.approx(1 - 2.1 / 4 - (0.35**2 + 0.2**2) / 4)
    with pytest.raises(ValueError, match="beta must have K = 4"):
        T.best_zeta(acc, zetas, [0.35])


# ---------------------------------------------------------------------------------------------
# cross-modal discrimination on hand-made embeddings
# ---------------------------------------------------------------------------------------------
class _FixedModel(nn.Module):
    def __init__(self, emb: torch.Tensor) -> None:
        super().__init__()
        self.emb = emb
        self.modalities = [f"m{i}" for i in range(emb.shape[0])]

    def embed(self, batch):
        return self.emb


class _SumFusionPre(nn.Module):
    """Identity projections, fusion = sum of the slots: g(v'^k) = e_k, g(v_bar^k) = sum_{l != k} e_l."""

    def __init__(self, emb: torch.Tensor) -> None:
        super().__init__()
        k, _, d = emb.shape
        self.model = _FixedModel(emb)
        self.proj = nn.ModuleDict({m: nn.Identity() for m in self.model.modalities})
        self.fusion = nn.Linear(k * d, d, bias=False)
        with torch.no_grad():
            self.fusion.weight.copy_(torch.cat([torch.eye(d)] * k, dim=1))

    def project(self, emb, heads):
        return torch.stack([heads[m](emb[l]) for l, m in enumerate(self.model.modalities)])


def test_discrimination_accuracies_hand_made() -> None:
    # K = 2, M = 4 tuples in 2-D. e0 = E, e1 = E with row 1 replaced by (1, 0).
    # A^0 (e0[n] must retrieve e1[n] by cosine, ties are misses): row 0 (1,0) ties rows 0 and 1 -> miss;
    #   row 1 (0,1): cosines (0, 0, 0, -1) -> miss; rows 2, 3 -> hits.  A^0 = 0.5.
    # A^1 (e1[n] must retrieve e0[n]): row 0 hit; row 1 (1,0) prefers e0[0] -> miss; rows 2, 3 hits.  A^1 = 0.75.
    e0 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    e1 = e0.clone()
    e1[1] = torch.tensor([1.0, 0.0])
    pre = _SumFusionPre(torch.stack([e0, e1]))
    acc = T.discrimination_accuracies(pre, {}, torch.zeros(1, 2), seed=0, dropout=0.0)
    torch.testing.assert_close(acc, torch.tensor([[0.5, 0.75]], dtype=torch.float64))
    # a huge augmentation on modality 1 only changes A^1: the rest v_bar^k is never augmented
    acc2 = T.discrimination_accuracies(pre, {}, torch.tensor([[0.0, 0.0], [0.0, 1e4]]), seed=0, dropout=0.0)
    assert acc2[1, 0] == 0.5 and acc2[0, 1] == 0.75


# ---------------------------------------------------------------------------------------------
# Algorithm 1 on a tiny Pretrainer
# ---------------------------------------------------------------------------------------------
def _cfg(**kw) -> PretrainConfig:
    opts = TupleInfoNCEOptions(sample_optimisation=True, candidates=3, candidate_steps=2, policy_lr=0.05,
                               policy_sigma=0.1, beta_sigma=0.1, zeta_grid=4)
    return PretrainConfig(objective="tuple_infonce", projection_dim=8, projection_hidden=16, lr=1e-2,
                          methods={"tuple_infonce": replace(opts, **kw)})


def _setup(seed: int = 0, **kw):
    torch.manual_seed(seed)
    model = encoders.build("mlp", modalities={m: 3 for m in MODS}, num_features=4, hidden=8)
    obj = objectives.build("tuple_infonce", tau=0.2)
    cfg = _cfg(**kw)
    pre = Pretrainer(model, obj, cfg)
    opt = torch.optim.AdamW(pre.student_parameters(), lr=cfg.lr)
    g = torch.Generator().manual_seed(123)
    shared = torch.randn(48, 3, generator=g)  # a factor every modality sees, plus modality noise

    def batch(rows):
        return {"names": MODS, "modalities": {m: shared[rows] + 0.3 * torch.randn(len(rows), 3, generator=g) for m in MODS}}

    train = [batch(list(range(i, i + 8))) for i in range(0, 32, 8)]
    val = batch(list(range(32, 48)))
    return pre, opt, T.TupleSampleOptimiser(pre, cfg.method_options("tuple_infonce"), seed), train, val


def _trajectory(seed: int) -> list[list[float]]:
    pre, opt, topt, train, val = _setup(seed)
    out = []
    for epoch in range(3):
        topt.epoch_update(opt, epoch, lambda: iter(train), val)
        out.append(topt.mu_alpha.tolist() + topt.mu_beta.tolist())
    return out


def test_same_seed_same_policy_trajectory() -> None:
    a, b = _trajectory(0), _trajectory(0)
    assert a == b
    assert a[0][4:] != pytest.approx([0.1, 0.1, 0.1])  # the beta epoch (t = 1) moved mu_beta
    assert _trajectory(1) != a


def test_epoch_update_keeps_best_candidate_and_applies_eq7() -> None:
    pre, opt, topt, train, val = _setup(0)
    mu_beta0 = topt.mu_beta.clone()
    start_model, start_opt, start_rng = copy.deepcopy(pre.state_dict()), copy.deepcopy(opt.state_dict()), utils.rng_state()
    curves: dict[str, list[float]] = {}
    log = topt.epoch_update(opt, 0, lambda: iter(train), val, curves)  # t = 1 (odd): beta
    assert log["updated"] == "beta"
    after = {k: v.clone() for k, v in pre.state_dict().items()}
    rewards = log["rewards"]
    best = max(range(len(rewards)), key=lambda i: (rewards[i], -i))
    assert log["best"] == best
    for c in log["candidates"]:  # Eq. 8 from the logged accuracies and zeta*
        pen = sum((b - z) ** 2 for b, z in zip(c["beta"], c["zeta_star"])) / (3 * 1.0**2)
        assert c["reward"] == pytest.approx(1 - sum(c["accuracies"]) / 3 - 1.0 * pen)
        assert c["alpha"] == pytest.approx([0.25] * 4)  # alpha is held at the policy mean in a beta epoch
    # Eq. 7 with the mean-reward baseline, written out
    x, rbar, sig = log["samples"], sum(rewards) / len(rewards), 0.1
    want = [mu_beta0[d].item() + 0.05 * sum((rewards[b] - rbar) * (x[b][d] - mu_beta0[d].item()) / sig**2
                                             for b in range(3)) / 3 for d in range(3)]
    assert topt.mu_beta.tolist() == pytest.approx(want)
    assert pre.tuple_beta == pytest.approx([min(max(v, 0.0), 1.0) for v in want])
    assert curves["tuple_beta_mu_a"] == [pytest.approx(want[0])] and curves["tuple_updated_alpha"] == [0.0]
    # the kept weights are those of the best candidate trained by hand from g_t
    pre.load_state_dict(start_model)
    opt.load_state_dict(copy.deepcopy(start_opt))
    utils.set_rng_state(start_rng)
    pre.tuple_beta = log["candidates"][best]["beta"]
    pre.train()
    for b in train[:2]:
        loss = pre(b)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for k, v in pre.state_dict().items():
        torch.testing.assert_close(v, after[k], msg=k)


def _slow_accuracy(pre, batch, j: int, zeta: float, eps: torch.Tensor, keep: torch.Tensor) -> float:
    """A^j (Eqs. 3-4) by loops: modality j alone, noised by zeta eps_j then dropped out by keep_j, in its slot of the
    fusion input with zeros in the others, must find its own rest (every other modality, unaugmented, zero in slot j)
    among the M by cosine, strictly."""
    with torch.no_grad():
        emb = pre.model.embed(batch).float()  # [K, M, F]
        k, m, _ = emb.shape
        mods = pre.model.modalities
        proj = [pre.proj[mods[l]] for l in range(k)]
        single_in = [proj[l](emb[l]) * 0 if l != j else proj[l]((emb[l] + zeta * eps[l]) * keep[l]) for l in range(k)]
        rest_in = [proj[l](emb[l]) if l != j else proj[l](emb[l]) * 0 for l in range(k)]
        single = pre.fusion(torch.cat(single_in, -1))
        rest = pre.fusion(torch.cat(rest_in, -1))
    hits = 0
    for n in range(m):
        cos = [float(torch.dot(single[n], rest[q]) / (single[n].norm() * rest[q].norm())) for q in range(m)]
        hits += all(cos[n] > cos[q] for q in range(m) if q != n)
    return hits / m


def test_beta_epoch_reward_is_equation_8_by_a_slow_implementation() -> None:
    """The kept candidate's R(beta) and zeta* recomputed from the trained weights by loops: A^k at zeta = beta and on
    the grid with the round's common noise and dropout mask (re-drawn from the optimiser's generator), zeta* the
    strength among beta_k and the grid with the highest A^k (ties: nearest beta_k), then Eq. 8."""
    pre, opt, topt, train, val = _setup(0, zeta_grid=11, val_size=16)
    gen = torch.Generator()
    gen.set_state(topt.generator.get_state())
    torch.randn((3, 3), generator=gen, dtype=torch.float64)  # the round's B = 3 policy samples
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))  # then its reward seed
    log = topt.epoch_update(opt, 0, lambda: iter(train), val)
    assert log["updated"] == "beta"
    best = log["candidates"][log["best"]]
    pre.eval()
    emb = pre.model.embed(val).float()
    g = torch.Generator().manual_seed(seed)
    eps = torch.randn(emb.shape, generator=g)
    keep = (torch.rand(emb.shape, generator=g) >= 0.1).float() / 0.9
    beta, grid = best["beta"], [i / 10 for i in range(11)]
    acc = [_slow_accuracy(pre, val, j, beta[j], eps, keep) for j in range(3)]
    zstar = []
    for j in range(3):
        scored = [(beta[j], acc[j])] + [(z, _slow_accuracy(pre, val, j, z, eps, keep)) for z in grid]
        top = max(a for _, a in scored)
        zstar.append(min((z for z, a in scored if a == top), key=lambda z: (abs(z - beta[j]), z)))
    assert best["accuracies"] == pytest.approx(acc)
    assert best["zeta_star"] == pytest.approx(zstar)
    assert any(z == b and b not in grid for z, b in zip(zstar, beta))  # zeta* = beta off the grid is exercised
    want = 1 - sum(acc) / 3 - sum((b - z) ** 2 for b, z in zip(beta, zstar)) / (3 * 1.0**2)
    assert best["reward"] == pytest.approx(want)


def test_state_dict_round_trip_and_bad_config() -> None:
    pre, opt, topt, train, val = _setup(0)
    topt.epoch_update(opt, 0, lambda: iter(train), val)
    state = copy.deepcopy(topt.state_dict())
    nxt = topt.epoch_update(opt, 1, lambda: iter(train), val)["samples"]
    topt2 = T.TupleSampleOptimiser(pre, topt.options, seed=99)
    topt2.load_state_dict(state)
    assert torch.equal(topt2.mu_beta, state["mu_beta"]) and pre.tuple_beta == topt2.beta()
    eps = torch.randn((3, 4), generator=topt2.generator, dtype=torch.float64)  # same draw as the next epoch
    torch.testing.assert_close(state["mu_alpha"] + 0.1 * eps, torch.tensor(nxt, dtype=torch.float64))
    with pytest.raises(ValueError, match="tuple_candidates"):
        _setup(0, candidates=0)
    # one candidate with the mean-reward baseline: its advantage R - mean R is 0, so Eq. 7 never moves mu (by hand:
    # the update with B = 1 is mu itself whatever the reward); refused, naming the key and why
    one = T.reinforce_update(torch.tensor([0.5, 0.2]), torch.tensor([[1.0, 0.2]]), torch.tensor([3.0]), 0.5, 0.1)
    assert one.tolist() == pytest.approx([0.5, 0.2])
    with pytest.raises(ValueError, match=r"pretrain.methods.tuple_infonce.candidates .*must be >= 2 with "
                                         r"policy_baseline: true, got 1"):
        _setup(0, candidates=1)
    pre1, opt1, topt1, train1, val1 = _setup(0, candidates=1, policy_baseline=False)  # Eq. 7 as printed: accepted
    mu0 = topt1.mu_beta.clone()
    log = topt1.epoch_update(opt1, 0, lambda: iter(train1), val1)
    want = [mu0[d].item() + 0.05 * log["rewards"][0] * (log["samples"][0][d] - mu0[d].item()) / 0.1**2 for d in range(3)]
    assert topt1.mu_beta.tolist() == pytest.approx(want)
    with pytest.raises(ValueError, match="tuple_disturbed"):
        _setup(0, disturbed=False)


# ---------------------------------------------------------------------------------------------
# the runner
# ---------------------------------------------------------------------------------------------
TINY = {"dataset.synthetic_spec": {"num_samples": 128, "seed": 0}, "pretrain.epochs": 2, "downstream.epochs": 1,
        "pretrain.methods.tuple_infonce.sample_optimisation": True}


def test_quickstart_with_sample_optimisation(tmp_path: Path) -> None:
    recs = fusebench.run("quickstart", objective="tuple_infonce", seeds=[0], out=tmp_path, progress=False, overrides=TINY)
    assert recs[0].get("status") != "failed", recs[0].get("error")
    rec = json.loads((tmp_path / "quickstart" / "tuple_infonce" / "seed0" / "run.json").read_text())
    c = rec["curves"]
    for key in ["tuple_alpha_mu_0", "tuple_alpha_mu_3", "tuple_beta_mu_weak", "tuple_reward_best"]:
        assert len(c[key]) == 2 and all(math.isfinite(v) for v in c[key])
    assert c["tuple_updated_alpha"] == [0.0, 1.0]  # Algorithm 1: t = 1 beta, t = 2 alpha
    assert c["tuple_beta_mu_weak"][0] != 0.1  # the beta epoch moved the policy off its start
    assert rec["config"]["pretrain"]["methods"]["tuple_infonce"]["sample_optimisation"] is True
    # the budget counts the candidates' steps: one epoch's worth per epoch in the kept encoder's history, B of
    # them in all (candidate_steps 0: a whole epoch each); the main loop's steps are the loss curve's length
    opts = rec["config"]["pretrain"]["methods"]["tuple_infonce"]
    b, main = opts.get("candidates", TupleInfoNCEOptions().candidates), len(c["pretrain_loss"])
    per_epoch = main // 2
    assert main == 2 * per_epoch and per_epoch >= 1
    budget = rec["budget"]
    assert budget["optimizer_steps"] == main + 2 * per_epoch
    assert budget["samples_seen"] == budget["optimizer_steps"] * budget["batch_size"]
    assert budget["candidate_steps"] == 2 * b * per_epoch


def test_the_validation_tuples_are_a_random_draw_and_never_the_test_split() -> None:
    """Algorithm 1 scores its candidates on "M random tuples t_m ~ p(t)" (Sec. 4.3.1): M samples drawn at random
    once per run (the same for every epoch), not the first M of the split in file order; its reward reads the
    validation split, so a spec whose validation split is its test split is refused with sample optimisation on."""
    from fusebench.cells.standard import val_tuples
    from fusebench.engine.data import build_datasets

    spec = benchmarks.load("quickstart", overrides=TINY, synthetic=True)
    val = build_datasets(spec, True, None, 0, roles=("val",))["val"]
    first = val_tuples(val, 8, 0)
    assert torch.equal(first["modalities"]["weak"], val_tuples(val, 8, 0)["modalities"]["weak"])  # fixed per run
    every = torch.stack([val[i]["modalities"]["weak"] for i in range(len(val))])
    # which validation samples were drawn: each row of the batch found among the split's rows
    hits = [int(((every - x).abs().sum(1) == 0).nonzero()[0]) for x in first["modalities"]["weak"]]
    assert len(set(hits)) == 8 and hits != list(range(8))  # 8 distinct samples, not the first 8 in file order
    with pytest.raises(ConfigError, match=r"dataset.val_split and dataset.test_split are both 'test': .*the per-epoch "
                                          r"step of tuple_infonce's runs \(TupleSampleOptimiser"):
        benchmarks.load("quickstart", overrides={**TINY, "dataset.val_split": "test", "downstream.epochs": 1})
    # without it nothing is chosen on validation with one downstream epoch: accepted
    plain = {k: v for k, v in TINY.items() if k != "pretrain.methods.tuple_infonce.sample_optimisation"}
    benchmarks.load("quickstart", overrides={**plain, "dataset.val_split": "test", "downstream.epochs": 1})


def test_resume_reproduces_policy(tmp_path: Path) -> None:
    over = {**TINY, "pretrain.epochs": 3, "pretrain.batch_size": 32, "checkpoint_every": 1,
            "pretrain.methods.tuple_infonce.candidates": 2, "pretrain.methods.tuple_infonce.candidate_steps": 2}
    spec = benchmarks.load("quickstart", overrides=over)
    ref = run_cell(CellRequest(spec, "tuple_infonce", 0, tmp_path / "a"), RunOptions(progress=False))
    with pytest.raises(KeyboardInterrupt):  # killed inside epoch 1, after the first policy update
        run_cell(CellRequest(spec, "tuple_infonce", 0, tmp_path / "b"), RunOptions(progress=False, max_steps=6))
    resumed = run_cell(CellRequest(spec, "tuple_infonce", 0, tmp_path / "b"), RunOptions(resume=True, progress=False))
    for key, curve in ref["curves"].items():
        if key.startswith(("tuple_", "pretrain_loss")):
            assert resumed["curves"][key] == curve, key
    assert resumed["metrics"] == ref["metrics"]
