"""Feature extractors producing the sequence features :mod:`fusebench.encoders.seq_transformer` reads.

This module is longer than ~450 lines because its four extractors share one command line, the feature-file format
with its provenance (load_features), the checks of a weights folder (model type, missing weights, tokenizer, the
preprocessor's settings) and of the inputs that keep output i = input i.

From raw text, audio and video frames, following the conventions of MMSA-FET
(https://github.com/thuiar/MMSA-FET, the feature-extraction toolkit of M-SENA, Mao et al. 2022,
arXiv:2203.12441) for the MOSI / MOSEI / CH-SIMS feature files:

* :class:`TextExtractor` — BERT (Devlin et al., "BERT: Pre-training of Deep Bidirectional
  Transformers for Language Understanding", NAACL 2019, arXiv:1810.04805,
  https://arxiv.org/abs/1810.04805): ``BertTokenizer`` + ``BertModel``; the last
  hidden layer for every token including ``[CLS]`` and ``[SEP]`` -> ``[T, hidden]`` (768 for BERT-base).
  A text longer than ``max_length`` tokens (default and largest: the model's ``max_position_embeddings``,
  512 for BERT-base) keeps its first ``max_length - 2`` word pieces between ``[CLS]`` and ``[SEP]``.
* :class:`HubertExtractor` — HuBERT (Hsu et al., "HuBERT: Self-Supervised Speech Representation
  Learning by Masked Prediction of Hidden Units", IEEE/ACM TASLP 2021, arXiv:2106.07447,
  https://arxiv.org/abs/2106.07447): the waveform is mixed to mono, resampled to
  16 kHz (``torchaudio.functional.resample``), normalised to zero mean / unit variance (unless the
  folder's ``preprocessor_config.json`` says ``"do_normalize": false``; one saying another rate is refused), and
  ``HubertModel``'s last hidden layer is returned -> ``[T', hidden]`` (768 for HuBERT-base; one frame
  per 20 ms).
* :class:`CLIPExtractor` — CLIP's image encoder (Radford et al., "Learning Transferable Visual Models
  From Natural Language Supervision", ICML 2021, arXiv:2103.00020, https://arxiv.org/abs/2103.00020):
  each frame ``[3, H, W]`` in
  [0, 1] is resized (bicubic, shorter side to the model's ``image_size``), centre-cropped, normalised
  with CLIP's mean/std; ``CLIPVisionModel``'s pooled output (post-LayerNorm class token, 768 for
  ViT-B) or, with ``projection=True``, ``CLIPVisionModelWithProjection``'s image embedding (512 for
  ViT-B/32) -> ``[T, dim]``.
* :class:`LowLevelAudioExtractor` — torchaudio-only frame descriptors, **not eGeMAPS** (openSMILE's
  eGeMAPS is not available in torchaudio): per 25 ms window / 10 ms hop at 16 kHz, ``n_mfcc`` MFCCs
  (log-mel based), log RMS energy and spectral centroid (Hz) -> ``[T', n_mfcc + 2]`` (15 by default).
  It needs no weights.

The model-based extractors never download: ``weights`` must be a local folder written by
``save_pretrained`` (config + weights, and the vocabulary for BERT), loaded with
``local_files_only=True``. Without it they refuse with a ``ValueError`` saying what to pass; they also
refuse a folder of another model type (``config.json`` ``model_type``), one missing weights the features use
(they would be random), and for BERT one without ``vocab.txt`` / ``tokenizer.json``.
``transformers`` is imported lazily (``pip install 'fusebench[extract]'``).

Audio files (command line, :func:`load_audio`): integer PCM WAV (8/16/24/32-bit, any rate and channel
count) is read with the standard library's ``wave``; float WAV, FLAC, OGG, AIFF, ... need
``soundfile`` (``pip install 'fusebench[audio]'``); other formats are refused with a ``ValueError``
naming the file (convert with ffmpeg). ``torchaudio.load`` is not used: since torchaudio 2.9 it
needs TorchCodec, which fusebench does not install.

Command line (one output ``.pt``: ``{"format", "provenance", "inputs", "features"}``, the features a list of
``[T_i, d]`` tensors, the provenance the extractor, the weights folder and the sha256 of its files, the settings;
read it with :func:`load_features`; an existing output made by another extraction is not replaced)::

    python -m fusebench.encoders.extractors text  --weights bert-base/ --input lines.txt --output text.pt
    python -m fusebench.encoders.extractors audio --weights hubert-base/ --input a.wav b.wav --output audio.pt
    python -m fusebench.encoders.extractors lld   --input a.wav --output lld.pt
    python -m fusebench.encoders.extractors vision --weights clip-b32/ --input frames.npy --output vision.pt

Shape:
    TextExtractor(list[str]) -> list of ``[T_i, hidden]``
    HubertExtractor(waveform ``[T]`` or ``[C, T]``, sample_rate) -> ``[T', hidden]``
    CLIPExtractor(frames ``[T, 3, H, W]`` in [0, 1]) -> ``[T, dim]``
    LowLevelAudioExtractor(waveform, sample_rate) -> ``[T', n_mfcc + 2]``
"""

