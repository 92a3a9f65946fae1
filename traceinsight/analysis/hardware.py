"""Published peak throughput and memory bandwidth of accelerators: what a kernel could reach at best.

Two uses. The `fp32_compute` estimate needs "how much faster would these kernels run in
16-bit on Tensor Cores": the ratio of the GPU's dense FP16/BF16 Tensor Core peak to
the peak of the precision the kernels use now (FP32 on CUDA cores, or TF32 on
Tensor Cores), by compute capability (`PEAKS`: the SXM / flagship part of each). The ratio
is an upper bound for a kernel: memory-bound kernels gain less, which the projection says.
MFU and the roofline need the peaks of the very device a trace ran on (`DEVICES`,
`device_peaks`): its dense peak per dtype and its memory bandwidth, whose ratio is the
ridge point between memory- and compute-bound kernels.

Figures are dense (no sparsity) from the vendors' data sheets; where a data sheet gives only
the sparse figure (NVIDIA's "with sparsity" asterisk) the dense one is half of it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec

from traceinsight.rules import first_then

if TYPE_CHECKING:
    from traceinsight.events import DeviceInfo


class PeakThroughput(msgspec.Struct, frozen=True):
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


# --------------------------------------------------------------------------- peaks of the device a trace ran on

# The dtypes a peak is given for, as `rules.PRECISION_RULES` names them (int8 in TOP/s; fp6 and fp4: the MX / NV
# block-scaled formats, which only Blackwell and CDNA 4 multiply natively).
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4")


class DevicePeaks(msgspec.Struct, frozen=True):
    """One part's dense peaks in TFLOP/s (int8: TOP/s; None where the part has no such unit) and its memory
    bandwidth, with the data sheet they come from. `compute_capability`, `units` (SMs / CUs) and `memory_gb` tell
    the part from its siblings when a trace's name does not."""

    name: str
    fp32: float | None  # FP32 without Tensor / matrix cores (CUDA cores, vector ALUs)
    tf32: float | None
    bf16: float | None
    fp16: float | None
    fp8: float | None
    int8: float | None
    memory_tbps: float  # HBM / GDDR bandwidth, TB/s
    source: str
    compute_capability: tuple[int, int] | None = None  # NVIDIA: CUDA's; AMD: gfx major.minor as HIP reports it
    units: int | None = None
    memory_gb: float | None = None
    fp6: float | None = None  # FP6 / MXFP6 Tensor Core, dense (None: the part computes it in a wider type)
    fp4: float | None = None  # FP4 / MXFP4 / NVFP4 Tensor Core, dense

    @property
    def vendor(self) -> str:
        """'nvidia', 'amd' or 'google', from the part's name."""
        return "amd" if self.name.startswith("MI") else "google" if self.name.startswith("TPU") else "nvidia"

    def peak(self, dtype: str) -> float | None:
        """The peak for `dtype` (one of `DTYPES`), None where the part has none or the dtype is not one we know."""
        return getattr(self, dtype) if dtype in DTYPES else None


_H100_SHEET = "NVIDIA H100 Tensor Core GPU data sheet, https://www.nvidia.com/en-us/data-center/h100/"
_H200_SHEET = "NVIDIA H200 Tensor Core GPU data sheet, https://www.nvidia.com/en-us/data-center/h200/"
_A100_SHEET = (
    "NVIDIA A100 Tensor Core GPU data sheet, https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/"
    "pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_V100_SHEET = (
    "NVIDIA Tesla V100 GPU Accelerator data sheet, "
    "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
)
# An MI250X / MI250 module holds two GCDs, which ROCm shows as two devices (a trace's device is one GCD: 110 / 104
# CUs, 64 GB), so their entries are half the module's data sheet figures.
_PER_GCD = " (per GCD: half the module's figures)"

