"""Per-modality transformer encoders over pre-extracted feature sequences, with late fusion.

The unaligned multimodal sentiment setting of CMU-MOSI / MOSEI / CH-SIMS (MMSA: Mao et al., "M-SENA:
An Integrated Platform for Multimodal Sentiment Analysis", ACL 2022 demos, arXiv:2203.12441; code
https://github.com/thuiar/MMSA):
each modality arrives as a sequence of pre-extracted features — text: BERT last layer (768);
audio: COVAREP (74), HuBERT (768) or eGeMAPS LLDs (25); vision: Facet (35), OpenFace (171) or CLIP
(512 / 768); see :mod:`fusebench.encoders.extractors` for the BERT, HuBERT and CLIP references. For
each modality ``m`` this module computes (the encoder of Vaswani et al., "Attention Is All You Need",
NeurIPS 2017, arXiv:1706.03762, https://arxiv.org/abs/1706.03762, Sec. 3.1)::

    h_m = TransformerEncoder(Linear(x_m) * sqrt(d) + PE)        with src_key_padding_mask = ~mask_m
    e_m = sum_t mask_m[t] h_m[t] / sum_t mask_m[t]                (masked mean pooling)

and, as the encoder's head for the regression task (:class:`LateFusionHead`, built by ``task_head``),
the late-fusion regression head (MMSA's LF-DNN style late fusion)::

    y = MLP(concat_m e_m)          fusion="concat" (absent modalities contribute zeros), or
    y = MLP(mean_{m present} e_m)  fusion="mean"   (absent modalities are left out of the mean)

``PE`` is the fixed sinusoidal position encoding of Vaswani et al. Sec. 3.5. Padding follows
``batch["masks"][m]`` (True = valid step; modalities without a mask are fully valid); a sample
whose modality is absent (``batch["present"]``) gets a zero embedding ``e_m = 0`` and is excluded
from fusion. Fully padded rows attend to their (zero) inputs internally so no NaN is produced, and
their embedding is then replaced by zeros.

Loss: L1 between the prediction and the sentiment score (MMSA's default for regression), the
regression task's (:mod:`fusebench.tasks`).

Shape:
    batch["modalities"][m]: ``[n, T_m, d_m]`` float (a ``[n, d_m]`` vector is read as T = 1)
    batch["masks"][m]: ``[n, T_m]`` bool;  batch["present"]: ``[k, n]`` bool
    embed(batch) = features(batch): ``[k, n, d_model]``;  head(features, batch): ``[n]``;
    batch["target"]: ``[n]`` float
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch
from einops import rearrange
from torch import Tensor, nn

from fusebench.encoders import ENCODERS
from fusebench.encoders.base import Backbone
from fusebench.encoders.heads import get_modality, parse_modalities, presence

#: input dims of the usual feature sets, by name
FEATURE_DIMS = {
    "bert": 768, "covarep": 74, "hubert": 768, "egemaps": 25, "facet": 35, "openface": 171,
    "clip_b32": 512, "clip_l14": 768,
}
#: default input dim per modality name (CMU-MOSEI in MMSA's pickles: BERT 768, COVAREP 74, Facet 35; MMSA's
#: CMU-MOSI pickles are 768 / 5 / 20, CH-SIMS 768 / 33 / 709: the benchmarks take the dims from the data)
DEFAULT_DIMS = {"text": 768, "audio": 74, "vision": 35}

SIZES = {
    "default": dict(d_model=128, num_heads=4, num_layers=2, ff_dim=512, head_hidden=128),
    "tiny": dict(d_model=16, num_heads=2, num_layers=1, ff_dim=32, head_hidden=16),
}


def sinusoidal_encoding(length: int, dim: int, device: torch.device | None = None) -> Tensor:
    """``[length, dim]``: PE[t, 2i] = sin(t / 10000^(2i/dim)), PE[t, 2i+1] = cos(...) (Vaswani Sec. 3.5)."""
    t = torch.arange(length, dtype=torch.float32, device=device)[:, None]
    i = torch.arange(0, dim, 2, dtype=torch.float32, device=device)
    # log-space frequencies: exp(-(2i/dim) log 10000)
    angle = t * torch.exp(-i * (math.log(10000.0) / dim))[None, :]
    pe = torch.zeros(length, dim, device=device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return pe


class SequenceEncoder(nn.Module):
    """One modality: ``[n, T, d_in]`` + mask ``[n, T]`` -> pooled ``[n, d_model]``."""

    def __init__(self, in_dim: int, d_model: int, num_heads: int, num_layers: int, ff_dim: int,
                 dropout: float) -> None:
        super().__init__()
        self.d_model = d_model
        self.input_proj = nn.Linear(in_dim, d_model)
        layer = nn.TransformerEncoderLayer(d_model, num_heads, ff_dim, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, norm=nn.LayerNorm(d_model),
                                             enable_nested_tensor=False)

    def forward(self, x: Tensor, valid: Tensor) -> Tensor:
        n, t, _ = x.shape
        h = self.input_proj(x) * math.sqrt(self.d_model) + sinusoidal_encoding(t, self.d_model, x.device)
        empty = ~valid.any(dim=1)  # [n]: fully padded rows would give NaN attention weights
        key_valid = valid | empty[:, None]
        h = self.encoder(h, src_key_padding_mask=~key_valid)
        w = valid.to(h.dtype)
        pooled = torch.einsum("nt,ntd->nd", w, h) / w.sum(dim=1).clamp(min=1.0)[:, None]
        return torch.where(empty[:, None], torch.zeros_like(pooled), pooled)


class LateFusionHead(nn.Sequential):
    """Late fusion of the modality embeddings (``concat``, or ``mean`` over the present ones) ->
    ``Linear -> ReLU -> Dropout -> Linear`` -> one score per sample; ``[k, n, d] -> [n]``."""

    def __init__(self, modalities: Sequence[str], num_features: int, fusion: str, hidden: int,
                 dropout: float) -> None:
        fused = num_features * (len(modalities) if fusion == "concat" else 1)
        super().__init__(nn.Linear(fused, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))
        self.modalities = list(modalities)
        self.fusion = fusion

    def forward(self, z: Tensor, batch: Mapping[str, Any]) -> Tensor:  # absent entries of z are exactly zero
        if self.fusion == "concat":
            fused = rearrange(z, "k n d -> n (k d)")
        else:
            n = z.shape[1]
            w = presence(batch, self.modalities, n, z.device).to(z.dtype)  # [k, n]
            fused = torch.einsum("kn,knd->nd", w, z) / w.sum(dim=0).clamp(min=1.0)[:, None]
        return super().forward(fused).squeeze(-1)


@ENCODERS.register("seq_transformer")
class SeqTransformer(Backbone):
    """Transformer encoder per modality; its regression head is the late-fusion sentiment regressor
    (see module docstring).

    Args:
        modalities: names (dims from ``DEFAULT_DIMS``: text 768, audio 74, vision 35) or a dict
            name -> input feature dim (e.g. ``{"text": 768, "audio": 33, "vision": 709}`` for MMSA's CH-SIMS
            ``unaligned_39.pkl``; the MMSA-FET fixture clip has 768 / 25 / 171).
        size: ``"default"`` or ``"tiny"``; ``d_model``, ``num_heads``, ``num_layers``, ``ff_dim``,
            ``head_hidden`` override it.
        fusion: ``"concat"`` or ``"mean"`` of the modality embeddings.
        dropout: dropout in the transformer layers and the fusion MLP.
    """

    input_kinds = ("sequence", "vector")  # the modality kinds it reads (encoders/base.py)
    #: checked when a spec is loaded (Backbone.config_problems)
    width_options = ("d_model", "num_heads", "num_layers", "ff_dim", "head_hidden")

    default_task = "regression"

    def __init__(self, modalities: Sequence[str] | Mapping[str, int] | None = None, size: str = "default",
                 fusion: str = "concat", dropout: float = 0.1, d_model: int | None = None,
                 num_heads: int | None = None, num_layers: int | None = None, ff_dim: int | None = None,
                 head_hidden: int | None = None) -> None:
        super().__init__()
        if size not in SIZES:
            raise ValueError(f"seq_transformer: size must be one of {sorted(SIZES)}, got {size!r}")
        if fusion not in ("concat", "mean"):
            raise ValueError(f"seq_transformer: fusion must be 'concat' or 'mean', got {fusion!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"seq_transformer: dropout must lie in [0, 1), got {dropout}")
        cfg = dict(SIZES[size])
        given = dict(d_model=d_model, num_heads=num_heads, num_layers=num_layers, ff_dim=ff_dim, head_hidden=head_hidden)
        cfg.update({k: v for k, v in given.items() if v is not None})  # explicit values override the size preset
        if cfg["d_model"] % cfg["num_heads"]:
            raise ValueError(f"seq_transformer: d_model {cfg['d_model']} must be divisible by num_heads "
                             f"{cfg['num_heads']}")
        dims = parse_modalities("seq_transformer", modalities, DEFAULT_DIMS)
        self.modalities = list(dims)
        self.input_dims = dims
        self.num_features = int(cfg["d_model"])
        self.fusion = fusion
        self.config = dict(modalities=dims, size=size, fusion=fusion, dropout=dropout, **cfg)
        self.encoders = nn.ModuleDict({
            name: SequenceEncoder(dim, cfg["d_model"], cfg["num_heads"], cfg["num_layers"], cfg["ff_dim"], dropout)
            for name, dim in dims.items()
        })

    def task_head(self, task: Any) -> nn.Module | None:
        """Regression: the late-fusion head (:class:`LateFusionHead`); other tasks: their default."""
        if task.id != "regression":
            return None
        cfg = self.config
        return LateFusionHead(self.modalities, self.num_features, self.fusion, cfg["head_hidden"], cfg["dropout"])

    def _sequence(self, batch: Mapping[str, Any], name: str) -> tuple[Tensor, Tensor]:
        x = get_modality("seq_transformer", batch, name)
        if x.dim() == 2:
            x = x[:, None, :]
        if x.dim() != 3 or x.shape[-1] != self.input_dims[name]:
            raise ValueError(f"seq_transformer: modality {name!r} must be [n, T, {self.input_dims[name]}], "
                             f"got shape {tuple(x.shape)}")
        mask = (batch.get("masks") or {}).get(name)
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        elif tuple(mask.shape) != tuple(x.shape[:2]):
            raise ValueError(f"seq_transformer: mask of {name!r} must be [n, T] = {tuple(x.shape[:2])}, "
                             f"got {tuple(mask.shape)}")
        return x.float(), mask.to(device=x.device, dtype=torch.bool)

    def embed(self, batch: Mapping[str, Any]) -> Tensor:
        """``[k, n, d_model]``: masked-mean pooled encoder output, zero for absent modalities."""
        seqs = [self._sequence(batch, name) for name in self.modalities]
        n = seqs[0][0].shape[0]
        present = presence(batch, self.modalities, n, seqs[0][0].device)
        out = []
        for l, (name, (x, mask)) in enumerate(zip(self.modalities, seqs)):
            if x.shape[0] != n:
                raise ValueError(f"seq_transformer: modality {name!r} has {x.shape[0]} samples, expected {n}")
            out.append(self.encoders[name](x, mask & present[l][:, None]))
        return torch.stack(out)

    # -- benchmark convention -------------------------------------------------------------------
    @classmethod
    def benchmark_config(cls) -> dict[str, Any]:
        """CMU-MOSEI features of MMSA's pickles (BERT 768, COVAREP 74, Facet 35), default widths."""
        return dict(modalities=dict(DEFAULT_DIMS), size="default")

    @classmethod
    def example_batch(cls, config: Mapping[str, Any] | None = None, batch_size: int = 32, seed: int = 0,
                      seq_len: int = 50) -> dict[str, Any]:
        """Synthetic collated batch: sequences of random lengths in [seq_len/2, seq_len], padded."""
        config = dict(config or cls.benchmark_config())
        mods = config.get("modalities") or DEFAULT_DIMS
        dims = mods if isinstance(mods, Mapping) else {m: DEFAULT_DIMS[m] for m in mods}
        g = torch.Generator().manual_seed(seed)
        names = list(dims)
        modalities, masks = {}, {}
        for name, d in dims.items():
            lengths = torch.randint(max(seq_len // 2, 1), seq_len + 1, (batch_size,), generator=g)
            mask = torch.arange(seq_len)[None, :] < lengths[:, None]
            modalities[name] = torch.randn(batch_size, seq_len, d, generator=g) * mask[..., None]
            masks[name] = mask
        target = (torch.rand(batch_size, generator=g) * 6 - 3)
        return {"names": names, "modalities": modalities, "masks": masks,
                "present": torch.ones(len(names), batch_size, dtype=torch.bool), "target": target,
                "extra_targets": {}, "meta": [{} for _ in range(batch_size)]}


__all__ = ["DEFAULT_DIMS", "FEATURE_DIMS", "LateFusionHead", "SIZES", "SeqTransformer", "SequenceEncoder",
           "sinusoidal_encoding"]
