"""Tests of the ESANet, sequence-transformer and EEG-conv encoders, the shared heads, the feature
extractors and ``fusebench bench encoders``. Expected values are worked out in the tests."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fusebench.encoders import available, build
from fusebench.encoders.base import MultimodalModel, count_parameters
from fusebench.encoders.eeg_conv import EEGConvEncoder
from fusebench.encoders.mlp import MLPEncoder
from fusebench.encoders.esanet import (ESANet, LearnedUpsample, NonBottleneck1D, ResNetNBt1D,
                                       SqueezeExcitation)
from fusebench.encoders.heads import EMATeacher, MultiViewHead, ProjectionHead, cosine_momentum
from fusebench.encoders.seq_transformer import SeqTransformer
from fusebench.components.model import for_backbone


@pytest.fixture(autouse=True, scope="module")
def _no_onednn_one_thread():
    """oneDNN compiles a kernel per new conv shape on first use (seconds each on a loaded 2-core
    machine); the reference ATen kernels keep this file fast. One intra-op thread: these models are
    tiny, and two threads spin-waiting for a busy core of a shared machine are many times slower.
    Both restored after the module."""
    previous, threads = torch.backends.mkldnn.enabled, torch.get_num_threads()
    torch.backends.mkldnn.enabled = False
    torch.set_num_threads(1)
    yield
    torch.backends.mkldnn.enabled = previous
    torch.set_num_threads(threads)


def _batch(mods, target, masks=None, present=None):
    names = list(mods)
    n = next(iter(mods.values())).shape[0]
    return {"names": names, "modalities": mods, "masks": masks or {},
            "present": present if present is not None else torch.ones(len(names), n, dtype=torch.bool),
            "target": target, "extra_targets": {}, "meta": [{} for _ in range(n)]}


def esanet_case():
    g = torch.Generator().manual_seed(0)
    model = for_backbone(ESANet(modalities=["rgb", "depth", "normal"], size="tiny", num_classes=4))
    # depth ramps (left-right in sample 0, top-bottom in sample 1); labels = 4 depth bands, void border
    ramp = torch.linspace(0.0, 4.0, 32)
    depth = torch.stack([ramp.expand(32, 32), ramp[:, None].expand(32, 32)])[:, None]
    target = (depth[:, 0] // 1.0).clamp(max=3).long()
    target[:, 0, :] = -1
    batch = _batch({"rgb": torch.rand(2, 3, 32, 32, generator=g), "depth": depth,
                    "normal": F.normalize(torch.randn(2, 3, 32, 32, generator=g), dim=1)}, target)
    return model, batch, (2, 4, 32, 32), (3, 2, 64)


def seq_case():
    g = torch.Generator().manual_seed(0)
    dims = {"text": 12, "audio": 5, "vision": 7}
    model = for_backbone(SeqTransformer(modalities=dims, size="tiny", dropout=0.0))
    lengths = {"text": [6, 3, 4], "audio": [2, 6, 5], "vision": [6, 6, 1]}
    mods, masks = {}, {}
    for m, d in dims.items():
        mask = torch.arange(6)[None, :] < torch.tensor(lengths[m])[:, None]
        mods[m] = torch.randn(3, 6, d, generator=g) * mask[..., None]
        masks[m] = mask
    return model, _batch(mods, torch.tensor([-2.0, 0.5, 1.8]), masks), (3,), (3, 3, 16)


def eeg_case():
    g = torch.Generator().manual_seed(0)
    names = ["fpz", "pz", "eog"]
    model = for_backbone(EEGConvEncoder(modalities=names, size="tiny", num_classes=5, dropout=0.0))
    batch = _batch({m: torch.randn(4, 1, 300, generator=g) for m in names}, torch.tensor([0, 1, 4, 2]))
    return model, batch, (4, 5), (3, 4, 8)


def mlp_case():
    g = torch.Generator().manual_seed(0)
    dims = {"a": 5, "b": 6, "c": 7}
    model = for_backbone(MLPEncoder(dims, num_features=8, hidden=16, num_classes=4))
    batch = _batch({m: torch.randn(8, d, generator=g) for m, d in dims.items()}, torch.randint(0, 4, (8,), generator=g))
    return model, batch, (8, 4), (3, 8, 8)


CASES = {"esanet": esanet_case, "seq_transformer": seq_case, "eeg_conv": eeg_case, "mlp": mlp_case}


def test_registered():
    for name in CASES:
        assert name in available()
    assert isinstance(build("eeg_conv", size="tiny"), EEGConvEncoder)


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_backward_shapes(name):
    model, batch, out_shape, emb_shape = CASES[name]()
    assert isinstance(model, MultimodalModel)
    out = model(batch)
    assert tuple(out.shape) == out_shape
    assert tuple(model.embed(batch).shape) == emb_shape == (len(model.modalities), emb_shape[1], model.num_features)
    loss = model.task_loss(out, batch)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    pred = model.predict(out, batch)
    assert pred.shape[0] == out_shape[0]
    head = {id(p) for p in model.head_parameters()}
    enc = {id(p) for p in model.encoder_parameters()}
    assert head and enc and not head & enc and len(head | enc) == len(list(model.parameters()))


#: the output layer of each model, a step size and the loss ratio that 12 SGD steps on it must reach
#: (measured with 1 and 2 threads: esanet 0.50, mlp 0.31, eeg_conv 0.82, seq_transformer 0.74)
LAST_LAYER = {
    "esanet": (lambda m: m.head.conv_out, 0.1, 0.7, True),
    "mlp": (lambda m: m.head, 3.0, 0.5, True),
    "eeg_conv": (lambda m: m.head.classifier, 5.0, 0.9, True),
    "seq_transformer": (lambda m: m.head[-1], 0.3, 0.85, False),  # L1: non-smooth, steps may overshoot a kink
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_head_trains(name):
    """Gradient descent on the output layer alone (the rest fixed, no dropout) lowers the task loss.

    The outputs are linear in that layer's weights (ESANet's learned upsampling after ``conv_out`` is
    linear too) and cross entropy / L1 are convex in the outputs, so the loss is convex in the trained
    weights: for the smooth cross entropies small steps lower it at every step, and a gradient step on a
    convex function does not amplify rounding differences (unlike training the whole network, whose
    outcome after a few steps can move with the float reduction order)."""
    torch.manual_seed(0)
    model, batch, _, _ = CASES[name]()
    layer, lr, ratio, monotone = LAST_LAYER[name]
    opt = torch.optim.SGD(layer(model).parameters(), lr=lr)
    losses = []
    for _ in range(12):
        loss = model.task_loss(model(batch), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < ratio * losses[0], losses
    if monotone:
        assert all(b < a for a, b in zip(losses, losses[1:])), losses


@pytest.mark.parametrize("name", sorted(CASES))
def test_absent_modality_ignored(name):
    model, batch, _, _ = CASES[name]()
    model.eval()
    absent = batch["names"][1]
    batch["present"][1, 0] = False  # sample 0 lacks the second modality
    with torch.no_grad():
        z = model.embed(batch)
        out = model(batch)
        batch["modalities"][absent][0] = torch.randn_like(batch["modalities"][absent][0]) * 5
        out2 = model(batch)
    assert torch.equal(z[1, 0], torch.zeros_like(z[1, 0]))
    assert z[1, 1].abs().sum() > 0
    torch.testing.assert_close(out2, out)


def test_seq_padding_ignored():
    model, batch, _, _ = seq_case()
    model.eval()
    with torch.no_grad():
        out = model(batch)
        z = model.embed(batch)
        for m, mask in batch["masks"].items():
            batch["modalities"][m][~mask] = 100.0
        torch.testing.assert_close(model(batch), out)
        torch.testing.assert_close(model.embed(batch), z)
        # valid steps do matter
        batch["modalities"]["text"][0, 0] += 1.0
        assert not torch.allclose(model(batch), out)


def test_seq_masked_mean_pooling_by_hand():
    model, batch, _, _ = seq_case()
    model.eval()
    enc = model.backbone.encoders["audio"]
    x, mask = batch["modalities"]["audio"], batch["masks"]["audio"]
    with torch.no_grad():
        pooled = enc(x, mask)
        for i in range(x.shape[0]):
            t = int(mask[i].sum())
            h = enc.input_proj(x[i:i + 1, :t]) * math.sqrt(enc.d_model)
            pe = torch.tensor([[math.sin(p / 10000 ** (j / enc.d_model)) if j % 2 == 0 else
                                math.cos(p / 10000 ** ((j - 1) / enc.d_model)) for j in range(enc.d_model)]
                               for p in range(t)])
            h = enc.encoder(h + pe)  # the sample alone, unpadded
            torch.testing.assert_close(pooled[i], h[0].mean(dim=0), atol=1e-5, rtol=1e-5)


def test_seq_mean_fusion_excludes_absent():
    backbone = SeqTransformer(modalities={"text": 4, "audio": 3}, size="tiny", fusion="mean", dropout=0.0)
    model = for_backbone(backbone).eval()
    g = torch.Generator().manual_seed(1)
    batch = _batch({"text": torch.randn(2, 5, 4, generator=g), "audio": torch.randn(2, 5, 3, generator=g)},
                   torch.zeros(2))
    batch["present"][1, 0] = False
    lin1, lin2 = model.head[0], model.head[-1]

    def head_by_hand(v):  # Linear -> ReLU -> (dropout 0) -> Linear, from the weights
        h = [max(0.0, sum(w * x for w, x in zip(row, v)) + b) for row, b in zip(lin1.weight.tolist(), lin1.bias.tolist())]
        return sum(w * x for w, x in zip(lin2.weight[0].tolist(), h)) + lin2.bias.tolist()[0]

    with torch.no_grad():
        z = model.embed(batch)
        out = model(batch)
    text, audio = z[0].tolist(), z[1].tolist()
    assert out[0].item() == pytest.approx(head_by_hand(text[0]), abs=1e-5)  # text alone, not (text + 0) / 2
    assert out[1].item() == pytest.approx(head_by_hand([(a + b) / 2 for a, b in zip(text[1], audio[1])]), abs=1e-5)


def test_seq_bad_input():
    model, batch, _, _ = seq_case()
    batch["modalities"]["audio"] = torch.randn(3, 6, 9)
    with pytest.raises(ValueError, match="audio"):
        model(batch)
    with pytest.raises(ValueError, match="default input dim"):
        SeqTransformer(modalities=["smell"])


def test_seq_on_ch_sims_fixture(fixtures_dir):
    safe_pickle = pytest.importorskip("fusebench.datasets.safe_pickle")
    feats = safe_pickle.load(fixtures_dir / "ch_sims" / "feature_aligned.pkl")
    dims = {m: int(feats[m].shape[1]) for m in ("text", "audio", "vision")}
    assert dims == {"text": 768, "audio": 25, "vision": 171}
    model = for_backbone(SeqTransformer(modalities=dims, size="tiny"))
    mods, masks = {}, {}
    for m in dims:
        x = torch.as_tensor(feats[m], dtype=torch.float32)
        mods[m] = torch.stack([x, torch.cat([x[:5], torch.zeros(x.shape[0] - 5, x.shape[1])])])
        masks[m] = torch.arange(x.shape[0])[None, :] < torch.tensor([x.shape[0], 5])[:, None]
    batch = _batch(mods, torch.tensor([0.4, -0.6]), masks)
    out = model(batch)
    model.task_loss(out, batch).backward()
    assert out.shape == (2,) and torch.isfinite(out).all()


# -- EEG conv -----------------------------------------------------------------------------------
def test_eeg_architecture_by_hand():
    model = for_backbone(EEGConvEncoder(modalities=["c3", "c4", "f3", "f4", "o1", "o2"]))
    encoder = model.backbone.encoder
    convs = [b[0] for b in encoder.blocks]
    assert [(c.kernel_size[0], c.stride[0]) for c in convs] == [(3, 3)] + [(2, 2)] * 5
    assert [c.out_channels for c in convs] == [256] * 6
    assert [type(m).__name__ for m in encoder.blocks[0]] == ["Conv1d", "Dropout", "GroupNorm", "GELU"]
    assert encoder.readout.kernel_size == (1,) and encoder.readout.out_channels == 64
    # parameters: conv1 1*256*3+256, 6 GroupNorms 2*256, five 256->256 k=2 convs, readout 256*64+64,
    # combine (6*64)*64+64, classifier 64*5+5
    expected = (256 * 3 + 256) + 6 * 512 + 5 * (256 * 256 * 2 + 256) + (256 * 64 + 64) + (384 * 64 + 64) + (64 * 5 + 5)
    assert count_parameters(model) == expected == 702149
    # time length for a 30-s epoch at 100 Hz: L -> floor((L + 2p - k) / s) + 1 with p = k // 2
    with torch.no_grad():
        h = encoder(torch.randn(2, 1, 3000))
    assert tuple(h.shape) == (2, 64, 33)  # 3000 -> 1000 -> 501 -> 251 -> 126 -> 64 -> 33


def eeg_backbone_by_hand(backbone, x: torch.Tensor) -> torch.Tensor:
    """The shared backbone from its weights with functional ops: per block conv (padding k // 2),
    GroupNorm over channel pairs (mean / biased variance by hand), exact GELU; kernel-1 readout."""
    h = x
    for conv, _dropout, gn, _gelu in backbone.blocks:
        k = conv.kernel_size[0]
        h = F.conv1d(h, conv.weight, conv.bias, stride=conv.stride[0], padding=k // 2)
        n, c, t = h.shape
        g = h.reshape(n, gn.num_groups, -1)
        g = (g - g.mean(-1, keepdim=True)) / torch.sqrt(((g - g.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + gn.eps)
        h = g.reshape(n, c, t) * gn.weight[None, :, None] + gn.bias[None, :, None]
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    return torch.einsum("oc,nct->not", backbone.readout.weight[:, :, 0], h) + backbone.readout.bias[None, :, None]


def test_eeg_channels_share_the_encoder():
    model, batch, _, _ = eeg_case()
    model.eval()
    x = batch["modalities"]["fpz"]
    batch["modalities"]["eog"] = x.clone()
    with torch.no_grad():
        z = model.embed(batch)
        torch.testing.assert_close(z[2], z[0])
        # the embedding is the time average of the shared backbone's readout, computed here from the weights
        encoder = model.backbone.encoder
        torch.testing.assert_close(z[0], eeg_backbone_by_hand(encoder, x).mean(dim=-1), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(z[1], eeg_backbone_by_hand(encoder, batch["modalities"]["pz"]).mean(dim=-1),
                                   atol=1e-5, rtol=1e-4)


# -- ESANet pieces ------------------------------------------------------------------------------
def test_nonbottleneck_and_se_shapes():
    x = torch.randn(2, 8, 12, 10)
    assert tuple(NonBottleneck1D(8, 8)(x).shape) == (2, 8, 12, 10)
    block = NonBottleneck1D(8, 16, stride=2)
    assert tuple(block(x).shape) == (2, 16, 6, 5)
    assert [tuple(c.kernel_size) for c in (block.conv3x1_1, block.conv1x3_1, block.conv3x1_2, block.conv1x3_2)] \
        == [(3, 1), (1, 3), (3, 1), (1, 3)]
    se = SqueezeExcitation(32)
    y = torch.randn(2, 32, 5, 5)
    assert tuple(se(y).shape) == (2, 32, 5, 5)
    with torch.no_grad():
        for p in se.parameters():
            p.zero_()
    torch.testing.assert_close(se(y), 0.5 * y)  # sigmoid(0) = 1/2 on every channel


def test_learned_upsample_initialised_as_bilinear():
    x = torch.randn(2, 3, 5, 7)
    up = LearnedUpsample(3, padding="replicate")  # ESANet's learned-3x3 (tiny); the default zero-pads
    with torch.no_grad():
        torch.testing.assert_close(up(x), F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
    # one interior value by hand: output row 2, column 3 -> input rows 0.75, cols 1.25 (align_corners=False)
    v = 0.25 * (0.75 * x[0, 0, 0, 1] + 0.25 * x[0, 0, 0, 2]) + 0.75 * (0.75 * x[0, 0, 1, 1] + 0.25 * x[0, 0, 1, 2])
    torch.testing.assert_close(up(x)[0, 0, 2, 3], v)


def test_esanet_resolution_and_loss_upsampling():
    model, batch, _, _ = esanet_case()
    model.eval()
    with torch.no_grad():
        out = model(batch)
        target = torch.randint(-1, 4, (2, 64, 64))
        target[0] = -1
        loss = model.task_loss(out, {**batch, "target": target})
        up = F.interpolate(out, size=(64, 64), mode="bilinear", align_corners=False)
        logp = up.log_softmax(dim=1)
        valid = target >= 0
        picked = logp.permute(0, 2, 3, 1)[valid].gather(1, target[valid][:, None])
        torch.testing.assert_close(loss, -picked.mean())
        assert tuple(model.predict(out, {"target": target}).shape) == (2, 64, 64)


def test_esanet_weights_roundtrip(tmp_path):
    torch.manual_seed(0)
    source = ResNetNBt1D(3, (8, 16, 32, 64), (1, 1, 1, 1))
    state = {f"module.{k}": v for k, v in source.state_dict().items()}
    state["module.fc.weight"] = torch.randn(10, 64)  # an ImageNet classifier is dropped
    path = tmp_path / "r_nbt1d.pth"
    torch.save({"state_dict": state}, path)
    model = ESANet(modalities=["rgb", "depth"], size="tiny", weights=path).eval()
    source.eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.encoders["rgb"](x), source(x))
        # depth stem: the 3 input-channel kernels summed
        torch.testing.assert_close(model.encoders["depth"].conv1.weight, source.conv1.weight.sum(1, keepdim=True))
        torch.testing.assert_close(model.encoders["depth"].layer4[0].conv3x1_1.weight,
                                   source.layer4[0].conv3x1_1.weight)
        batch = _batch({"rgb": x, "depth": torch.rand(2, 1, 32, 32)}, None)
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        torch.testing.assert_close(model.embed(batch)[0], source((x - mean) / std).mean(dim=(-2, -1)))
    bad = tmp_path / "wrong.pth"
    torch.save({"conv1.weight": torch.randn(8, 3, 7, 7)}, bad)
    with pytest.raises(ValueError, match="does not match"):
        ESANet(modalities=["rgb"], size="tiny", weights=bad)
    wrong_size = tmp_path / "r34.pth"
    torch.save(ResNetNBt1D(3, (16, 16, 32, 64), (1, 1, 1, 1)).state_dict(), wrong_size)
    with pytest.raises(ValueError, match="conv1.weight has shape"):
        ESANet(modalities=["rgb"], size="tiny", weights=wrong_size)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="junk.pth"):
        ESANet(modalities=["rgb"], size="tiny", weights=junk)


# -- heads --------------------------------------------------------------------------------------
def test_projection_head_and_predictor():
    head = MultiViewHead(16, hidden_dim=32, out_dim=8, predictor=True)
    z, p = head(torch.randn(3, 5, 16))
    assert z.shape == p.shape == (3, 5, 8)
    ph = ProjectionHead(4, 6, 2)
    assert [type(m).__name__ for m in ph.net] == ["Linear", "GELU", "Linear"]
    x = torch.randn(5, 4)
    l1, l2 = ph.net[0], ph.net[2]
    h = l1.weight @ x.T + l1.bias[:, None]
    gelu = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    torch.testing.assert_close(ph(x), (l2.weight @ gelu + l2.bias[:, None]).T)
    with pytest.raises(ValueError, match="last dim 4"):
        ph(torch.randn(2, 3))
    assert MultiViewHead(16, 32, 8)(torch.randn(2, 3, 16))[1] is None


def test_ema_cosine_schedule():
    base, total = 0.99, 10
    for step in range(total + 1):
        expected = 1 - (1 - base) * (math.cos(math.pi * step / total) + 1) / 2
        assert cosine_momentum(step, total, base) == pytest.approx(expected, abs=1e-12)
    assert cosine_momentum(0, total, base) == pytest.approx(0.99)
    assert cosine_momentum(5, total, base) == pytest.approx(0.995)
    assert cosine_momentum(10, total, base) == pytest.approx(1.0)
    assert cosine_momentum(25, total, base) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        cosine_momentum(0, 0, base)


def test_ema_teacher_update():
    torch.manual_seed(0)
    student = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    teacher = EMATeacher(student, base_momentum=0.9, total_steps=4)
    assert all(not p.requires_grad for p in teacher.module.parameters())
    before = [p.detach().clone() for p in teacher.module.parameters()]
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    student(torch.randn(8, 3))  # moves the BN running statistics
    tau = teacher.update(student, step=1)
    assert tau == pytest.approx(1 - 0.1 * (math.cos(math.pi / 4) + 1) / 2)
    for t_old, t_new, s in zip(before, teacher.module.parameters(), student.parameters()):
        torch.testing.assert_close(t_new, tau * t_old + (1 - tau) * s)
    torch.testing.assert_close(teacher.module[1].running_mean, student[1].running_mean)
    out = teacher(torch.randn(2, 3))
    assert not out.requires_grad


# -- extractors ---------------------------------------------------------------------------------
def test_extractors_refuse_without_weights(tmp_path):
    from fusebench.encoders.extractors import CLIPExtractor, HubertExtractor, TextExtractor, main

    for cls in (TextExtractor, HubertExtractor, CLIPExtractor):
        with pytest.raises(ValueError, match="weights=PATH"):
            cls()
        with pytest.raises(ValueError, match="config.json"):
            cls(weights=tmp_path)
    assert main(["text", "--input", str(tmp_path / "x.txt"), "--output", str(tmp_path / "o.pt")]) == 2


def test_low_level_audio_descriptors():
    from fusebench.encoders.extractors import LowLevelAudioExtractor

    ext = LowLevelAudioExtractor(n_mfcc=13)
    t = torch.arange(8000) / 8000.0
    wave = 0.5 * torch.sin(2 * math.pi * 1000.0 * t)  # 1 s of 1 kHz at 8 kHz -> resampled to 16 kHz
    feats = ext(wave, 8000)
    assert tuple(feats.shape) == (101, 15)  # 16000 samples, hop 160, centred frames: 16000 // 160 + 1
    mid = feats[10:90]
    # RMS of a sine of amplitude 0.5 is 0.5 / sqrt(2)
    torch.testing.assert_close(mid[:, 13], torch.full((80,), math.log(0.5 / math.sqrt(2))), atol=0.02, rtol=0)
    assert (mid[:, 14] - 1000.0).abs().max() < 60.0  # spectral centroid at the tone


def test_text_extractor_tiny_bert(tmp_path):
    tf = pytest.importorskip("transformers")
    from fusebench.encoders.extractors import TextExtractor

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "very"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tf.BertTokenizer(str(tmp_path / "vocab.txt")).save_pretrained(tmp_path)
    torch.manual_seed(0)
    tf.BertModel(tf.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64)).save_pretrained(tmp_path)
    ext = TextExtractor(weights=tmp_path)
    feats = ext(["good movie", "very very bad movie"])
    assert [tuple(f.shape) for f in feats] == [(4, 32), (6, 32)]  # [CLS] + words + [SEP]
    torch.testing.assert_close(ext(["good movie"])[0], feats[0], atol=1e-5, rtol=1e-5)  # padding has no effect


def test_hubert_and_clip_extractors_tiny(tmp_path):
    tf = pytest.importorskip("transformers")
    from fusebench.encoders.extractors import CLIPExtractor, HubertExtractor

    torch.manual_seed(0)
    hub = tmp_path / "hubert"
    tf.HubertModel(tf.HubertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                   conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3),
                                   num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)).save_pretrained(hub)
    ext = HubertExtractor(weights=hub)
    feats = ext(torch.randn(2, 800), 8000)  # stereo 0.1 s at 8 kHz -> 1600 mono samples at 16 kHz
    # conv lengths: (1600 - 10) // 5 + 1 = 319, (319 - 3) // 2 + 1 = 159
    assert tuple(feats.shape) == (159, 16)
    clip = tmp_path / "clip"
    cfg = tf.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              image_size=32, patch_size=8, projection_dim=12)
    tf.CLIPVisionModelWithProjection(cfg).save_pretrained(clip)
    frames = torch.rand(3, 3, 48, 64)
    assert tuple(CLIPExtractor(weights=clip)(frames).shape) == (3, 16)
    assert tuple(CLIPExtractor(weights=clip, projection=True)(frames).shape) == (3, 12)
    x = CLIPExtractor(weights=clip).preprocess(torch.ones(1, 3, 48, 64))
    mean, std = torch.tensor([0.48145466, 0.4578275, 0.40821073]), torch.tensor([0.26862954, 0.26130258, 0.27577711])
    assert tuple(x.shape) == (1, 3, 32, 32)
    torch.testing.assert_close(x[0, :, 5, 5], (1 - mean) / std)


# -- bench --------------------------------------------------------------------------------------
def test_bench_encoders_eeg(capsys):
    from fusebench.perf import encoders as bench

    assert bench.main(["--names", "eeg_conv", "--in-process", "--repeats", "1", "--warmup", "0",
                       "--batch-size", "1"]) == 0
    out = capsys.readouterr().out
    row = [ln for ln in out.splitlines() if ln.startswith("| eeg_conv")]
    assert len(row) == 1 and "| 0.70 |" in row[0] and "c3 1x1x3000" in row[0]
    with pytest.raises(SystemExit):
        bench.main(["--names", "no_such_encoder"])


def test_eeg_channels_that_groupnorm_cannot_split_are_refused_at_load():
    """GroupNorm(channels // 2) needs channels divisible by channels // 2: 1, 2, 3 or even; 5, 7, 255 are refused by
    config_problems (the spec loader), and every count it accepts builds."""
    for c in (5, 7, 255):
        problems = EEGConvEncoder.config_problems({"channels": c})
        assert len(problems) == 1 and f"encoder.config.channels = {c}" in problems[0]
        with pytest.raises(ValueError):
            EEGConvEncoder(size="tiny", channels=c)
    for c in (1, 2, 3, 4, 6, 16):
        assert EEGConvEncoder.config_problems({"channels": c}) == []
        EEGConvEncoder(size="tiny", channels=c)
    assert len(EEGConvEncoder.config_problems({"channels": 0})) == 1  # the base check, said once