from __future__ import annotations

import os
import sys
import wave
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from fusebench.runtime.terminal_help import Parser

TARGET_SAMPLE_RATE_HZ = 16_000
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _transformers():
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the feature extractors need the 'transformers' package: "
                          "pip install 'fusebench[extract]'") from e
    from fusebench.runtime.progress import is_terminal

    if not is_terminal():  # its own weight-loading bars are carriage-return bars: none in a log file
        transformers.utils.logging.disable_progress_bar()
    return transformers


def _weights_dir(who: str, weights: str | os.PathLike | None) -> Path:
    if weights is None:
        raise ValueError(
            f"{who}: no weights given. Pass weights=PATH (command line: --weights PATH), a local folder "
            f"written by save_pretrained (config.json + model weights{', vocab' if 'Text' in who else ''}); "
            f"fusebench never downloads model weights.")
    path = Path(weights)
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ValueError(f"{who}: weights folder {str(path)!r} does not exist or has no config.json "
                         f"(expected a folder written by save_pretrained)")
    return path


#: the files of a weights folder that loading reads (config, weights, tokenizer / preprocessor); README etc. not
_DIGEST_SUFFIXES = (".json", ".txt", ".safetensors", ".bin", ".model")


def _folder_digest(path: Path) -> str:
    """sha256 over the names and sha256s of the files of ``path`` (top level) that loading can read: the
    identity of the weights in a feature file's provenance (the same folder copied elsewhere has the same one)."""
    from fusebench.io import sha256_file, sha256_hex

    files = sorted(f for f in path.iterdir() if f.is_file() and f.name.endswith(_DIGEST_SUFFIXES))
    return sha256_hex("\n".join(f"{f.name} {sha256_file(f)}" for f in files))


def _weights_provenance(path: Path, model_type: str) -> dict[str, Any]:
    return {"weights": str(path.resolve()), "model_type": model_type, "weights_sha256": _folder_digest(path)}


def _preprocessor_config(who: str, path: Path) -> dict[str, Any]:
    """``path/preprocessor_config.json`` (what the model's own processor does to its input), ``{}`` without one."""
    import json

    f = path / "preprocessor_config.json"
    if not f.is_file():
        return {}
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{who}: cannot read {str(f)!r}: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{who}: {str(f)!r} is not a JSON object")
    return cfg


def _check_model_type(who: str, path: Path, model_types: tuple[str, ...]) -> str:
    """The ``model_type`` of ``path/config.json``; a ``ValueError`` naming the folder, the type found and
    the types needed when it is not one of ``model_types`` (transformers would load it anyway)."""
    import json

    try:
        found = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as e:
        raise ValueError(f"{who}: cannot read {str(path / 'config.json')!r}: {e}") from None
    if found not in model_types:
        raise ValueError(f"{who}: weights folder {str(path)!r} holds a model of type {found!r} (config.json "
                         f"model_type), this extractor needs {' or '.join(repr(t) for t in model_types)}")
    return found


def _load_checked(who: str, cls: Any, path: Path, model_types: tuple[str, ...],
                  unused: tuple[str, ...] = (), found: str | None = None, config: Any = None) -> Any:
    """``cls.from_pretrained(path)``, refusing weights that would give random features.

    transformers loads a folder of another model (a BERT folder into ``HubertModel``) with only a
    warning and initialises every weight it does not find at random, so the features would be noise
    with exit status 0. Refused here, with one ``ValueError`` naming the folder: a ``config.json``
    whose ``model_type`` is not one of ``model_types`` (checked before loading), and any weight of the
    model missing from the checkpoint except those whose name starts with one of ``unused`` (weights
    the features never go through, e.g. BERT's pooler). Unexpected weights are accepted once the
    model type matches and nothing is missing: they are the checkpoint's other heads (bert-base's
    ``cls.*`` pre-training head, a full CLIP's text tower), not the model's. ``found``: the model type a caller
    has already read with :func:`_check_model_type` (``config.json`` is then not read again)."""
    found = found or _check_model_type(who, path, model_types)
    need = " or ".join(repr(t) for t in model_types)
    try:
        extra = {} if config is None else {"config": config}
        model, info = cls.from_pretrained(path, local_files_only=True, output_loading_info=True, **extra)
    except RuntimeError as e:  # weights of the wrong shape for the config (transformers' load report)
        raise ValueError(f"{who}: cannot load weights folder {str(path)!r} (model type {found!r}): "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(unused))
    if missing or info.get("mismatched_keys"):
        bad = missing or sorted(str(k) for k in info["mismatched_keys"])
        raise ValueError(f"{who}: weights folder {str(path)!r} (model type {found!r}) lacks {len(bad)} weight(s) "
                         f"the {need} model needs{' with the right shape' if not missing else ''}, e.g. {bad[0]!r} "
                         f"(they would be random); expected a folder written by save_pretrained of that model")
    # float32 whatever the checkpoint's dtype: transformers 5 loads an fp16 / bf16 checkpoint as saved (dtype
    # "auto"), which gave half-precision text features and a dtype error on HuBERT's float32 waveform
    return model.float()