DEVICES: tuple[DevicePeaks, ...] = (
    DevicePeaks("V100 SXM2", 15.7, None, None, 125.0, None, None, 0.9, _V100_SHEET, (7, 0), 80, 32),
    DevicePeaks("V100 PCIe", 14.0, None, None, 112.0, None, None, 0.9, _V100_SHEET, (7, 0), 80, 32),
    DevicePeaks(
        "V100S PCIe",
        16.4,
        None,
        None,
        130.0,
        None,
        None,
        1.134,
        "NVIDIA V100S data sheet, https://www.nvidia.com/en-us/data-center/v100/",
        (7, 0),
        80,
        32,
    ),  # fmt: skip
    DevicePeaks(
        "T4",
        8.1,
        None,
        None,
        65.0,
        None,
        130.0,
        0.32,
        "NVIDIA T4 Tensor Core GPU data sheet, https://www.nvidia.com/en-us/data-center/tesla-t4/",
        (7, 5),
        40,
        16,
    ),  # fmt: skip
    DevicePeaks("A100 SXM4 40GB", 19.5, 156.0, 312.0, 312.0, None, 624.0, 1.555, _A100_SHEET, (8, 0), 108, 40),
    DevicePeaks("A100 SXM4 80GB", 19.5, 156.0, 312.0, 312.0, None, 624.0, 2.039, _A100_SHEET, (8, 0), 108, 80),
    DevicePeaks("A100 PCIe 40GB", 19.5, 156.0, 312.0, 312.0, None, 624.0, 1.555, _A100_SHEET, (8, 0), 108, 40),
    DevicePeaks("A100 PCIe 80GB", 19.5, 156.0, 312.0, 312.0, None, 624.0, 1.935, _A100_SHEET, (8, 0), 108, 80),
    DevicePeaks(
        "A10",
        31.2,
        62.5,
        125.0,
        125.0,
        None,
        250.0,
        0.6,
        "NVIDIA A10 Tensor Core GPU data sheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
        (8, 6),
        72,
        24,
    ),  # fmt: skip
    DevicePeaks(
        "L4",
        30.3,
        60.0,
        121.0,
        121.0,
        242.5,
        242.5,
        0.3,
        "NVIDIA L4 Tensor Core GPU data sheet, https://www.nvidia.com/en-us/data-center/l4/",
        (8, 9),
        58,
        24,
    ),  # fmt: skip
    DevicePeaks(
        "L40S",
        91.6,
        183.0,
        362.05,
        362.05,
        733.0,
        733.0,
        0.864,
        "NVIDIA L40S GPU data sheet, https://www.nvidia.com/en-us/data-center/l40s/",
        (8, 9),
        142,
        48,
    ),  # fmt: skip
    DevicePeaks("H100 SXM", 67.0, 494.5, 989.5, 989.5, 1979.0, 1979.0, 3.35, _H100_SHEET, (9, 0), 132, 80),
    DevicePeaks("H100 PCIe", 51.0, 378.0, 756.5, 756.5, 1513.0, 1513.0, 2.0, _H100_SHEET, (9, 0), 114, 80),
    DevicePeaks("H100 NVL", 60.0, 417.5, 835.5, 835.5, 1670.5, 1670.5, 3.9, _H100_SHEET, (9, 0), 132, 94),
    DevicePeaks("H200 SXM", 67.0, 494.5, 989.5, 989.5, 1979.0, 1979.0, 4.8, _H200_SHEET, (9, 0), 132, 141),
    DevicePeaks("H200 NVL", 60.0, 417.5, 835.5, 835.5, 1670.5, 1670.5, 4.8, _H200_SHEET, (9, 0), 132, 141),
    DevicePeaks(
        "B200",
        80.0,
        1100.0,
        2250.0,
        2250.0,
        4500.0,
        4500.0,
        8.0,
        "NVIDIA Blackwell data sheet, HGX B200 column, https://www.nvidia.com/en-us/data-center/hgx/ (FP6 at the FP8 "
        "rate, FP4 twice it: 72 and 144 PFLOPS with sparsity for 8 GPUs)",
        (10, 0),
        148,
        180,
        fp6=4500.0,
        fp4=9000.0,
    ),  # fmt: skip
    DevicePeaks(
        "MI250X GCD",
        23.95,
        None,
        191.5,
        191.5,
        None,
        191.5,
        1.6384,
        "AMD Instinct MI250X accelerator specifications, "
        "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html" + _PER_GCD,
        (9, 0),
        110,
        64,
    ),  # fmt: skip
    DevicePeaks(
        "MI250 GCD",
        22.65,
        None,
        181.05,
        181.05,
        None,
        181.05,
        1.6384,
        "AMD Instinct MI250 accelerator specifications, "
        "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250.html" + _PER_GCD,
        (9, 0),
        104,
        64,
    ),  # fmt: skip
    DevicePeaks(
        "MI300X",
        163.4,
        653.7,
        1307.4,
        1307.4,
        2614.9,
        2614.9,
        5.3,
        "AMD Instinct MI300X accelerator data sheet, "
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
        (9, 4),
        304,
        192,
    ),  # fmt: skip
    DevicePeaks(
        "MI355X",
        157.3,
        None,
        2516.6,
        2516.6,
        5033.2,
        5033.2,
        8.0,
        "AMD Instinct MI355X GPU specifications, "
        "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html (MXFP6 and MXFP4: 10.1 PFLOPS, twice "
        "the FP8 rate)",
        (9, 5),
        256,
        288,
        fp6=10066.4,
        fp4=10066.4,
    ),  # fmt: skip
    # TPUs: one device per chip (v4 and v5p chips hold two TensorCores run as one megacore); no FP32 / FP16 / FP8
    # peak is published (FP32 matmuls run as several bf16 passes).
    DevicePeaks(
        "TPU v4",
        None,
        None,
        275.0,
        None,
        None,
        275.0,
        1.2,
        "Cloud TPU v4 system architecture, https://cloud.google.com/tpu/docs/v4",
    ),  # fmt: skip
    DevicePeaks(
        "TPU v5e",
        None,
        None,
        197.0,
        None,
        None,
        393.0,
        0.819,
        "Cloud TPU v5e system architecture, https://cloud.google.com/tpu/docs/v5e",
    ),  # fmt: skip
    DevicePeaks(
        "TPU v5p",
        None,
        None,
        459.0,
        None,
        None,
        918.0,
        2.765,
        "Cloud TPU v5p system architecture, https://cloud.google.com/tpu/docs/v5p",
    ),  # fmt: skip
    DevicePeaks(
        "TPU v6e",
        None,
        None,
        918.0,
        None,
        None,
        1836.0,
        1.638,
        "Cloud TPU v6e (Trillium) system architecture, https://cloud.google.com/tpu/docs/v6e",
    ),  # fmt: skip
)
_BY_NAME = {d.name: d for d in DEVICES}

