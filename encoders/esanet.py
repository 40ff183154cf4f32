"""ESANet: efficient multi-branch RGB-D(-normal) semantic segmentation.

This module is longer than ~450 lines because it is the paper's one model: the encoder branches, their fusion, the
context module, the decoder and the load-time checks of its options.

Implements Seichter, Köhler, Lewandowski, Wengefeld, Gross, "Efficient RGB-D Semantic Segmentation
for Indoor Scene Analysis", ICRA 2021, arXiv:2011.06961, https://arxiv.org/abs/2011.06961 (authors'
code: https://github.com/TUI-NICR/ESANet), Sec. III and Fig. 2:

* **Encoder** (Sec. III-A): one ResNet-18/34 per image modality in which every 3x3 convolution of the
  basic block is replaced by the factorised ``NonBottleneck1D`` block of ERFNet (Romera et al.,
  "ERFNet: Efficient Residual Factorized ConvNet for Real-Time Semantic Segmentation", IEEE T-ITS
  2018): 3x1 conv -> ReLU -> 1x3 conv -> BN -> ReLU -> 3x1 conv -> ReLU -> 1x3 conv -> BN, plus the
  residual, then ReLU; the stride of the block is split over the first 3x1/1x3 pair. Stem: 7x7/2
  conv -> BN -> ReLU, 3x3/2 max-pool. Branches: ``rgb`` (3 channels), ``depth`` (1), and ``normal``
  (3) as a third one.
* **Fusion** (Sec. III-A, Fig. 2): after the stem and after each of the four stages, every branch is
  re-weighted by its own squeeze-and-excitation module (Hu et al., "Squeeze-and-Excitation
  Networks", CVPR 2018, arXiv:1709.01507: global average pool -> 1x1 conv (C -> C/16) -> ReLU ->
  1x1 conv -> sigmoid, multiplied channel-wise) and the results are added into the main (first, RGB)
  branch; the other branches continue with their own features.
* **Context module** (Sec. III-B): a pyramid-pooling module (as in PSPNet, Zhao et al., "Pyramid
  Scene Parsing Network", CVPR 2017, arXiv:1612.01105) on the 1/32 features: adaptive average
  pooling to bins (1, 5), 1x1 conv-BN-ReLU per bin, nearest-neighbour upsampling (ESANet's choice with its
  learned upsampling: ``src/models/model.py`` sets ``upsampling_context_module = 'nearest'``), concatenated
  with the input and fused by a 1x1 conv-BN-ReLU.
* **Decoder** (Sec. III-C): three modules, each 3x3 conv-BN-ReLU -> NonBottleneck1D block(s) ->
  learned x2 upsampling, then the encoder skip (1x1 conv-BN-ReLU of the fused stage-3/2/1 features)
  is added; a final 3x3 conv to the classes and two more learned x2 upsamplings bring the logits to
  the input resolution. **Learned upsampling** (ESANet's ``--upsampling learned-3x3-zeropad``, the value of
  its training command): nearest-neighbour x2 followed by a depthwise 3x3 conv with zero padding,
  initialised with the bilinear kernel ``outer([1,2,1],[1,2,1]) / 16`` — at initialisation this equals
  bilinear x2 interpolation (``align_corners=False``) away from the border; the outermost rows and columns
  take the kernel's share on the zero padding. ESANet's deep supervision (side outputs of the decoder
  modules) is not included.
* **Initialisation** without ``weights``: every convolution of a branch He-normal with fan-out (ESANet's
  ``ResNet.__init__``, as torchvision's); the fusion, context module and decoder keep PyTorch's defaults
  (ESANet's ``--he_init`` is off by default). The ``tiny`` preset (tests) keeps its version 1: replication
  padding (bilinear x2 exactly at initialisation), bilinear context upsampling and PyTorch's init everywhere.

**Embeddings for pretraining.** ``embed`` runs each branch's encoder *alone* (no cross-branch fusion)
and global-average-pools its last stage, so view ``l`` depends on modality ``l`` only; the fusion,
context module and decoder belong to the segmentation head (:class:`ESANetSegmentationHead`, the
encoder's head for the segmentation task, built by ``task_head``). The head reads ``features(batch)``
(:class:`BranchInputs`: the normalised inputs, the presence mask and the branch encoders) and runs the
branches stage by stage, adding the SE-weighted branches into the main one after each stage. The loss
(cross entropy, ``ignore_index=-1``, logits upsampled to the target's resolution) and the predicted
label maps are the segmentation task's (:mod:`fusebench.tasks`).

**Inputs** (the datasets' layout): ``rgb`` ``[n, 3, H, W]`` in [0, 1], normalised inside the model with
the ImageNet mean/std; ``depth`` ``[n, 1, H, W]`` in metres, normalised with ESANet's NYUv2 depth
statistics (mean 2.8419 m, std 1.4173 m; 0 = missing is normalised like any value, as ESANet does for the
in-painted depth it trains on, which has no holes; ESANet's raw-depth mode instead sets missing pixels back to
0 after normalising and has statistics of its own, which this model does not reproduce: with the nyuv2
adapter's ``depth_source: rawDepths`` a hole becomes about -2 here);
``normal`` ``[n, 3, H, W]`` unit vectors, used as they are. An absent modality
(``batch["present"]``) contributes nothing to the fusion and a zero embedding.

**ImageNet weights** (``weights=PATH``): a ``state_dict`` of a ResNet-NonBottleneck1D backbone (keys
``conv1.weight``, ``bn1.*``, ``layer{1..4}.{i}.conv3x1_1.weight`` ..., ``downsample.{0,1}.*``;
``fc.*`` is dropped; ``module.``/``encoder.``/``backbone.`` prefixes are stripped), read with
``torch.load(weights_only=True)`` and loaded into every branch. For a branch whose stem has a
different number of input channels than the file (depth: 1), the stem weights are summed over the
input channels, as ESANet does. Missing, unexpected or mis-shaped keys raise ``ValueError``.

Shape:
    batch["modalities"][m]: ``[n, C_m, H, W]``;  head(features, batch): logits ``[n, num_classes, H, W]``
    embed(batch): ``[k, n, widths[-1]]`` (512 for ResNet-18/34)
    batch["target"]: ``[n, H', W']`` long, -1 = void;  predictions: ``[n, H', W']`` long
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fusebench.encoders import ENCODERS
from fusebench.encoders.base import Backbone
from fusebench.encoders.heads import get_modality, parse_modalities, presence

DEFAULT_CHANNELS = {"rgb": 3, "depth": 1, "normal": 3}
#: per-modality input normalisation (mean, std) per channel; modalities not listed are used as is
INPUT_STATS = {
    "rgb": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # ImageNet
    "depth": ((2.8419494,), (1.4172594,)),  # ESANet's NYUv2 depth statistics (2841.9 / 1417.3 mm)
}

#: decoder_blocks: NonBottleneck1D blocks per decoder module; 3, as ESANet trains on NYUv2 (its README's command
#: and src/args.py: ``--nr_decoder_blocks 3``; the model class's own default, [1, 1, 1], is not what it trains).
#: upsample_padding, context_upsampling, init: what the same command's ``--upsampling learned-3x3-zeropad`` and a
#: branch built without ImageNet weights give in ESANet's code: the learned x2 upsampling's 3x3 conv zero-pads
#: (``"zeros"``; ``"replicate"`` is its ``learned-3x3``), the context module upsamples its pooled bins by nearest
#: neighbour (src/models/model.py: learned upsampling cannot scale by 15 / 3, so ``upsampling_context_module =
#: 'nearest'``), and the branch's convolutions start He-normal, fan-out (src/models/resnet.py, ``ResNet.__init__``;
#: ``"default"``: PyTorch's). ``tiny`` (the tests' preset) keeps what its version 1 computed (replication padding,
#: bilinear context, PyTorch's init), so that its committed records stay those of the current code.
SIZES = {
    "resnet34": dict(widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3), decoder_channels=(512, 256, 128),
                     decoder_blocks=(3, 3, 3), upsample_padding="zeros", context_upsampling="nearest",
                     init="he_fan_out"),
    "resnet18": dict(widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2), decoder_channels=(512, 256, 128),
                     decoder_blocks=(3, 3, 3), upsample_padding="zeros", context_upsampling="nearest",
                     init="he_fan_out"),
    "tiny": dict(widths=(8, 16, 32, 64), blocks=(1, 1, 1, 1), decoder_channels=(32, 16, 8),
                 decoder_blocks=(1, 1, 1), upsample_padding="replicate", context_upsampling="bilinear",
                 init="default"),
}
DEFAULT_SIZE = "resnet34"
#: a size's version where it is not "1" (``Backbone.version_of``): resnet34 / resnet18 were "2" when their decoder
#: got three NonBottleneck1D blocks per module (was one), and are "3" since they upsample, pool the context and
#: initialise their branches as ESANet's training command does (zero-padded learned upsampling, nearest-neighbour
#: context bins, He fan-out init; were replication padding, bilinear bins, PyTorch's init); ``tiny`` computes as it did
SIZE_VERSIONS = {"resnet34": "3", "resnet18": "3"}


def conv_bn_relu(c_in: int, c_out: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class NonBottleneck1D(nn.Module):
    """ERFNet's factorised residual block; ``[n, c_in, H, W] -> [n, c, H/stride, W/stride]``."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        self.conv3x1_1 = nn.Conv2d(in_channels, channels, (3, 1), stride=(stride, 1), padding=(1, 0))
        self.conv1x3_1 = nn.Conv2d(channels, channels, (1, 3), stride=(1, stride), padding=(0, 1))
        self.bn1 = nn.BatchNorm2d(channels, eps=1e-3)
        self.conv3x1_2 = nn.Conv2d(channels, channels, (3, 1), padding=(dilation, 0), dilation=(dilation, 1))
        self.conv1x3_2 = nn.Conv2d(channels, channels, (1, 3), padding=(0, dilation), dilation=(1, dilation))
        self.bn2 = nn.BatchNorm2d(channels, eps=1e-3)
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(channels))

    def forward(self, x: Tensor) -> Tensor:
        y = F.relu(self.conv3x1_1(x))
        y = F.relu(self.bn1(self.conv1x3_1(y)))
        y = F.relu(self.conv3x1_2(y))
        y = self.bn2(self.conv1x3_2(y))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(y + identity)


