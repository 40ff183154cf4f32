"""ESANet's resnet34 / resnet18 as its authors' training command builds them (TUI-NICR/ESANet README: ``--upsampling
learned-3x3-zeropad``; src/models/model.py, src/models/resnet.py): the learned x2 upsampling zero-pads, the context
module upsamples its pooled bins by nearest neighbour, a branch built without ImageNet weights starts He-normal
fan-out. Before, the learned upsampling replication-padded (ESANet's non-default ``learned-3x3``), the bins were
upsampled bilinearly and every convolution kept PyTorch's init. Expected values come from slow loops written here."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fusebench.encoders.esanet import SIZES, ESANet, LearnedUpsample, PyramidPooling, ResNetNBt1D

KERNEL = [[1 / 16, 2 / 16, 1 / 16], [2 / 16, 4 / 16, 2 / 16], [1 / 16, 2 / 16, 1 / 16]]  # ESANet's Upsample kernel


def _slow_learned_upsample(x: torch.Tensor, replicate: bool) -> torch.Tensor:
    """Nearest x2 then the 3x3 bilinear kernel, zero padding (ESANet learned-3x3-zeropad) or replication, by loops."""
    n, c, h, w = x.shape
    out = torch.zeros(n, c, 2 * h, 2 * w, dtype=torch.float64)
    for b in range(n):
        for ch in range(c):
            for i in range(2 * h):
                for j in range(2 * w):
                    acc = 0.0
                    for di in (-1, 0, 1):
                        for dj in (-1, 0, 1):
                            u, v = i + di, j + dj
                            if replicate:
                                u, v = min(max(u, 0), 2 * h - 1), min(max(v, 0), 2 * w - 1)
                            elif not (0 <= u < 2 * h and 0 <= v < 2 * w):
                                continue  # the zero padding
                            acc += KERNEL[di + 1][dj + 1] * float(x[b, ch, u // 2, v // 2])  # nearest x2
                    out[b, ch, i, j] = acc
    return out


def test_learned_upsample_zero_pads_as_esanet_trains() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 2, 3, 4)
    with torch.no_grad():
        got = LearnedUpsample(2)(x).double()  # the default: ESANet's learned-3x3-zeropad
    torch.testing.assert_close(got, _slow_learned_upsample(x, replicate=False), rtol=0, atol=1e-6)
    # by hand: a corner output sees 4 of the 9 taps inside (1 + 2 + 2 + 4) / 16 = 9/16 of its input pixel
    torch.testing.assert_close(got[0, 0, 0, 0], 9 / 16 * x[0, 0, 0, 0].double(), rtol=0, atol=1e-6)
    # away from the border it is bilinear x2 (align_corners=False); on the border it is not
    bil = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False).double()
    torch.testing.assert_close(got[..., 1:-1, 1:-1], bil[..., 1:-1, 1:-1], rtol=0, atol=1e-6)
    assert not torch.allclose(got[..., 0, :], bil[..., 0, :])


def test_learned_upsample_replicate_is_bilinear_and_bad_padding_refused() -> None:
    torch.manual_seed(1)
    x = torch.randn(1, 2, 3, 4)
    with torch.no_grad():
        got = LearnedUpsample(2, padding="replicate")(x).double()
    torch.testing.assert_close(got, _slow_learned_upsample(x, replicate=True), rtol=0, atol=1e-6)
    torch.testing.assert_close(got, F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False).double(),
                               rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="'zeros' or 'replicate', got 'reflect'"):
        LearnedUpsample(2, padding="reflect")


def test_context_module_upsamples_its_bins_by_nearest_neighbour() -> None:
    """ESANet's 480 x 640 input gives 15 x 20 at 1/32; the 5 x 5 bin is read back at output pixel (i, j) from
    pooled cell (floor(i * 5 / 15), floor(j * 5 / 20)) (nearest, PyTorch's rule), the 1 x 1 bin everywhere."""
    torch.manual_seed(2)
    ppm = PyramidPooling(4, 3, bins=(1, 5)).eval()  # default: nearest, as ESANet with learned upsampling
    x = torch.randn(2, 4, 15, 20)
    seen = {}
    ppm.fuse.register_forward_hook(lambda m, inp, out: seen.setdefault("cat", inp[0]))
    with torch.no_grad():
        ppm(x)
        pooled = [br(x) for br in ppm.branches]  # [2, 2, 1, 1] and [2, 2, 5, 5]
    cat = seen["cat"]
    assert cat.shape == (2, 4 + 2 + 2, 15, 20)
    torch.testing.assert_close(cat[:, :4], x)
    torch.testing.assert_close(cat[:, 4:6], pooled[0].expand(-1, -1, 15, 20))
    want = torch.empty(2, 2, 15, 20)
    for i in range(15):
        for j in range(20):
            want[:, :, i, j] = pooled[1][:, :, (i * 5) // 15, (j * 5) // 20]
    torch.testing.assert_close(cat[:, 6:8], want)
    with pytest.raises(ValueError, match="'nearest' or 'bilinear', got 'bicubic'"):
        PyramidPooling(4, 3, upsampling="bicubic")


def test_branches_start_he_normal_fan_out_as_esanet_resnet() -> None:
    """ESANet's ResNet.__init__: kaiming_normal_(mode='fan_out', nonlinearity='relu') on every conv weight, so the
    std is sqrt(2 / (out_channels * kh * kw)); PyTorch's default (kaiming_uniform_, a = sqrt(5)) has std
    1 / sqrt(3 * fan_in). A 512 -> 512 3x1 conv: 0.0361 against 0.0147 (786k draws: the estimate is within 1%)."""
    torch.manual_seed(3)
    enc = ResNetNBt1D(3, (64, 128, 256, 512), (1, 1, 1, 1))
    w = enc.layer4[0].conv3x1_2.weight
    assert abs(w.std().item() - math.sqrt(2 / (512 * 3))) < 0.01 * math.sqrt(2 / (512 * 3))
    stem = enc.conv1.weight  # 64 x 3 x 7 x 7: fan-out 64 * 49
    assert abs(stem.std().item() - math.sqrt(2 / (64 * 49))) < 0.05 * math.sqrt(2 / (64 * 49))
    assert torch.all(enc.bn1.weight == 1) and torch.all(enc.bn1.bias == 0)
    old = ResNetNBt1D(3, (64, 128, 256, 512), (1, 1, 1, 1), init="default").layer4[0].conv3x1_2.weight
    assert abs(old.std().item() - 1 / math.sqrt(3 * 512 * 3)) < 0.01 / math.sqrt(3 * 512 * 3)
    with pytest.raises(ValueError, match="'he_fan_out' or 'default'"):
        ResNetNBt1D(3, (8, 16, 32, 64), (1, 1, 1, 1), init="xavier")


def test_presets_build_what_they_say() -> None:
    """resnet18 (as resnet34): zero padding, nearest bins, He branches; tiny keeps its version 1 computation."""
    seg = type("T", (), {"id": "segmentation", "classes": lambda self, m: 40})()
    for size, pad, ctx in (("resnet18", torch.nn.Identity, "nearest"), ("tiny", torch.nn.ReplicationPad2d, "bilinear")):
        assert SIZES[size]["upsample_padding"] == ("zeros" if ctx == "nearest" else "replicate")
        torch.manual_seed(4)
        model = ESANet(modalities=["rgb", "depth"], size=size)
        head = model.task_head(seg)
        ups = [m for m in head.modules() if isinstance(m, LearnedUpsample)]
        assert len(ups) == 5 and all(isinstance(u.pad, pad) for u in ups)  # 3 decoder modules + 2 on the logits
        assert all(u.conv.padding == ((1, 1) if ctx == "nearest" else (0, 0)) for u in ups)
        assert head.context.upsampling == ctx
        if size == "resnet18":  # the decoder keeps PyTorch's init (ESANet's --he_init is off by default)
            w = head.decoders[0].conv[0].weight  # 512 x 512 x 3 x 3: default std 1 / sqrt(3 * 4608)
            assert abs(w.std().item() - 1 / math.sqrt(3 * 4608)) < 0.01 / math.sqrt(3 * 4608)
            d = model.encoders["depth"].layer3[0].conv1x3_1.weight  # 256 x 256 x 1 x 3: He fan-out 768
            assert abs(d.std().item() - math.sqrt(2 / 768)) < 0.01 * math.sqrt(2 / 768)