# A trace's device name -> the entries it may be (searched case-insensitively, first match wins; several: told
# apart by SM / CU count, then memory). Names as CUDA / HIP / XProf give them: "NVIDIA H100 80GB HBM3", "Tesla
# V100-SXM2-16GB", "Tesla V100-DGXS-32GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PG509-200" (an SXM4 40 GB board),
# "AMD Instinct MI250X / MI250", "TPU v5 lite" (v5e; plain "TPU v5" is v5p), "TPU v6 lite" (v6e, Trillium).
# "GH200" / "GB200" are other parts (their own clocks and memory), hence the lookbehinds.
# "A, then B" is `first_then`'s linear-time form: a name repeating A is searched in one pass.
_NAME_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), names)
    for pattern, names in (
        (r"V100S", ("V100S PCIe",)),
        (first_then("V100", "PCIe", "."), ("V100 PCIe",)),
        (r"V100", ("V100 SXM2",)),
        (r"\bT4\b", ("T4",)),
        (first_then("A100", "PCIe", "."), ("A100 PCIe 40GB", "A100 PCIe 80GB")),
        (r"A100", ("A100 SXM4 40GB", "A100 SXM4 80GB")),
        (r"\bA10\b", ("A10",)),
        (r"\bL4\b", ("L4",)),
        (r"\bL40S\b", ("L40S",)),
        (first_then("H100", "PCIe", "."), ("H100 PCIe",)),
        (first_then("H100", "NVL", "."), ("H100 NVL",)),
        (r"(?<![A-Z])H100", ("H100 SXM",)),
        (first_then("(?<![A-Z])H200", "NVL", "."), ("H200 NVL",)),
        (r"(?<![A-Z])H200", ("H200 SXM",)),
        (r"(?<![A-Z])B200", ("B200",)),
        (r"MI250X\s*/\s*MI250", ("MI250X GCD", "MI250 GCD")),
        (r"MI250X", ("MI250X GCD",)),
        (r"MI250", ("MI250 GCD",)),
        (r"MI300X", ("MI300X",)),
        (r"MI355X", ("MI355X",)),
        (r"TPU\s*v4", ("TPU v4",)),
        (r"TPU\s*v5\s*(?:lite|e\b)|v5litepod", ("TPU v5e",)),
        (r"TPU\s*v5", ("TPU v5p",)),
        (r"TPU\s*v6|Trillium", ("TPU v6e",)),
    )
)


