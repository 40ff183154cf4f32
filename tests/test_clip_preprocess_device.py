"""CLIPExtractor.preprocess keeps the frames' device (its normalisation constants are made there)."""
import types

import torch

from fusebench.encoders.extractors import CLIP_MEAN, CLIP_STD, CLIPExtractor


def test_preprocess_makes_its_constants_on_the_frames_device() -> None:
    fake = types.SimpleNamespace(image_size=8)
    out = CLIPExtractor.preprocess(fake, torch.empty(2, 3, 10, 12, device="meta"))  # any non-CPU device
    assert out.device.type == "meta" and tuple(out.shape) == (2, 3, 8, 8)
    ones = CLIPExtractor.preprocess(fake, torch.ones(1, 3, 8, 8))  # values: (1 - mean) / std per channel
    want = torch.tensor([(1 - m) / s for m, s in zip(CLIP_MEAN, CLIP_STD)])
    torch.testing.assert_close(ones[0, :, 0, 0], want)
