"""TupleInfoNCE's candidate updates at precision 16-mixed (Algorithm 1, ``fusebench.components.tuple_optim``): every
candidate starts from the main loop's gradient scaler state, not a fresh scaler's (scale 65536, whose first steps a
float16 run skips as overflow), and the kept candidate's scaler state is what the main loop goes on with, as its
weights are. Worked by hand from GradScaler's documented rule: a step without overflow adds 1 to the growth tracker;
when the tracker reaches ``growth_interval`` the scale is multiplied by ``growth_factor`` and the tracker reset to 0."""

from __future__ import annotations

from dataclasses import replace

import torch

from fusebench import encoders, objectives
from fusebench.components import tuple_optim as T
from fusebench.components.tuple_method import TupleInfoNCEOptions
from fusebench.engine.pretrain import Pretrainer
from fusebench.spec.config import PretrainConfig

MODS = ["a", "b", "c"]


class RecordingScaler(torch.amp.GradScaler):
    """A CPU GradScaler that records the (scale, growth tracker) each loss is scaled with and the loss itself, and
    keeps the sum of the losses it scaled in its state (so that the candidates' end states differ)."""

    def __init__(self) -> None:
        super().__init__("cpu", init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=4)
        self.seen: list[tuple[float, int]] = []
        self.losses: list[float] = []
        self.loss_sum = 0.0

    def scale(self, outputs):  # type: ignore[override]
        state = super().state_dict()
        self.seen.append((state["scale"], state["_growth_tracker"]))
        self.losses.append(float(outputs.detach()))
        self.loss_sum += float(outputs.detach())
        return super().scale(outputs)

    def state_dict(self):  # type: ignore[override]
        return {**super().state_dict(), "loss_sum": self.loss_sum}

    def load_state_dict(self, state):  # type: ignore[override]
        state = dict(state)
        self.loss_sum = state.pop("loss_sum")
        super().load_state_dict(state)


def _setup(policy_seed: int = 4):
    torch.manual_seed(0)
    model = encoders.build("mlp", modalities={m: 3 for m in MODS}, num_features=4, hidden=8)
    opts = TupleInfoNCEOptions(sample_optimisation=True, candidates=3, candidate_steps=2, policy_lr=0.05,
                               policy_sigma=0.1, beta_sigma=0.3, zeta_grid=4)
    cfg = PretrainConfig(objective="tuple_infonce", projection_dim=8, projection_hidden=16, lr=1e-2,
                         methods={"tuple_infonce": replace(opts)})
    pre = Pretrainer(model, objectives.build("tuple_infonce", tau=0.2), cfg)
    opt = torch.optim.AdamW(pre.student_parameters(), lr=cfg.lr)
    g = torch.Generator().manual_seed(123)
    shared = torch.randn(48, 3, generator=g)

    def batch(rows):
        return {"names": MODS, "modalities": {m: shared[rows] + 0.3 * torch.randn(len(rows), 3, generator=g)
                                              for m in MODS}}

    train = [batch(list(range(i, i + 8))) for i in range(0, 32, 8)]
    return pre, opt, T.TupleSampleOptimiser(pre, cfg.method_options("tuple_infonce"), policy_seed), train, batch(list(range(32, 48)))


def test_candidates_start_from_the_main_scaler_and_the_kept_one_s_state_carries_on() -> None:
    pre, opt, topt, train, val = _setup()
    scaler = RecordingScaler()
    # the main loop's scaler after three steps without overflow: scale 2^10, growth tracker 3 (interval 4)
    for batch in train[:3]:
        pre.optimise(pre(batch), opt, scaler=scaler)
    assert scaler.seen == [(1024.0, 0), (1024.0, 1), (1024.0, 2)]
    before = scaler.state_dict()
    assert (before["scale"], before["_growth_tracker"]) == (1024.0, 3)
    warm_sum, warm_losses = before["loss_sum"], len(scaler.losses)

    log = topt.epoch_update(opt, 0, lambda: iter(train), val, scaler=scaler)  # t = 1: beta, 3 candidates x 2 steps

    # each candidate: its first step scaled by 2^10 with tracker 3 -> tracker 4 = the interval: scale 2^11, tracker
    # 0; its second step scaled by 2^11 -> tracker 1. (A fresh scaler: 65536 and tracker 0, then 1.)
    assert scaler.seen[3:] == [(1024.0, 3), (2048.0, 0)] * 3
    rewards = log["rewards"]
    best = max(range(3), key=lambda i: (rewards[i], -i))  # highest reward, ties to the lowest index
    assert log["best"] == best
    assert best != 2  # (the policy seed is chosen so: the kept candidate is not the last one trained)
    losses = scaler.losses[warm_losses:]  # candidate b's two losses: 2b, 2b + 1
    sums = [losses[2 * b] + losses[2 * b + 1] for b in range(3)]
    assert len({round(s, 12) for s in sums}) == 3  # the candidates' end states differ: the check below can tell
    after = scaler.state_dict()
    assert after["scale"] == 2048.0 and after["_growth_tracker"] == 1
    assert after["growth_interval"] == 4 and after["growth_factor"] == 2.0 and after["backoff_factor"] == 0.5
    assert after["loss_sum"] == warm_sum + losses[2 * best] + losses[2 * best + 1]  # the kept candidate's state
    # the main loop's next step goes on from it: scaled by 2^11, tracker 1
    pre.optimise(pre(train[3]), opt, scaler=scaler)
    assert scaler.seen[-1] == (2048.0, 1)


def test_without_a_scaler_the_candidates_train_unscaled_as_before() -> None:
    # None (precision 32, bf16-mixed): the same round as a call that does not name the scaler, bit for bit
    runs = []
    for kw in ({}, {"scaler": None}):
        pre, opt, topt, train, val = _setup()
        log = topt.epoch_update(opt, 0, lambda: iter(train), val, **kw)
        runs.append((log["rewards"], topt.mu_beta.tolist(), [v.clone() for v in pre.state_dict().values()]))
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][2], runs[1][2]))
