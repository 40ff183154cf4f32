"""The device ``fusebench bench`` measures on: the chip's dense peaks (NVIDIA data sheets) by device name, and
the header lines that say which machine, GPU and libraries the figures come from."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING

from fusebench.machine import cpu_model

if TYPE_CHECKING:  # imported where used: `fusebench bench gpu --help` imports no torch
    import torch

#: dense peaks in TFLOP/s (NVIDIA data sheets, no sparsity) by a substring of the device name, first match wins:
#: fp32 = the CUDA cores (precision ``32``, TF32 off), tf32 / bf16 = the tensor cores (fp16 has bf16's peak)
PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0}),
    ("H100 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.0}),
    ("H100", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4}),  # SXM ("NVIDIA H100 80GB HBM3")
    ("H200", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4}),  # H200 and GH200: H100 SXM's compute
    ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0}),
)
PEAK_KIND = {"32": "fp32", "tf32": "tf32", "bf16-mixed": "bf16", "16-mixed": "bf16"}


def peaks_for_name(name: str) -> dict[str, float] | None:
    """The dense peaks (TFLOP/s) by precision kind of the GPU called ``name``; None when it is not in :data:`PEAKS`."""
    return next((dict(p) for key, p in PEAKS if key in name), None)


def device_peaks(device: torch.device) -> dict[str, float] | None:
    import torch

    return peaks_for_name(torch.cuda.get_device_name(device)) if device.type == "cuda" else None


def machine_line(device: torch.device) -> str:
    """The device (GPU name, memory, SMs; CUDA, cuDNN and torch versions), else the CPU and its threads."""
    import torch

    common = f"torch {torch.__version__}, Python {platform.python_version()}, CPU {cpu_model()}"
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return (f"GPU {p.name} ({p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs), "
                f"CUDA {torch.version.cuda}, cuDNN {cudnn}, {common}")
    return f"device cpu, {torch.get_num_threads()} torch threads, {common}"


def peak_line(device: torch.device) -> str:
    peaks = device_peaks(device)
    if peaks is None:
        return "dense peak: unknown for this device (no % of peak)"
    return ("dense peak (NVIDIA data sheet, no sparsity): " +
            ", ".join(f"{k} {v:g} TFLOP/s" for k, v in peaks.items()))


__all__ = ["PEAKS", "PEAK_KIND", "device_peaks", "machine_line", "peak_line", "peaks_for_name"]