def _mono_16k(who: str, waveform: Tensor, sample_rate_hz: int) -> Tensor:
    """``[T]`` or ``[C, T]`` -> mono ``[T']`` at 16 kHz."""
    import torchaudio.functional as AF

    w = torch.as_tensor(waveform, dtype=torch.float32)
    if w.dim() == 2:
        w = w.mean(dim=0)
    if w.dim() != 1 or w.numel() == 0:
        raise ValueError(f"{who}: waveform must be [T] or [channels, T] and non-empty, got shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):  # NaN / inf samples (a float WAV can hold them): NaN features otherwise
        raise ValueError(f"{who}: waveform holds {int((~torch.isfinite(w)).sum())} non-finite sample(s) (NaN or inf)")
    if not isinstance(sample_rate_hz, int) or sample_rate_hz <= 0:
        raise ValueError(f"{who}: sample_rate_hz must be a positive int, got {sample_rate_hz!r}")
    if sample_rate_hz != TARGET_SAMPLE_RATE_HZ:
        w = AF.resample(w, sample_rate_hz, TARGET_SAMPLE_RATE_HZ)
    return w


class TextExtractor:
    """BERT last-layer token features (see module docstring)."""

    def __init__(self, weights: str | os.PathLike | None = None, max_length: int | None = None,
                 device: str | torch.device = "cpu", batch_size: int = 32) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"TextExtractor: batch_size must be a positive int, got {batch_size!r}")
        path = _weights_dir("TextExtractor", weights)
        found = _check_model_type("TextExtractor", path, ("bert",))  # first: a HuBERT folder has no vocabulary either
        # without its vocabulary BertTokenizer falls back to five special tokens: every word [UNK]
        if not (path / "vocab.txt").is_file() and not (path / "tokenizer.json").is_file():
            raise ValueError(f"TextExtractor: weights folder {str(path)!r} has no tokenizer: neither vocab.txt nor "
                             f"tokenizer.json (save the tokenizer too: tokenizer.save_pretrained(folder))")
        tf = _transformers()
        self.tokenizer = tf.BertTokenizer.from_pretrained(path, local_files_only=True)
        # features are cut as hidden[:, :n_tokens]: padding must come after the tokens whatever the folder's
        # tokenizer_config says (left padding also shifted the position ids: other features per batch)
        self.tokenizer.padding_side = "right"
        # the pooler is not in the features (last hidden layer): checkpoints without one are fine
        self.model = _load_checked("TextExtractor", tf.BertModel, path, ("bert",),
                                   unused=("pooler.",), found=found).to(device).eval()
        # longer than the position table, the embeddings fail with a shape error on the first long text
        n_pos = int(self.model.config.max_position_embeddings)
        if max_length is None:
            max_length = n_pos
        if not isinstance(max_length, int) or isinstance(max_length, bool) or not 2 <= max_length <= n_pos:
            raise ValueError(f"TextExtractor: max_length must be an int in [2, {n_pos}] (the model's "
                             f"max_position_embeddings, {str(path)!r}), got {max_length!r}")
        self.max_length = max_length  # tokens incl. [CLS] and [SEP]; longer texts keep their first max_length - 2
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.dim = int(self.model.config.hidden_size)
        self.provenance = {"extractor": "TextExtractor", **_weights_provenance(path, found),
                           "settings": {"layer": "last_hidden_state", "tokens": "[CLS] ... [SEP]",
                                        "max_length": max_length, "dim": self.dim}}

    @torch.no_grad()
    def __call__(self, texts: Sequence[str], progress: bool = False) -> list[Tensor]:
        """One ``[T_i, hidden]`` per text, in input order. Texts run ``batch_size`` at a time, grouped by
        token count so that a batch pads little (memory and time grow with batch x longest x longest,
        not with the whole list); padding does not change a text's features (attention mask)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise ValueError("TextExtractor: expected a list of strings")
        texts = list(texts)
        if not texts:
            return []
        from fusebench.runtime.progress import track

        tokens = self.tokenizer(texts, truncation=True, max_length=self.max_length)  # once; padded per batch below
        order = sorted(range(len(texts)), key=lambda i: len(tokens["input_ids"][i]))
        out: list[Tensor | None] = [None] * len(texts)
        starts = range(0, len(order), self.batch_size)
        for s in track(starts, len(starts), "text batches", progress):  # tqdm on a terminal, else log lines
            idx = order[s: s + self.batch_size]
            enc = self.tokenizer.pad({k: [v[i] for i in idx] for k, v in tokens.items()},
                                     return_tensors="pt").to(self.device)
            hidden = self.model(**enc).last_hidden_state  # [b, T, hidden]
            for j, (i, t) in enumerate(zip(idx, enc["attention_mask"].sum(dim=1).tolist())):
                out[i] = hidden[j, : int(t)].cpu()
        return out  # type: ignore[return-value]


class HubertExtractor:
    """HuBERT last-layer frame features of 16-kHz mono audio (see module docstring)."""

    def __init__(self, weights: str | os.PathLike | None = None, device: str | torch.device = "cpu") -> None:
        path = _weights_dir("HubertExtractor", weights)
        found = _check_model_type("HubertExtractor", path, ("hubert",))
        tf = _transformers()
        # masked_spec_embed is SpecAugment's training-time mask vector, unused in eval
        self.model = _load_checked("HubertExtractor", tf.HubertModel, path, ("hubert",),
                                   unused=("masked_spec_embed",), found=found).to(device).eval()
        self.device = torch.device(device)
        self.dim = int(self.model.config.hidden_size)
        # the folder's Wav2Vec2FeatureExtractor settings when it has them: whether the model was trained on
        # normalised waveforms (fairseq's task.normalize), and at which rate; without the file: 16 kHz, normalised
        pre = _preprocessor_config("HubertExtractor", path)
        rate = pre.get("sampling_rate", TARGET_SAMPLE_RATE_HZ)
        if rate != TARGET_SAMPLE_RATE_HZ or pre.get("feature_size", 1) != 1:
            raise ValueError(f"HubertExtractor: {str(path / 'preprocessor_config.json')!r} says sampling_rate {rate!r}, "
                             f"feature_size {pre.get('feature_size', 1)!r}; this extractor feeds 16 kHz mono "
                             f"waveforms (sampling_rate 16000, feature_size 1)")
        self.normalize = pre.get("do_normalize", True)
        if not isinstance(self.normalize, bool):
            raise ValueError(f"HubertExtractor: {str(path / 'preprocessor_config.json')!r}: do_normalize must be "
                             f"true or false, got {self.normalize!r}")
        self.provenance = {"extractor": "HubertExtractor", **_weights_provenance(path, found),
                           "settings": {"layer": "last_hidden_state", "channels": "mean", "sample_rate_hz":
                                        TARGET_SAMPLE_RATE_HZ, "normalize": "zero mean, unit variance (eps 1e-7)"
                                        if self.normalize else None, "dim": self.dim}}
        # receptive field of the conv front end (400 samples = 25 ms for HuBERT-base): the shortest input
        self.min_samples, jump = 1, 1
        for k, st in zip(self.model.config.conv_kernel, self.model.config.conv_stride):
            self.min_samples, jump = self.min_samples + (k - 1) * jump, jump * st

    @torch.no_grad()
    def __call__(self, waveform: Tensor, sample_rate_hz: int) -> Tensor:
        w = _mono_16k("HubertExtractor", waveform, sample_rate_hz)
        if w.numel() < self.min_samples:
            raise ValueError(f"HubertExtractor: audio too short: {w.numel()} samples at 16 kHz, the model needs at "
                             f"least {self.min_samples} for one frame")
        if self.normalize:  # as Wav2Vec2FeatureExtractor's do_normalize
            w = (w - w.mean()) / torch.sqrt(w.var(unbiased=False) + 1e-7)
        return self.model(w[None].to(self.device)).last_hidden_state[0].cpu()


def _check_clip_preprocessor(path: Path, image_size: int) -> None:
    """Refuse a folder whose ``preprocessor_config.json`` (its CLIPImageProcessor) prepares images otherwise than
    :meth:`CLIPExtractor.preprocess` does (other mean/std, resize or crop size, no crop, another filter): the
    features would not be those of the model's own pipeline. Without the file: nothing to check."""
    pre = _preprocessor_config("CLIPExtractor", path)
    if not pre:
        return

    def side(v: Any, key: str) -> Any:  # {"shortest_edge": n}, {"height": n, "width": n} or a bare int
        if isinstance(v, dict):
            vals = {v.get(key)} if key in v else {v.get("height"), v.get("width")}
            return vals.pop() if len(vals) == 1 else v
        return v

    checks = [("image_mean", list(CLIP_MEAN)), ("image_std", list(CLIP_STD)),
              ("size", image_size), ("crop_size", image_size), ("do_resize", True), ("do_center_crop", True),
              ("do_normalize", True), ("resample", 3)]  # 3: PIL's BICUBIC
    for key, want in checks:
        if key not in pre:
            continue
        got = pre[key]
        if key in ("size", "crop_size"):
            got = side(got, "shortest_edge")
        ok = (isinstance(got, list) and len(got) == 3 and all(isinstance(g, (int, float)) and abs(g - w) < 1e-6
                                                               for g, w in zip(got, want))) if isinstance(want, list) \
            else got == want and type(got) is type(want)
        if not ok:
            raise ValueError(f"CLIPExtractor: {str(path / 'preprocessor_config.json')!r} has {key} {pre[key]!r}; this "
                             f"extractor prepares images with {key} {want!r} (CLIP's bicubic shorter-side resize to the "
                             f"model's image_size {image_size}, centre crop, CLIP mean/std), so its features would not "
                             f"be the model's")