class SqueezeExcitation(nn.Module):
    """Channel re-weighting ``x * sigmoid(W2 relu(W1 avgpool(x)))``; ``[n, c, H, W] -> same``."""

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        hidden = max(channels // reduction, 1)
        self.fc = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, hidden, 1), nn.ReLU(inplace=True),
                                nn.Conv2d(hidden, channels, 1), nn.Sigmoid())

    def forward(self, x: Tensor) -> Tensor:
        return x * self.fc(x)


class SEFusion(nn.Module):
    """``sum_b present_b * SE_b(x_b)`` over the branches (ESANet's SE-add fusion)."""

    def __init__(self, channels: int, num_branches: int) -> None:
        super().__init__()
        self.se = nn.ModuleList(SqueezeExcitation(channels) for _ in range(num_branches))

    def forward(self, xs: Sequence[Tensor], present: Tensor) -> Tensor:
        out = 0
        for b, (se, x) in enumerate(zip(self.se, xs)):
            out = out + se(x) * present[b].to(x.dtype)[:, None, None, None]
        return out


class LearnedUpsample(nn.Module):
    """Nearest x2 then a depthwise 3x3 conv initialised with the bilinear kernel ``outer([1,2,1],[1,2,1]) / 16``.

    ``padding="zeros"`` (ESANet's ``learned-3x3-zeropad``, what it trains with): the conv zero-pads, so at
    initialisation the interior equals bilinear x2 (``align_corners=False``) and the outermost rows / columns are
    dimmed by the kernel's share on the padding (3/4 on an edge, 9/16 in a corner). ``padding="replicate"``
    (ESANet's ``learned-3x3``): replication padding, equal to bilinear x2 everywhere at initialisation."""

    def __init__(self, channels: int, padding: str = "zeros") -> None:
        super().__init__()
        if padding not in ("zeros", "replicate"):
            raise ValueError(f"esanet: learned upsampling padding must be 'zeros' or 'replicate', got {padding!r}")
        self.pad = nn.ReplicationPad2d(1) if padding == "replicate" else nn.Identity()
        self.conv = nn.Conv2d(channels, channels, 3, groups=channels, bias=True,
                              padding=0 if padding == "replicate" else 1)
        k1 = torch.tensor([1.0, 2.0, 1.0]) / 4.0
        with torch.no_grad():
            self.conv.weight.copy_(torch.outer(k1, k1).expand(channels, 1, 3, 3))
            self.conv.bias.zero_()

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(self.pad(F.interpolate(x, scale_factor=2, mode="nearest")))


