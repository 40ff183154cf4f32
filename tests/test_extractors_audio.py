"""Audio loading and the low-level audio descriptors (``fusebench.encoders.extractors``) on WAV files
written here with the standard library's ``wave`` from known signals (no real .wav is among the
fixtures). Expected values are worked out independently: the samples from the integers written, the
RMS of a sine (A / sqrt 2), the spectral centroid and the MFCCs with numpy from their definitions,
and the command line end to end (in-process and as ``python -m``)."""

from __future__ import annotations

import math
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from fusebench.encoders.extractors import LowLevelAudioExtractor, load_audio, load_features, main

SR = 16_000


def write_wav(path: Path, ints: np.ndarray, width: int, rate: int) -> Path:
    """``ints [T, channels]`` as little-endian integer PCM of ``width`` bytes (8-bit: unsigned)."""
    if width == 1:
        data = (ints + 128).astype(np.uint8).tobytes()
    elif width == 3:
        v = ints.astype(np.int64) & 0xFFFFFF
        data = np.stack([v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF], axis=-1).astype(np.uint8).tobytes()
    else:
        data = ints.astype({2: "<i2", 4: "<i4"}[width]).tobytes()
    with wave.open(str(path), "wb") as f:
        f.setnchannels(ints.shape[1])
        f.setsampwidth(width)
        f.setframerate(rate)
        f.writeframes(data)
    return path


def sine_ints(freq_hz: float, amp: float, rate: int, seconds: float, full_scale: int) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return np.round(amp * full_scale * np.sin(2 * np.pi * freq_hz * t)).astype(np.int64)[:, None]


# ------------------------------------------------------------------------------------------ loading
@pytest.mark.parametrize("width,full_scale", [(1, 127), (2, 32767), (3, 2**23 - 1), (4, 2**31 - 1)])
def test_load_pcm_wav_every_width(tmp_path, width, full_scale):
    left = sine_ints(440.0, 0.9, 8000, 0.05, full_scale)
    right = -left // 2
    path = write_wav(tmp_path / "s.wav", np.concatenate([left, right], axis=1), width, 8000)
    wav, rate = load_audio(path)
    assert rate == 8000 and wav.dtype == torch.float32 and tuple(wav.shape) == (2, 400)
    scale = {1: 128.0, 2: 32768.0, 3: 2.0**23, 4: 2.0**31}[width]
    want = np.stack([left[:, 0], right[:, 0]]) / scale
    np.testing.assert_allclose(wav.numpy(), want, rtol=0, atol=1e-7)
    assert float(wav.abs().max()) <= 1.0


def test_load_audio_errors_name_the_file(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="missing.wav.*does not exist"):
        load_audio(tmp_path / "missing.wav")
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio, just text in a file named .wav\n")
    with pytest.raises(ValueError, match=r"notes\.wav.*not an integer PCM WAV"):
        load_audio(text)
    empty = write_wav(tmp_path / "empty.wav", np.zeros((0, 1), dtype=np.int64), 2, SR)
    with pytest.raises(ValueError, match="empty.wav.*no samples"):
        load_audio(empty)
    # a truncated data chunk: the header announces more frames than the file holds
    good = write_wav(tmp_path / "cut.wav", sine_ints(100.0, 0.5, SR, 0.1, 32767), 2, SR)
    good.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(ValueError, match="cut.wav.*truncated"):
        load_audio(good)
    # without soundfile a non-PCM file says what to install
    monkeypatch.setitem(sys.modules, "soundfile", None)
    with pytest.raises(ValueError, match=r"notes\.wav.*pip install 'fusebench\[audio\]'"):
        load_audio(text)


def test_load_float_wav_and_flac_with_soundfile(tmp_path):
    sf = pytest.importorskip("soundfile")
    x = (0.25 * np.sin(2 * np.pi * 300.0 * np.arange(800) / 8000)).astype(np.float32)
    sf.write(str(tmp_path / "f.wav"), x, 8000, subtype="FLOAT")  # IEEE float WAV: stdlib wave refuses it
    wav, rate = load_audio(tmp_path / "f.wav")
    assert rate == 8000 and tuple(wav.shape) == (1, 800)
    np.testing.assert_array_equal(wav[0].numpy(), x)
    ints = np.round(x * 32767).astype(np.int16)
    sf.write(str(tmp_path / "f.flac"), ints, 8000, subtype="PCM_16")
    wav, rate = load_audio(tmp_path / "f.flac")
    np.testing.assert_allclose(wav[0].numpy(), ints / 32768.0, atol=1e-7, rtol=0)


# ------------------------------------------------------------------------------------------ descriptors
def hann_frames(w: np.ndarray, n_fft: int = 512, win: int = 400, hop: int = 160) -> np.ndarray:
    """Centred STFT frames (reflect padding n_fft / 2) times a periodic Hann window of ``win`` samples
    zero-padded to ``n_fft`` in the middle: ``[T', n_fft]``."""
    pad = np.pad(w, n_fft // 2, mode="reflect")
    count = 1 + (len(pad) - n_fft) // hop
    frames = np.stack([pad[i * hop: i * hop + n_fft] for i in range(count)])
    hann = np.zeros(n_fft)
    left = (n_fft - win) // 2
    hann[left: left + win] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)
    return frames * hann