class CLIPExtractor:
    """CLIP image features per video frame (see module docstring)."""

    def __init__(self, weights: str | os.PathLike | None = None, projection: bool = False,
                 device: str | torch.device = "cpu") -> None:
        path = _weights_dir("CLIPExtractor", weights)
        tf = _transformers()
        cls = tf.CLIPVisionModelWithProjection if projection else tf.CLIPVisionModel
        # a CLIPVisionModel folder ("clip_vision_model") or a whole CLIP ("clip", its text tower unused)
        found = _check_model_type("CLIPExtractor", path, ("clip_vision_model", "clip"))
        config = None
        if projection and found == "clip":
            # a whole CLIP keeps projection_dim at the top level; its vision_config may not repeat it (then 512,
            # the default), and the projection of e.g. ViT-L/14 (768) was refused as a shape mismatch
            import json

            top = json.loads((path / "config.json").read_text(encoding="utf-8")).get("projection_dim")
            config = tf.CLIPVisionConfig.from_pretrained(path, local_files_only=True)
            if isinstance(top, int):
                config.projection_dim = top
        self.model = _load_checked("CLIPExtractor", cls, path, ("clip_vision_model", "clip"),
                                   found=found, config=config).to(device).eval()
        self.projection = projection
        self.device = torch.device(device)
        cfg = self.model.config
        self.image_size = int(cfg.image_size)
        self.dim = int(cfg.projection_dim if projection else cfg.hidden_size)
        _check_clip_preprocessor(path, self.image_size)
        self.provenance = {"extractor": "CLIPExtractor", **_weights_provenance(path, found),
                           "settings": {"output": "image_embeds" if projection else "pooler_output",
                                        "projection": projection, "image_size": self.image_size,
                                        "resize": "bicubic (antialiased), shorter side, centre crop",
                                        "mean": list(CLIP_MEAN), "std": list(CLIP_STD), "dim": self.dim}}

    def preprocess(self, frames: Tensor) -> Tensor:
        """``[T, 3, H, W]`` in [0, 1] -> ``[T, 3, S, S]`` normalised (S = image_size)."""
        x = torch.as_tensor(frames)
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"CLIPExtractor: frames must be [T, 3, H, W] RGB in [0, 1], got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise ValueError(f"CLIPExtractor: frames must be floating point in [0, 1], got dtype {x.dtype} "
                             f"(divide uint8 frames by 255)")
        if x.shape[0] == 0:
            raise ValueError("CLIPExtractor: no frames (T = 0); expected [T, 3, H, W] with T >= 1")
        x = x.float()
        if x.device.type != "meta" and x.numel() and not bool(torch.isfinite(x).all()):  # NaN passes the range test
            raise ValueError(f"CLIPExtractor: frames hold {int((~torch.isfinite(x)).sum())} non-finite value(s)")
        if x.device.type != "meta" and x.numel() and (x.min() < -1e-3 or x.max() > 1 + 1e-3):
            raise ValueError(f"CLIPExtractor: frame values must lie in [0, 1], got [{x.min().item():g}, "
                             f"{x.max().item():g}] (0..255 frames: divide by 255)")
        s = self.image_size
        h, w = x.shape[-2:]
        # the shorter side to s, the longer to int(s * long / short), then the centre crop with offsets
        # int(round((n - s) / 2)): openai/CLIP's Resize(s, BICUBIC) + CenterCrop(s) (torchvision's rules),
        # as transformers' CLIPImageProcessor
        nh, nw = (s, int(s * w / h)) if h <= w else (int(s * h / w), s)
        x = F.interpolate(x, size=(nh, nw), mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
        top, left = int(round((nh - s) / 2.0)), int(round((nw - s) / 2.0))
        x = x[..., top: top + s, left: left + s]
        mean = x.new_tensor(CLIP_MEAN).view(1, 3, 1, 1)  # on the frames' device (CUDA frames: no device mismatch)
        std = x.new_tensor(CLIP_STD).view(1, 3, 1, 1)
        return (x - mean) / std

    @torch.no_grad()
    def __call__(self, frames: Tensor, batch_size: int = 64) -> Tensor:
        x = self.preprocess(frames)
        out = []
        for i in range(0, x.shape[0], batch_size):
            res = self.model(pixel_values=x[i: i + batch_size].to(self.device))
            out.append((res.image_embeds if self.projection else res.pooler_output).cpu())
        return torch.cat(out)


class LowLevelAudioExtractor:
    """torchaudio frame descriptors: MFCCs, log RMS energy, spectral centroid (not eGeMAPS)."""

    def __init__(self, n_mfcc: int = 13, n_mels: int = 40, win_ms: float = 25.0, hop_ms: float = 10.0) -> None:
        import torchaudio.transforms as T

        if n_mfcc < 1 or n_mels < n_mfcc:
            raise ValueError(f"LowLevelAudioExtractor: need 1 <= n_mfcc <= n_mels, got n_mfcc={n_mfcc}, n_mels={n_mels}")
        sr = TARGET_SAMPLE_RATE_HZ
        self.win = int(round(sr * win_ms / 1000))
        self.hop = int(round(sr * hop_ms / 1000))
        n_fft = 1 << (self.win - 1).bit_length()
        self.mfcc = T.MFCC(sample_rate=sr, n_mfcc=n_mfcc, log_mels=True,
                           melkwargs=dict(n_fft=n_fft, win_length=self.win, hop_length=self.hop, n_mels=n_mels))
        self.centroid = T.SpectralCentroid(sample_rate=sr, n_fft=n_fft, win_length=self.win, hop_length=self.hop)
        self.dim = n_mfcc + 2
        self.provenance = {"extractor": "LowLevelAudioExtractor", "weights": None, "model_type": None,
                           "weights_sha256": None,
                           "settings": {"n_mfcc": n_mfcc, "n_mels": n_mels, "win_samples": self.win,
                                        "hop_samples": self.hop, "sample_rate_hz": sr, "dim": self.dim}}

    @torch.no_grad()
    def __call__(self, waveform: Tensor, sample_rate_hz: int) -> Tensor:
        w = _mono_16k("LowLevelAudioExtractor", waveform, sample_rate_hz)
        pad = self.mfcc.MelSpectrogram.spectrogram.n_fft // 2
        if w.numel() <= pad:  # the centred frames reflect-pad n_fft // 2 samples on each side
            raise ValueError(f"LowLevelAudioExtractor: audio too short: {w.numel()} samples at 16 kHz, need more "
                             f"than {pad}")
        mfcc = self.mfcc(w).T  # [T', n_mfcc]
        centroid = torch.nan_to_num(self.centroid(w))  # [T'] (silent frames: 0)
        # RMS energy on the same centred frames as the STFT (reflect padding of win // 2 ... n_fft // 2)
        frames = F.pad(w[None, None], (pad, pad), mode="reflect")[0, 0].unfold(0, 2 * pad, self.hop)
        rms = frames.pow(2).mean(dim=1).sqrt()
        t = min(mfcc.shape[0], centroid.shape[0], rms.shape[0])
        return torch.cat([mfcc[:t], torch.log(rms[:t] + 1e-8)[:, None], centroid[:t, None]], dim=1)


def _read_pcm_wav(path: Path) -> tuple[Tensor, int]:
    """Integer PCM WAV (8-bit unsigned, 16/24/32-bit signed) with the standard library's ``wave``.
    Raises ``wave.Error`` / ``EOFError`` for anything else (float or compressed WAV, not a WAV)."""
    import numpy as np

    with wave.open(str(path), "rb") as f:
        channels, width, rate, frames = f.getnchannels(), f.getsampwidth(), f.getframerate(), f.getnframes()
        raw = f.readframes(frames)
    if len(raw) != frames * channels * width:
        raise ValueError(f"audio file {str(path)!r} is truncated: the header announces {frames} frames, "
                         f"the data holds {len(raw) // max(channels * width, 1)}")
    if width == 1:  # 8-bit WAV is unsigned, centred at 128
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 3:  # little-endian 24-bit: sign-extend the top byte
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / float(1 << 23)
    elif width == 4:
        x = (np.frombuffer(raw, dtype="<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    else:  # pragma: no cover - wave itself refuses other widths
        raise wave.Error(f"unsupported sample width {width} bytes")
    return torch.from_numpy(x.reshape(-1, channels).T.copy()), int(rate)


def load_audio(path: str | os.PathLike) -> tuple[Tensor, int]:
    """``(waveform [channels, T] float32 in [-1, 1], sample_rate_hz)`` of an audio file.

    Integer PCM WAV (8/16/24/32-bit) is read with the standard library (no extra package). Other
    formats (float or WAVE_FORMAT_EXTENSIBLE WAV, FLAC, OGG/Vorbis, AIFF, ...) are read with
    ``soundfile`` (libsndfile; ``pip install 'fusebench[audio]'``) when it is installed. Anything
    else raises ``ValueError`` naming the file and what is supported (convert e.g. MP4/AAC with
    ``ffmpeg -i in.m4a out.wav``). torchaudio is not used for reading: its ``load`` needs TorchCodec.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"audio file {str(p)!r} does not exist")
    try:
        wav, rate = _read_pcm_wav(p)
    except (wave.Error, EOFError) as e:  # not an integer PCM WAV: try libsndfile
        pcm_problem = str(e) or "too short for a WAV header"
    else:
        if wav.shape[1] == 0:
            raise ValueError(f"audio file {str(p)!r} holds no samples")
        return wav, rate
    try:
        import soundfile
    except ImportError:
        raise ValueError(
            f"cannot read audio file {str(p)!r}: it is not an integer PCM WAV ({pcm_problem}), the only format "
            f"read without extra packages; for float WAV, FLAC, OGG, AIFF install soundfile "
            f"(pip install 'fusebench[audio]'), or convert it: ffmpeg -i {p.name} out.wav") from None
    try:
        data, rate = soundfile.read(str(p), dtype="float32", always_2d=True)  # [T, channels]
    except Exception as e:  # noqa: BLE001 - libsndfile's errors: report them with the file name
        raise ValueError(
            f"cannot read audio file {str(p)!r}: not an integer PCM WAV ({pcm_problem}) and libsndfile "
            f"refuses it ({e}); supported: PCM WAV, and with soundfile WAV/FLAC/OGG/AIFF and the other "
            f"libsndfile formats; convert others with ffmpeg -i {p.name} out.wav") from e
    if data.shape[0] == 0:
        raise ValueError(f"audio file {str(p)!r} holds no samples")
    return torch.from_numpy(data.T.copy()), int(rate)


# what str.splitlines treats as a line break besides "\n": inside a line, a space
_INLINE_BREAKS = str.maketrans({c: " " for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def _text_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file, split on ``"\\n"`` only (a trailing ``"\\r"`` goes with it), each
    stripped of surrounding whitespace. ``str.splitlines`` and universal newlines also split on a lone
    ``"\\r"``, U+2028/U+2029, U+0085, ``\\x0b``, ``\\x0c`` and ``\\x1c``-``\\x1e``, which turned one line of the
    file into several outputs and shifted every later one against the other modalities (output i =
    line i). Those characters stay in their line, each replaced by a space (what they separate are words)."""
    with open(path, encoding="utf-8", newline="") as fh:  # newline="": no translation of a lone CR
        text = fh.read()
    return [ln.translate(_INLINE_BREAKS).strip() for ln in text.split("\n")]


#: the ``format`` of a feature file the command line writes
FEATURES_FORMAT = "fusebench-features/1"
#: the provenance keys that decide the features (the weights' path and the inputs do not)
_IDENTITY_KEYS = ("extractor", "model_type", "weights_sha256", "settings")


def _identity(provenance: dict[str, Any]) -> dict[str, Any]:
    return {k: provenance.get(k) for k in _IDENTITY_KEYS}


def load_features(path: str | os.PathLike, like: dict[str, Any] | None = None) -> tuple[list[Tensor], dict[str, Any]]:
    """``(features, provenance)`` of a feature file written by the command line: ``{"format", "provenance",
    "inputs", "features"}`` read with ``torch.load(weights_only=True)`` (no pickled code runs).

    ``provenance``: ``extractor``, ``model_type``, ``weights`` (the folder's path), ``weights_sha256`` (sha256 over
    the folder's config / weights / tokenizer files), ``settings`` (layer, max_length, sample rate, image size,
    projection, ...) and ``fusebench_version``. ``like``: the provenance of another feature file (or of an
    extractor, ``ext.provenance``); a file whose extractor, model type, weights or settings differ is refused, so
    features of two models are never mixed silently. Anything else raises ``ValueError`` naming the file."""
    p = Path(path)
    try:
        data = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - unreadable, not a torch file, or pickled code: one line naming the file
        raise ValueError(f"cannot read feature file {str(p)!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                         ) from None
    if not (isinstance(data, dict) and data.get("format") == FEATURES_FORMAT and isinstance(data.get("provenance"), dict)
            and isinstance(data.get("features"), list) and all(isinstance(f, Tensor) and f.dim() == 2
                                                               for f in data["features"])):
        raise ValueError(f"{str(p)!r} is not a feature file of format {FEATURES_FORMAT!r} (a dict with provenance and "
                         f"a list of [T_i, d] tensors, written by python -m fusebench.encoders.extractors)")
    prov = data["provenance"]
    if like is not None:
        mine, theirs = _identity(prov), _identity(like)
        diff = [k for k in _IDENTITY_KEYS if mine[k] != theirs[k]]
        if diff:
            raise ValueError(f"feature file {str(p)!r} was made with other {' / '.join(diff)} ({_identity_line(mine)}) "
                             f"than expected ({_identity_line(theirs)}): features of different extractions are not "
                             f"mixed")
    return data["features"], prov


def _identity_line(ident: dict[str, Any]) -> str:
    digest = ident.get("weights_sha256")
    return (f"{ident.get('extractor')}, model {ident.get('model_type')}, weights sha256 "
            f"{digest[:12] if isinstance(digest, str) else digest}, settings {ident.get('settings')}")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m fusebench.encoders.extractors",
                                     description="Extract feature sequences (see module docstring).")
    parser.add_argument("kind", choices=["text", "audio", "lld", "vision"])
    parser.add_argument("--weights", help="local folder written by save_pretrained (text/audio/vision)")
    parser.add_argument("--input", nargs="+", required=True,
                        help="text: a .txt file, one utterance per line; audio/lld: audio files (PCM WAV; "
                             "FLAC/OGG/float WAV with soundfile); "
                             "vision: .npy files of frames [T, H, W, 3] uint8")
    parser.add_argument("--output", required=True, help="output .pt file: [T_i, d] tensors with their provenance (read with load_features); an existing "
                             "one made with other weights or settings is refused")
    parser.add_argument("--projection", action="store_true", help="vision: CLIP projected image embedding")
    ns = parser.parse_args(argv)
    # a setting is used or refused: --weights with lld or --projection with text/audio would be ignored silently
    if ns.weights is not None and ns.kind == "lld":
        parser.error("--weights: the lld extractor uses no weights (torchaudio descriptors only)")
    if ns.projection and ns.kind != "vision":
        parser.error(f"--projection: only the vision extractor uses it, not {ns.kind}")
    out = Path(ns.output)
    # before minutes of extraction, not after (the output is renamed into place at the end)
    if out.is_dir():
        parser.error(f"--output {ns.output}: is a folder; expected a .pt file path")
    if not out.parent.is_dir():
        parser.error(f"--output {ns.output}: the folder {str(out.parent)!r} does not exist")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        parser.error(f"--output {ns.output}: the folder {str(out.parent)!r} is not writable")
    def refuse_other_extraction(provenance: dict[str, Any]) -> None:
        """An existing --output is replaced only by the same extraction (extractor, weights, settings): a rerun
        with another model or settings is refused (before extracting) rather than silently replacing the file
        other features were made alongside; a file that is not a feature file is not overwritten either."""
        if out.exists():
            try:
                load_features(out, like=provenance)
            except ValueError as e:
                raise ValueError(f"--output {ns.output} exists and is not replaced: {e}; delete it or write "
                                 f"to another file") from None

    try:
        feats: list[Tensor] = []
        provenance: dict[str, Any]
        if ns.kind == "text":
            ext = TextExtractor(ns.weights)
            provenance = ext.provenance
            refuse_other_extraction(provenance)
            for f in ns.input:
                try:
                    lines = _text_lines(Path(f))
                except (OSError, UnicodeDecodeError) as e:
                    raise ValueError(f"cannot read text file {f!r}: {e}") from None
                while lines and not lines[-1]:
                    lines.pop()  # trailing blank lines
                blank = [i + 1 for i, ln in enumerate(lines) if not ln]
                if blank:  # dropping them would shift every later utterance against the other modalities
                    raise ValueError(f"{f}: line {blank[0]} is empty ({len(blank)} empty lines); one utterance per "
                                     f"line, output i = line i")
                feats += ext(lines, progress=True)
        elif ns.kind in ("audio", "lld"):
            ext_a: Any = HubertExtractor(ns.weights) if ns.kind == "audio" else LowLevelAudioExtractor()
            provenance = ext_a.provenance
            refuse_other_extraction(provenance)
            for f in ns.input:
                wav, sr = load_audio(f)
                try:
                    feats.append(ext_a(wav, sr))
                except ValueError as e:
                    raise ValueError(f"{f}: {e}") from None
        else:
            import numpy as np

            ext_v = CLIPExtractor(ns.weights, projection=ns.projection)
            provenance = ext_v.provenance
            refuse_other_extraction(provenance)
            for f in ns.input:
                try:
                    arr = np.load(f, allow_pickle=False)
                except (OSError, ValueError) as e:
                    raise ValueError(f"cannot read frames file {f!r}: {e}") from None
                if arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[-1] != 3:
                    raise ValueError(f"{f}: frames must be a uint8 array [T, H, W, 3], got {arr.dtype} "
                                     f"{tuple(arr.shape)}")
                frames = torch.from_numpy(arr).permute(0, 3, 1, 2).float() / 255.0
                try:
                    feats.append(ext_v(frames))
                except ValueError as e:
                    raise ValueError(f"{f}: {e}") from None
        from fusebench.io import atomic_write
        from fusebench.version import __version__

        data = {"format": FEATURES_FORMAT,
                "provenance": {**provenance, "kind": ns.kind, "fusebench_version": __version__},
                "inputs": [str(Path(f).resolve()) for f in ns.input], "features": feats}
        atomic_write(out, lambda name: torch.save(data, name), by_name=True)  # whole or not at all
    except (ValueError, OSError) as e:  # bad input, a missing or unreadable --input file, an unwritable --output
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted; {ns.output} not written", file=sys.stderr)
        return 130
    print(f"wrote {len(feats)} feature sequences to {ns.output}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["FEATURES_FORMAT", "CLIPExtractor", "HubertExtractor", "LowLevelAudioExtractor", "TextExtractor", "load_audio",
           "load_features", "main"]