class PyramidPooling(nn.Module):
    """PSPNet-style context module; ``[n, c_in, h, w] -> [n, c_out, h, w]``. Each bin's pooled map is upsampled
    back to ``h x w`` by ``upsampling``: ``"nearest"`` (ESANet with learned upsampling) or ``"bilinear"``
    (``align_corners=False``)."""

    def __init__(self, in_channels: int, out_channels: int, bins: Sequence[int] = (1, 5),
                 upsampling: str = "nearest") -> None:
        super().__init__()
        if upsampling not in ("nearest", "bilinear"):
            raise ValueError(f"esanet: context upsampling must be 'nearest' or 'bilinear', got {upsampling!r}")
        branch = in_channels // len(bins)
        self.bins = tuple(bins)
        self.upsampling = upsampling
        self.branches = nn.ModuleList(
            nn.Sequential(nn.AdaptiveAvgPool2d(b), conv_bn_relu(in_channels, branch, 1)) for b in self.bins)
        self.fuse = conv_bn_relu(in_channels + branch * len(self.bins), out_channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        size = x.shape[-2:]
        if self.upsampling == "nearest":
            feats = [x] + [F.interpolate(br(x), size=size, mode="nearest") for br in self.branches]
        else:
            feats = [x] + [F.interpolate(br(x), size=size, mode="bilinear", align_corners=False)
                           for br in self.branches]
        return self.fuse(torch.cat(feats, dim=1))


class ResNetNBt1D(nn.Module):
    """One encoder branch; key names follow torchvision's ResNet (``conv1``, ``bn1``, ``layer1..4``)."""

    def __init__(self, in_channels: int, widths: Sequence[int], blocks: Sequence[int], init: str = "he_fan_out") -> None:
        super().__init__()
        if init not in ("he_fan_out", "default"):
            raise ValueError(f"esanet: branch init must be 'he_fan_out' or 'default', got {init!r}")
        self.conv1 = nn.Conv2d(in_channels, widths[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        c_in = widths[0]
        for i, (w, nb) in enumerate(zip(widths, blocks)):
            stride = 1 if i == 0 else 2
            layers = [NonBottleneck1D(c_in, w, stride)] + [NonBottleneck1D(w, w) for _ in range(nb - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
            c_in = w
        if init == "he_fan_out":  # ESANet's ResNet.__init__ (torchvision's): every conv weight He-normal, fan-out
            for m in self.modules():  # (biases and BatchNorm keep PyTorch's init: BN weight 1, bias 0)
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def stem(self, x: Tensor) -> Tensor:
        return F.relu(self.bn1(self.conv1(x)))

    def stage(self, i: int, x: Tensor) -> Tensor:
        return getattr(self, f"layer{i}")(x)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.stem(x), 3, stride=2, padding=1)
        for i in range(1, 5):
            x = self.stage(i, x)
        return x


class DecoderModule(nn.Module):
    def __init__(self, in_channels: int, channels: int, num_blocks: int, upsample_padding: str = "zeros") -> None:
        super().__init__()
        self.conv = conv_bn_relu(in_channels, channels, 3)
        self.blocks = nn.Sequential(*[NonBottleneck1D(channels, channels) for _ in range(num_blocks)])
        self.upsample = LearnedUpsample(channels, upsample_padding)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        x = self.upsample(self.blocks(self.conv(x)))
        if x.shape[-2:] != skip.shape[-2:]:  # input size not divisible by 32
            x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return x + skip


@dataclass
class BranchInputs:
    """What ESANet's segmentation head reads: the normalised inputs ``xs`` (one ``[n, C_m, H, W]`` per
    branch), ``present [k, n]`` and the branch encoders (run stage by stage by the head)."""

    xs: list[Tensor]
    present: Tensor
    branches: list[ResNetNBt1D]


class ESANetSegmentationHead(nn.Module):
    """ESANet's fusion, context module and decoder (module docstring): ``BranchInputs`` -> logits
    ``[n, num_classes, H, W]`` at the input resolution."""

    def __init__(self, num_branches: int, widths: Sequence[int], decoder_channels: Sequence[int],
                 decoder_blocks: Sequence[int], num_classes: int, context_bins: Sequence[int] = (1, 5),
                 upsample_padding: str = "zeros", context_upsampling: str = "nearest") -> None:
        super().__init__()
        k, dec, pad = num_branches, decoder_channels, upsample_padding
        self.fusions = nn.ModuleList(SEFusion(w, k) for w in (widths[0], *widths))  # stem + 4 stages
        self.context = PyramidPooling(widths[3], dec[0], context_bins, context_upsampling)
        self.skips = nn.ModuleList([conv_bn_relu(widths[2], dec[0], 1), conv_bn_relu(widths[1], dec[1], 1),
                                    conv_bn_relu(widths[0], dec[2], 1)])
        self.decoders = nn.ModuleList([DecoderModule(dec[0], dec[0], decoder_blocks[0], pad),
                                       DecoderModule(dec[0], dec[1], decoder_blocks[1], pad),
                                       DecoderModule(dec[1], dec[2], decoder_blocks[2], pad)])
        self.conv_out = nn.Conv2d(dec[2], num_classes, 3, padding=1)
        self.upsample_out = nn.Sequential(LearnedUpsample(num_classes, pad), LearnedUpsample(num_classes, pad))

    def forward(self, inputs: BranchInputs, batch: Any = None) -> Tensor:
        xs, present, encs = inputs.xs, inputs.present, inputs.branches
        size = xs[0].shape[-2:]
        feats = [enc.stem(x) for enc, x in zip(encs, xs)]
        feats[0] = self.fusions[0](feats, present)
        feats = [F.max_pool2d(f, 3, stride=2, padding=1) for f in feats]
        skips = []
        for i in range(1, 5):
            feats = [enc.stage(i, f) for enc, f in zip(encs, feats)]
            feats[0] = self.fusions[i](feats, present)
            skips.append(feats[0])
        out = self.context(skips[3])
        for decoder, skip_conv, skip in zip(self.decoders, self.skips, (skips[2], skips[1], skips[0])):
            out = decoder(out, skip_conv(skip))
        out = self.upsample_out(self.conv_out(out))
        if out.shape[-2:] != size:
            out = F.interpolate(out, size=size, mode="bilinear", align_corners=False)
        return out


@ENCODERS.register("esanet")
class ESANet(Backbone):
    """ESANet's branch encoders; its segmentation head is ESANet's fusion, context module and decoder
    (see module docstring).

    Args:
        modalities: branch names (channels from ``rgb: 3, depth: 1, normal: 3``) or a dict name ->
            channels; the first is the main branch the fusion adds into.
        size: ``"resnet34"`` (default, the paper's best), ``"resnet18"`` or ``"tiny"`` (tests).
        num_classes: segmentation classes (40 for NYUv2) where the dataset does not say.
        weights: path of an ImageNet ``state_dict`` for the branch encoders (see module docstring).
        normalize: apply the per-modality input normalisation of ``INPUT_STATS``.
        context_bins: pyramid-pooling bins.
    """

    @classmethod
    def config_problems(cls, config: Mapping[str, Any]) -> list[str]:
        """The base checks, and ``context_bins`` a non-empty list of integers >= 1 (the pooling's grid sizes), at most
        as many as the last stage's channels (each bin's branch gets ``channels // len(bins)`` of them)."""
        out, bins = super().config_problems(config), config.get("context_bins")
        if bins is not None and (not isinstance(bins, (list, tuple)) or not bins
                                 or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in bins)):
            out.append(f"encoder.config.context_bins = {bins!r}: expected a non-empty list of integers >= 1 (the "
                       "pyramid pooling's grid sizes, e.g. [1, 5])")
        elif bins is not None:  # each bin's branch gets the last stage's channels // len(bins): at least 1
            size = config.get("size", DEFAULT_SIZE)
            last = SIZES[size]["widths"][-1] if isinstance(size, str) and size in SIZES else None
            if last is not None and len(bins) > last:
                out.append(f"encoder.config.context_bins has {len(bins)} bins: the pyramid pooling splits the last "
                           f"stage's {last} channels (size {size!r}) among them, so at most {last} bins")
        return out

    input_kinds = ("image", "depth", "normal")  # the modality kinds it reads (encoders/base.py)
    large_model = True  # convolutions on images / point sets: intra-op threads pay (engine/threads.py)

    default_task = "segmentation"

    def __init__(self, modalities: Sequence[str] | Mapping[str, int] | None = None, size: str = DEFAULT_SIZE,
                 num_classes: int = 40, weights: str | os.PathLike | None = None, normalize: bool = True,
                 context_bins: Sequence[int] = (1, 5)) -> None:
        super().__init__()
        if size not in SIZES:
            raise ValueError(f"esanet: size must be one of {sorted(SIZES)}, got {size!r}")
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"esanet: num_classes must be an int >= 2, got {num_classes!r}")
        chans = parse_modalities("esanet", ["rgb", "depth"] if modalities is None else modalities,
                                 DEFAULT_CHANNELS)
        cfg = SIZES[size]
        widths = cfg["widths"]
        self.modalities = list(chans)
        self.channels = chans
        self.num_features = int(widths[-1])
        self.num_classes = num_classes
        self.config = dict(modalities=chans, size=size, num_classes=num_classes, normalize=normalize,
                           context_bins=tuple(context_bins), weights=None if weights is None else str(weights))
        self.encoders = nn.ModuleDict({m: ResNetNBt1D(c, widths, cfg["blocks"], cfg["init"]) for m, c in chans.items()})
        for m, c in chans.items():
            mean, std = INPUT_STATS.get(m, ((0.0,) * c, (1.0,) * c))
            if not normalize or len(mean) != c:
                mean, std = (0.0,) * c, (1.0,) * c
            self.register_buffer(f"mean_{m}", torch.tensor(mean).view(1, c, 1, 1), persistent=False)
            self.register_buffer(f"std_{m}", torch.tensor(std).view(1, c, 1, 1), persistent=False)
        if weights is not None:
            self.load_imagenet(weights)

    @classmethod
    def version_of(cls, config: Mapping[str, Any]) -> str:
        """The size's version (:data:`SIZE_VERSIONS`): its decoder changed without a change of ``encoder.config``."""
        return SIZE_VERSIONS.get(config.get("size", DEFAULT_SIZE), "1")

    def task_head(self, task: Any) -> nn.Module | None:
        """Segmentation: ESANet's fusion, context module and decoder (:class:`ESANetSegmentationHead`)."""
        if task.id != "segmentation":
            return None
        cfg = SIZES[self.config["size"]]
        return ESANetSegmentationHead(len(self.modalities), cfg["widths"], cfg["decoder_channels"],
                                      cfg["decoder_blocks"], task.classes(self), self.config["context_bins"],
                                      cfg["upsample_padding"], cfg["context_upsampling"])

    # -- weights --------------------------------------------------------------------------------
    def load_imagenet(self, path: str | os.PathLike) -> None:
        """Load a backbone ``state_dict`` from ``path`` into every branch (see module docstring)."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"esanet: weights file {str(path)!r} does not exist")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - re-raised with the file name
            raise ValueError(f"esanet: cannot read weights file {str(path)!r} as a torch state_dict: {e}") from e
        for key in ("state_dict", "model"):
            if isinstance(state, Mapping) and isinstance(state.get(key), Mapping):
                state = state[key]
        if not isinstance(state, Mapping) or not all(isinstance(v, Tensor) for v in state.values()):
            raise ValueError(f"esanet: weights file {str(path)!r} does not hold a state_dict (name -> tensor)")
        clean: dict[str, Tensor] = {}
        for key, value in state.items():
            for prefix in ("module.", "encoder.", "backbone."):
                if key.startswith(prefix):
                    key = key[len(prefix):]
            if not key.startswith("fc."):
                clean[key] = value
        for name, enc in self.encoders.items():
            own = enc.state_dict()
            wanted = {k for k in own if not k.endswith("num_batches_tracked")}
            missing = sorted(wanted - set(clean))
            unexpected = sorted(k for k in set(clean) - set(own))
            if missing or unexpected:
                raise ValueError(
                    f"esanet: weights file {str(path)!r} does not match the {self.config['size']} "
                    f"NonBottleneck1D backbone: {len(missing)} missing keys {missing[:5]}, "
                    f"{len(unexpected)} unexpected keys {unexpected[:5]}")
            new = {}
            for k, v in clean.items():
                target = own[k]
                if k == "conv1.weight" and v.dim() == 4 and v.shape[1] != target.shape[1] and v.shape[0] == target.shape[0]:
                    if target.shape[1] != 1:
                        raise ValueError(f"esanet: stem of branch {name!r} takes {target.shape[1]} channels; the "
                                         f"file's conv1.weight takes {v.shape[1]} (only 1-channel branches are adapted)")
                    v = v.sum(dim=1, keepdim=True)
                if v.shape != target.shape:
                    raise ValueError(f"esanet: weights file {str(path)!r}: {k} has shape {tuple(v.shape)}, branch "
                                     f"{name!r} expects {tuple(target.shape)}")
                new[k] = v.to(target.dtype)
            enc.load_state_dict(new, strict=False)

    # -- inputs ---------------------------------------------------------------------------------
    def _inputs(self, batch: Mapping[str, Any]) -> tuple[list[Tensor], Tensor]:
        xs = []
        for m, c in self.channels.items():
            x = get_modality("esanet", batch, m)
            if x.dim() != 4 or x.shape[1] != c:
                raise ValueError(f"esanet: modality {m!r} must be [n, {c}, H, W], got shape {tuple(x.shape)}")
            xs.append((x.float() - getattr(self, f"mean_{m}")) / getattr(self, f"std_{m}"))
        if len({(x.shape[0], *x.shape[-2:]) for x in xs}) != 1:
            raise ValueError(f"esanet: all modalities must share n, H, W; got {[tuple(x.shape) for x in xs]}")
        present = presence(batch, self.modalities, xs[0].shape[0], xs[0].device)
        return xs, present

    # -- interface ------------------------------------------------------------------------------
    def embed(self, batch: Mapping[str, Any]) -> Tensor:
        """``[k, n, widths[-1]]``: each branch alone, last stage global-average-pooled."""
        xs, present = self._inputs(batch)
        z = torch.stack([enc(x).mean(dim=(-2, -1)) for enc, x in zip(self.encoders.values(), xs)])
        return torch.where(present[..., None], z, torch.zeros_like(z))

    def features(self, batch: Mapping[str, Any]) -> BranchInputs:
        """The normalised inputs, the presence mask and the branches: what the segmentation head runs."""
        xs, present = self._inputs(batch)
        return BranchInputs(xs, present, list(self.encoders.values()))

    # -- benchmark convention -------------------------------------------------------------------
    @classmethod
    def benchmark_config(cls) -> dict[str, Any]:
        """RGB-D ESANet-R34-NBt1D, 40 NYUv2 classes (the paper's main model)."""
        return dict(modalities=["rgb", "depth"], size="resnet34", num_classes=40)

    @classmethod
    def example_batch(cls, config: Mapping[str, Any] | None = None, batch_size: int = 2, seed: int = 0,
                      height: int = 480, width: int = 640) -> dict[str, Any]:
        """Synthetic collated batch at NYUv2's 480 x 640 (ESANet's input size)."""
        config = dict(config or cls.benchmark_config())
        mods = config.get("modalities") or ["rgb", "depth"]
        chans = mods if isinstance(mods, Mapping) else {m: DEFAULT_CHANNELS[m] for m in mods}
        g = torch.Generator().manual_seed(seed)
        modalities = {}
        for m, c in chans.items():
            x = torch.rand(batch_size, c, height, width, generator=g)
            if m == "depth":
                x = x * 5.0
            elif m == "normal":
                x = F.normalize(x * 2 - 1, dim=1)
            modalities[m] = x
        nc = int(config.get("num_classes", 40))
        target = torch.randint(-1, nc, (batch_size, height, width), generator=g)
        return {"names": list(chans), "modalities": modalities, "masks": {},
                "present": torch.ones(len(chans), batch_size, dtype=torch.bool), "target": target,
                "extra_targets": {}, "meta": [{} for _ in range(batch_size)]}


__all__ = ["BranchInputs", "ESANet", "ESANetSegmentationHead", "LearnedUpsample", "NonBottleneck1D",
           "PyramidPooling", "ResNetNBt1D", "SEFusion", "SqueezeExcitation", "SIZES"]
