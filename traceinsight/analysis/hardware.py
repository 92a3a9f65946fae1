"""Published peak throughput of NVIDIA GPUs, by compute capability: what mixed precision can win.

The `fp32_compute` estimate needs "how much faster would these kernels run in
16-bit on Tensor Cores": the ratio of the GPU's dense FP16/BF16 Tensor Core peak to
the peak of the precision the kernels use now (FP32 on CUDA cores, or TF32 on
Tensor Cores). Figures are dense (no sparsity) TFLOPS from NVIDIA's data sheets
for the SXM / flagship part of each compute capability. The ratio is an upper
bound for a kernel: memory-bound kernels gain less, which the projection says.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PeakThroughput:
    gpu: str  # the part the figures are for
    fp32_tflops: float
    tf32_tflops: float | None  # None: no TF32 Tensor Cores
    fp16_tensor_tflops: float  # FP16 (or BF16) Tensor Core, dense


# compute capability -> peaks. Sources: V100 (7.0), T4 (7.5), A100 (8.0), A10 (8.6), L40S (8.9), H100 SXM (9.0),
# B200 (10.0) data sheets.
PEAKS: dict[tuple[int, int], PeakThroughput] = {
    (7, 0): PeakThroughput("V100", 15.7, None, 125.0),
    (7, 5): PeakThroughput("T4", 8.1, None, 65.0),
    (8, 0): PeakThroughput("A100", 19.5, 156.0, 312.0),
    (8, 6): PeakThroughput("A10", 31.2, 62.5, 125.0),
    (8, 9): PeakThroughput("L40S", 91.6, 183.0, 362.0),
    (9, 0): PeakThroughput("H100 SXM", 67.0, 495.0, 989.0),
    (10, 0): PeakThroughput("B200", 80.0, 1100.0, 2250.0),
}
# Tensor Cores exist from compute capability 7.0 (Volta).
MIN_TENSOR_CORE_CC = (7, 0)


def parse_compute_capability(text: str | None) -> tuple[int, int] | None:
    """'8.0' / '8.6' / '9' -> (8, 0) / (8, 6) / (9, 0); None when it cannot be read."""
    if not text:
        return None
    major, _, minor = str(text).strip().partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return None


def peaks_for(cc: tuple[int, int] | None) -> PeakThroughput | None:
    """The peaks of this compute capability, else of the nearest older one of the same major version."""
    if cc is None:
        return None
    if cc in PEAKS:
        return PEAKS[cc]
    same_major = [k for k in PEAKS if k[0] == cc[0] and k <= cc]
    return PEAKS[max(same_major)] if same_major else None


def mixed_precision_speedup(cc: tuple[int, int] | None) -> tuple[float, str] | None:
    """Upper bound on how much faster FP32 matmul/conv kernels run in FP16/BF16 on Tensor Cores, with the
    words saying where it comes from; None where the GPU has no Tensor Cores or is unknown."""
    peaks = peaks_for(cc)
    if cc is None or peaks is None or cc < MIN_TENSOR_CORE_CC:
        return None
    ratio = peaks.fp16_tensor_tflops / peaks.fp32_tflops
    words = (
        f"{peaks.gpu}-class GPU (compute capability {cc[0]}.{cc[1]}): FP16/BF16 Tensor Core peak "
        f"{peaks.fp16_tensor_tflops:g} vs FP32 {peaks.fp32_tflops:g} TFLOPS, so eligible FP32 kernels run at most "
        f"{ratio:.1f}x faster; memory-bound kernels gain less, so this is an upper bound"
    )
    return ratio, words