def _pick(candidates: list[DevicePeaks], info: DeviceInfo) -> DevicePeaks | None:
    """The candidate with the device's SM / CU count (any when it is unknown), nearest in memory; None when the
    count matches none of them."""
    if info.sm_count:
        candidates = [d for d in candidates if d.units in (None, info.sm_count)]
    if not candidates:
        return None
    named_gb = re.search(r"(?<!\d)(\d++)\s*+GB", info.name or "", re.IGNORECASE)
    gb = info.memory_bytes / 1e9 if info.memory_bytes else float(named_gb.group(1)) if named_gb else None
    if gb is None:
        return candidates[0]
    return min(candidates, key=lambda d: abs((d.memory_gb or gb) - gb))  # min keeps the first of equals


def device_peaks(info: DeviceInfo) -> DevicePeaks | None:
    """The entry of `DEVICES` for a trace's device: by its name; where the name tells no part (none, empty, or one
    without a model number such as ROCm's "AMD Radeon Graphics"), by its compute capability and SM / CU count, of
    the trace's vendor when it gives one. None for a part not in the table, so that figures are shown without a
    peak ratio rather than against another part's peak (a GeForce card shares its compute capability with a
    data-center part, not its peaks; an NVIDIA 9.0 is an H100, an AMD 9.0 an MI250)."""
    name = (info.name or "").strip()
    for pattern, names in _NAME_PATTERNS:
        if pattern.search(name):
            return _pick([_BY_NAME[n] for n in names], info)
    cc = parse_compute_capability(info.compute_capability)
    if cc is None or re.search(r"\d", name):
        return None
    vendor = (info.vendor or "").lower()
    vendors = ("amd",) if "amd" in vendor else ("nvidia",) if "nvidia" in vendor else ("amd", "nvidia")
    same_cc = [d for d in DEVICES if d.compute_capability == cc and d.vendor in vendors]
    if not info.sm_count and len({d.vendor for d in same_cc}) > 1:
        return None
    return _pick(same_cc, info)


def ridge_point(peaks: DevicePeaks, dtype: str) -> float | None:
    """FLOP per byte from which a kernel in `dtype` is compute-bound on this part (peak / memory bandwidth: the
    roofline's knee); None where the part has no peak for `dtype`."""
    peak = peaks.peak(dtype)
    return None if peak is None else peak / peaks.memory_tbps
