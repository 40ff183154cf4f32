"""1D convolutional EEG encoder shared across channels, with the multi-channel linear probe.

Implements the encoder of the M3G paper's EEG experiment (Piran et al. 2024, "Contrasting Multiple
Representations with the Multi-Marginal Matching Gap", ICML 2024, arXiv:2405.19532,
https://arxiv.org/abs/2405.19532; Appendix A, "EEG dataset"), which follows Brüsch, Schmidt &
Alstrøm 2023 ("Multi-view self-supervised learning for multivariate variable-channel time series",
IEEE MLSP 2023, arXiv:2307.09614, https://arxiv.org/abs/2307.09614; code named in the M3G paper:
https://github.com/theabrusch/Multiview_TS_SSL): six blocks ``Conv1d -> Dropout -> GroupNorm ->
GELU``; kernel width and stride 3 in the first block and 2 in the other five; 256 kernels in every
block; a readout ``Conv1d`` with kernel width and stride 1 mapping the 256 channels to the output
dimension 64. The paper's "intermediate layers 256 ... final output 64" is read as: the six blocks
have 256 channels and the kernel-1 readout produces the 64-dim output. Convolutions are padded with
``kernel // 2`` and GroupNorm uses ``channels // 2`` groups (the BENDR convolutional encoder Brüsch et
al. build on: Kostas, Aroca-Ouellette, Rudzicz, "BENDR: Using Transformers and a Contrastive
Self-Supervised Learning Task to Learn From Massive Amounts of EEG Data", Frontiers in Human
Neuroscience 2021). The per-time-step readout is averaged over time into one embedding per channel.

One encoder is shared by all EEG channels: each channel is a modality / view (the M3G paper,
Sec. 4.3: "a single common network"), so ``embed`` returns ``[k, n, 64]`` for k channels.

Downstream probe (M3G Appendix A, "Linear Evaluation of the EEG dataset"), the encoder's head for
the classification task (:class:`ChannelProbeHead`, built by ``task_head``): "a linear layer is used
to combine all channel representations" (``combine: Linear(k * 64, 64)`` on the concatenated channel
embeddings), then "a linear classifier" (``classifier: Linear(64, num_classes)``, 5 sleep stages);
both are trained from scratch. Their composition is one affine map of the concatenation. A channel
absent from a sample (``batch["present"]``) contributes a zero embedding. The loss (cross entropy)
and the predictions (argmax) are the classification task's (:mod:`fusebench.tasks`).

Shape:
    batch["modalities"][channel]: ``[n, 1, T]`` (or ``[n, T]``) float
    embed(batch) = features(batch): ``[k, n, out_dim]``;  head(features): logits ``[n, num_classes]``
    batch["target"]: ``[n]`` long class ids;  predictions: ``[n]`` long
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from einops import rearrange
from torch import Tensor, nn

from fusebench.encoders import ENCODERS
from fusebench.encoders.base import Backbone
from fusebench.encoders.heads import get_modality, parse_modalities, presence

#: Sleep-EDF / PhysioNet 2018 EEG-style channel names used when ``modalities`` is not given
DEFAULT_CHANNELS = ("c3", "c4", "f3", "f4", "o1", "o2")

SIZES = {
    "default": dict(channels=256, out_dim=64, kernels=(3, 2, 2, 2, 2, 2), strides=(3, 2, 2, 2, 2, 2)),
    "tiny": dict(channels=16, out_dim=8, kernels=(3, 2, 2, 2, 2, 2), strides=(3, 2, 2, 2, 2, 2)),
}


class ConvBlock1d(nn.Sequential):
    """``Conv1d -> Dropout -> GroupNorm(channels // 2) -> GELU``; ``[n, c_in, T] -> [n, c, ~T/stride]``."""

    def __init__(self, in_channels: int, channels: int, kernel: int, stride: int, dropout: float) -> None:
        super().__init__(
            nn.Conv1d(in_channels, channels, kernel, stride=stride, padding=kernel // 2),
            nn.Dropout(dropout),
            nn.GroupNorm(max(channels // 2, 1), channels),
            nn.GELU(),
        )


class EEGConvBackbone(nn.Module):
    """The shared single-channel encoder: ``[m, 1, T] -> [m, out_dim, T']`` (per-step features)."""

    def __init__(self, channels: int = 256, out_dim: int = 64, kernels: Sequence[int] = (3, 2, 2, 2, 2, 2),
                 strides: Sequence[int] = (3, 2, 2, 2, 2, 2), dropout: float = 0.1, in_channels: int = 1) -> None:
        super().__init__()
        if len(kernels) != len(strides):
            raise ValueError(f"eeg_conv: kernels {tuple(kernels)} and strides {tuple(strides)} differ in length")
        blocks = []
        c_in = in_channels
        for k, s in zip(kernels, strides):
            blocks.append(ConvBlock1d(c_in, channels, k, s, dropout))
            c_in = channels
        self.blocks = nn.Sequential(*blocks)
        self.readout = nn.Conv1d(channels, out_dim, kernel_size=1, stride=1)
        self.receptive_downsample = 1
        for s in strides:
            self.receptive_downsample *= s

    def forward(self, x: Tensor) -> Tensor:
        return self.readout(self.blocks(x))


class ChannelProbeHead(nn.Module):
    """The M3G paper's EEG probe: ``classifier(combine(concat_k z_k))``; ``[k, n, f] -> [n, num_classes]``."""

    def __init__(self, num_channels: int, num_features: int, num_classes: int) -> None:
        super().__init__()
        self.combine = nn.Linear(num_channels * num_features, num_features)
        self.classifier = nn.Linear(num_features, num_classes)

    def forward(self, z: Tensor, batch: Any = None) -> Tensor:
        joint = self.combine(rearrange(z, "k n d -> n (k d)"))
        return self.classifier(joint)


@ENCODERS.register("eeg_conv")
class EEGConvEncoder(Backbone):
    """Channel-shared 1D conv encoder; its classification head is the linear multi-channel probe
    (see module docstring).

    Args:
        modalities: EEG channel names (each ``[n, 1, T]``), or a dict name -> 1.
        size: ``"default"`` (256 channels, 64 out, as in the paper) or ``"tiny"`` (tests).
        num_classes: classes of the probe (5 sleep stages) where the dataset does not say.
        dropout: dropout probability inside the conv blocks.
        channels, out_dim: override the size's widths.
    """

    input_kinds = ("signal",)  # the modality kinds it reads (encoders/base.py)
    width_options = ("channels", "out_dim")  # checked when a spec is loaded (Backbone.config_problems)

    default_task = "classification"

    @classmethod
    def config_problems(cls, config: Mapping[str, Any]) -> list[str]:
        """The base checks, and ``channels`` divisible by the ``channels // 2`` groups of its GroupNorm (1, 2, 3 or
        an even count), refused when the spec is loaded rather than by GroupNorm when the cell builds the encoder."""
        out, c = super().config_problems(config), config.get("channels")
        if not out and isinstance(c, int) and not isinstance(c, bool) and c > 3 and c % 2:
            out.append(f"encoder.config.channels = {c}: GroupNorm splits the channels into channels // 2 = {c // 2} "
                       f"groups, which {c} is not divisible by; expected 1, 2, 3 or an even count (e.g. {c + 1})")
        return out

    def __init__(self, modalities: Sequence[str] | Mapping[str, int] | None = None, size: str = "default",
                 num_classes: int = 5, dropout: float = 0.1, channels: int | None = None,
                 out_dim: int | None = None) -> None:
        super().__init__()
        if size not in SIZES:
            raise ValueError(f"eeg_conv: size must be one of {sorted(SIZES)}, got {size!r}")
        if modalities is None:
            modalities = list(DEFAULT_CHANNELS)
        if isinstance(modalities, Mapping):
            bad = {k: v for k, v in modalities.items() if v != 1}
            if bad:
                raise ValueError(f"eeg_conv: every channel is a 1-channel signal [n, 1, T]; got dims {bad}")
        elif not isinstance(modalities, str):
            modalities = {str(m): 1 for m in modalities}
        mods = parse_modalities("eeg_conv", modalities, {})
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"eeg_conv: num_classes must be an int >= 2, got {num_classes!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"eeg_conv: dropout must lie in [0, 1), got {dropout}")
        cfg = dict(SIZES[size])
        if channels is not None:
            cfg["channels"] = channels
        if out_dim is not None:
            cfg["out_dim"] = out_dim
        self.modalities = list(mods)
        self.num_features = int(cfg["out_dim"])
        self.num_classes = num_classes
        self.config = dict(modalities=self.modalities, size=size, num_classes=num_classes, dropout=dropout, **cfg)
        self.encoder = EEGConvBackbone(cfg["channels"], cfg["out_dim"], cfg["kernels"], cfg["strides"], dropout)

    def task_head(self, task: Any) -> nn.Module | None:
        """Classification: the paper's probe (:class:`ChannelProbeHead`); other tasks: their default."""
        if task.id != "classification":
            return None
        return ChannelProbeHead(len(self.modalities), self.num_features, task.classes(self))

    # -- inputs ---------------------------------------------------------------------------------
    def _signals(self, batch: Mapping[str, Any]) -> Tensor:
        xs = []
        for name in self.modalities:
            x = get_modality("eeg_conv", batch, name)
            if x.dim() == 2:
                x = x[:, None, :]
            if x.dim() != 3 or x.shape[1] != 1:
                raise ValueError(f"eeg_conv: modality {name!r} must be [n, 1, T] (one EEG channel), "
                                 f"got shape {tuple(x.shape)}")
            xs.append(x)
        shapes = {tuple(x.shape) for x in xs}
        if len(shapes) != 1:
            raise ValueError(f"eeg_conv: all channels must share one shape [n, 1, T], got {sorted(shapes)}")
        return torch.stack(xs)  # [k, n, 1, T]

    # -- interface ------------------------------------------------------------------------------
    def embed(self, batch: Mapping[str, Any]) -> Tensor:
        """``[k, n, out_dim]``: time-averaged readout per channel, zero where the channel is absent."""
        x = self._signals(batch).float()
        k, n = x.shape[:2]
        h = self.encoder(rearrange(x, "k n c t -> (k n) c t"))  # [(k n), out_dim, T']
        z = rearrange(h.mean(dim=-1), "(k n) d -> k n d", k=k, n=n)
        present = presence(batch, self.modalities, n, z.device)
        return torch.where(present[..., None], z, torch.zeros_like(z))

    # -- benchmark convention -------------------------------------------------------------------
    @classmethod
    def benchmark_config(cls) -> dict[str, Any]:
        """Six channels of 30-s epochs at 100 Hz (Sleep-EDF), the paper's widths."""
        return dict(modalities=list(DEFAULT_CHANNELS), size="default", num_classes=5)

    @classmethod
    def example_batch(cls, config: Mapping[str, Any] | None = None, batch_size: int = 16, seed: int = 0,
                      num_samples: int = 3000) -> dict[str, Any]:
        """A synthetic collated batch: ``num_samples`` time steps per channel (3000 = 30 s x 100 Hz)."""
        config = dict(config or cls.benchmark_config())
        names = list(config.get("modalities") or DEFAULT_CHANNELS)
        g = torch.Generator().manual_seed(seed)
        mods = {name: torch.randn(batch_size, 1, num_samples, generator=g) for name in names}
        target = torch.randint(0, int(config.get("num_classes", 5)), (batch_size,), generator=g)
        return {"names": names, "modalities": mods, "masks": {},
                "present": torch.ones(len(names), batch_size, dtype=torch.bool), "target": target,
                "extra_targets": {}, "meta": [{} for _ in range(batch_size)]}


__all__ = ["ChannelProbeHead", "ConvBlock1d", "EEGConvBackbone", "EEGConvEncoder", "SIZES"]
