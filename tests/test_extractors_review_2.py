"""Review tests (2) of the feature-extractor command line: one output per line of a text file, weights of
another model or without their tokenizer refused, options an extractor ignores refused, --output checked first.
Tiny random models written with save_pretrained into tmp_path (offline, fast)."""
from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch

from fusebench.encoders.extractors import HubertExtractor, TextExtractor, load_features, main

tf = pytest.importorskip("transformers")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "one", "two", "three", "four"]


def tiny_bert(folder, vocab=True):
    cfg = tf.BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    tf.BertModel(cfg).save_pretrained(folder)
    if vocab:
        (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return folder


def tiny_hubert(folder, layers=1):
    cfg = tf.HubertConfig(hidden_size=16, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=32,
                          conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
                          num_conv_pos_embedding_groups=2)
    tf.HubertModel(cfg).save_pretrained(folder)
    return folder


def test_text_line_separators_other_than_newline_stay_in_their_line(tmp_path):
    w = tiny_bert(tmp_path / "bert")
    # 3 lines: U+2028, form feed, \x1c, U+0085, \x0b and a lone CR are inside lines; CRLF ends line 2
    (tmp_path / "t.txt").write_bytes("one\u2028two\x0cthree\ntwo\x1cfour\x85one\r\nthree\x0bone\rfour\n".encode())
    assert main(["text", "--weights", str(w), "--input", str(tmp_path / "t.txt"), "--output", str(tmp_path / "o.pt")]) == 0
    feats, _ = load_features(tmp_path / "o.pt")
    # before: splitlines gave 9 outputs; now one per line, [CLS] + 3 words + [SEP] each (no [UNK] needed)
    assert [f.shape[0] for f in feats] == [5, 5, 5]
    ext = TextExtractor(w)
    assert torch.allclose(feats[0], ext(["one two three"])[0], atol=1e-5)


def test_audio_refuses_a_bert_folder_before_loading(tmp_path, capsys):
    w = tiny_bert(tmp_path / "bert")
    wav = tmp_path / "a.wav"
    with wave.open(str(wav), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(16000)
        f.writeframes((np.sin(np.arange(1600) / 5) * 8000).astype("<i2").tobytes())
    rc = main(["audio", "--weights", str(w), "--input", str(wav), "--output", str(tmp_path / "o.pt")])
    assert rc == 2 and not (tmp_path / "o.pt").exists()  # before: rc 0, random HuBERT features
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: HubertExtractor: weights folder {str(w)!r} holds a model of type 'bert' (config.json model_type), "
        f"this extractor needs 'hubert'")
    with pytest.raises(ValueError, match="model of type 'hubert'.*needs 'bert'"):
        TextExtractor(tiny_hubert(tmp_path / "hub"))


def test_missing_weights_of_the_model_are_refused(tmp_path):
    w = tiny_hubert(tmp_path / "hub")
    HubertExtractor(w)  # complete: loads
    cfg = json.loads((w / "config.json").read_text())
    cfg["num_hidden_layers"] = 2  # layer 1 is not in the checkpoint: it would be random
    (w / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as e:
        HubertExtractor(w)
    msg = str(e.value)
    assert msg.startswith(f"HubertExtractor: weights folder {str(w)!r} (model type 'hubert') lacks ")
    assert "'encoder.layers.1." in msg and "random" in msg


def test_bert_without_pooler_is_accepted(tmp_path):
    cfg = tf.BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    tf.BertModel(cfg, add_pooling_layer=False).save_pretrained(tmp_path / "b")
    (tmp_path / "b" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    assert TextExtractor(tmp_path / "b")(["one two"])[0].shape == (4, 16)  # the pooler is not in the features


def test_bert_without_vocabulary_is_refused(tmp_path, capsys):
    w = tiny_bert(tmp_path / "bert", vocab=False)
    (tmp_path / "t.txt").write_text("one two\n")
    rc = main(["text", "--weights", str(w), "--input", str(tmp_path / "t.txt"), "--output", str(tmp_path / "o.pt")])
    assert rc == 2 and not (tmp_path / "o.pt").exists()  # before: rc 0, every word [UNK]
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: TextExtractor: weights folder {str(w)!r} has no tokenizer: neither vocab.txt nor tokenizer.json "
        f"(save the tokenizer too: tokenizer.save_pretrained(folder))")


@pytest.mark.parametrize("argv, message", [
    (["lld", "--weights", "w"], "--weights: the lld extractor uses no weights (torchaudio descriptors only)"),
    (["lld", "--projection"], "--projection: only the vision extractor uses it, not lld"),
    (["text", "--weights", "w", "--projection"], "--projection: only the vision extractor uses it, not text"),
    (["audio", "--weights", "w", "--projection"], "--projection: only the vision extractor uses it, not audio"),
])
def test_options_the_extractor_ignores_are_refused(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(argv + ["--input", "a.wav", "--output", str(tmp_path / "o.pt")])
    assert e.value.code == 2 and not (tmp_path / "o.pt").exists()
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {message}")


def test_output_folder_is_refused_before_extracting(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:  # the input does not exist: the output is checked first
        main(["lld", "--input", str(tmp_path / "missing.wav"), "--output", str(tmp_path)])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: --output {tmp_path}: is a folder; "
                                                              f"expected a .pt file path")