def mfcc_by_hand(w: np.ndarray, n_mfcc: int = 13, n_mels: int = 40, n_fft: int = 512) -> np.ndarray:
    """MFCC from the definitions: |STFT|^2, HTK-mel triangular filters on [0, SR/2] (no area
    normalisation), log(mel + 1e-6), orthonormal DCT-II."""
    power = np.abs(np.fft.rfft(hann_frames(w, n_fft), axis=1)) ** 2  # [T', n_fft/2 + 1]
    freqs = np.linspace(0, SR / 2, n_fft // 2 + 1)
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    pts = 700.0 * (10 ** (np.linspace(mel(0.0), mel(SR / 2), n_mels + 2) / 2595.0) - 1.0)
    fb = np.zeros((len(freqs), n_mels))
    for m in range(n_mels):
        lo, mid, hi = pts[m], pts[m + 1], pts[m + 2]
        fb[:, m] = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
    logmel = np.log(power @ fb + 1e-6)
    n = np.arange(n_mels)
    dct = np.array([np.cos(np.pi / n_mels * (n + 0.5) * k) for k in range(n_mfcc)])  # [n_mfcc, n_mels]
    dct *= np.sqrt(2.0 / n_mels)
    dct[0] *= 1 / np.sqrt(2.0)
    return logmel @ dct.T


def test_lld_features_of_a_sine_wav_by_hand(tmp_path):
    amp, freq = 0.5, 1000.0
    ints = sine_ints(freq, amp, SR, 1.0, 32767)
    path = write_wav(tmp_path / "tone.wav", ints, 2, SR)
    wav, rate = load_audio(path)
    feats = LowLevelAudioExtractor()(wav, rate)
    assert tuple(feats.shape) == (1 + SR // 160, 15)  # centred frames every 10 ms
    w = ints[:, 0] / 32768.0
    # log RMS energy: a 512-sample frame holds 32 whole periods of the 1 kHz tone, so away from the
    # reflected edges its RMS is that of the sine, A / sqrt(2) (A after 16-bit rounding)
    a_q = np.abs(w).max()
    mid = feats[5:-5]
    np.testing.assert_allclose(mid[:, 13].numpy(), math.log(a_q / math.sqrt(2)), atol=2e-4)
    frames = np.stack([np.pad(w, 256, mode="reflect")[i * 160: i * 160 + 512] for i in range(feats.shape[0])])
    np.testing.assert_allclose(feats[:, 13].numpy(), np.log(np.sqrt((frames ** 2).mean(1)) + 1e-8), atol=1e-4)
    # spectral centroid: magnitude-weighted mean frequency of the Hann-windowed frame, ~ the tone
    mag = np.abs(np.fft.rfft(hann_frames(w), axis=1))
    centroid = (mag * np.linspace(0, SR / 2, 257)).sum(1) / mag.sum(1)
    np.testing.assert_allclose(feats[:, 14].numpy(), centroid, rtol=1e-4)
    assert np.abs(feats[5:-5, 14].numpy() - freq).max() < 0.02 * freq
    # MFCCs from the definitions
    np.testing.assert_allclose(feats[:, :13].numpy(), mfcc_by_hand(w), atol=2e-3, rtol=1e-4)


def test_lld_stereo_8khz_wav_is_mixed_and_resampled(tmp_path):
    left = sine_ints(500.0, 0.6, 8000, 1.0, 32767)
    path = write_wav(tmp_path / "st.wav", np.concatenate([left, left], axis=1), 2, 8000)
    wav, rate = load_audio(path)
    assert rate == 8000 and tuple(wav.shape) == (2, 8000)
    feats = LowLevelAudioExtractor()(wav, rate)
    assert tuple(feats.shape) == (101, 15)  # 16000 samples after resampling to 16 kHz
    # resampling keeps the in-band tone: RMS A / sqrt 2 (within the resampling filter's ripple), centroid ~ 500 Hz
    np.testing.assert_allclose(feats[10:-10, 13].numpy(), math.log(0.6 / math.sqrt(2)), atol=0.02)
    assert np.abs(feats[10:-10, 14].numpy() - 500.0).max() < 25.0


# ------------------------------------------------------------------------------------------ command line
def test_lld_command_line_end_to_end(tmp_path, capsys):
    path = write_wav(tmp_path / "tone.wav", sine_ints(1000.0, 0.5, SR, 0.5, 32767), 2, SR)
    path2 = write_wav(tmp_path / "tone8k.wav", sine_ints(700.0, 0.3, 8000, 0.25, 127), 1, 8000)
    out = tmp_path / "lld.pt"
    assert main(["lld", "--input", str(path), str(path2), "--output", str(out)]) == 0
    feats, _ = load_features(out)
    assert [tuple(f.shape) for f in feats] == [(51, 15), (26, 15)]
    ext = LowLevelAudioExtractor()
    for f, p in zip(feats, (path, path2)):
        torch.testing.assert_close(f, ext(*load_audio(p)))
    # an unreadable file: exit status 2, one line naming the file, nothing written
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF0000WAVEjunk")
    out2 = tmp_path / "never.pt"
    assert main(["lld", "--input", str(path), str(bad), "--output", str(out2)]) == 2
    err = capsys.readouterr().err
    assert "bad.wav" in err and "Traceback" not in err and not out2.exists()


def test_lld_module_command_in_a_subprocess(tmp_path):
    write_wav(tmp_path / "t.wav", sine_ints(1000.0, 0.5, SR, 0.2, 32767), 2, SR)
    r = subprocess.run([sys.executable, "-m", "fusebench.encoders.extractors", "lld", "--input", "t.wav",
                        "--output", "o.pt"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    feats, _ = load_features(tmp_path / "o.pt")
    assert len(feats) == 1 and tuple(feats[0].shape) == (21, 15)
