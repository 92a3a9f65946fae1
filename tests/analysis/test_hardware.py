"""Device peaks: every accelerator of the real traces resolves to its data-sheet entry, names and compute
capabilities resolve as the vendors spell them, and the older per-compute-capability table still agrees."""

import pytest

from tests.conftest import shared_trace
from traceinsight.analysis.hardware import (
    DEVICES,
    DTYPES,
    PEAKS,
    device_peaks,
    mixed_precision_speedup,
    ridge_point,
)
from traceinsight.discover import choose_run
from traceinsight.events import DeviceInfo
from traceinsight.load import load_run

# One trace per distinct (name, vendor, compute capability, SM / CU count) in ../shared/traces, with the part it ran
# on (from the trace's README and the device properties it records). The other traces repeat one of these devices.
REAL_DEVICES = [
    ("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "MI250 GCD"),  # "AMD Radeon Graphics", gfx90a, 104 CUs
    ("hta/nccl_parser_config/nccl_data.json.gz", "A100 SXM4 40GB"),  # "NVIDIA A100-PG509-200", 40 GB
    ("hta/trace_diff/control/control.json.gz", "A100 SXM4 40GB"),
    ("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "V100 SXM2"),  # Tesla V100-SXM2-32GB
    ("hta/trace_diff/test/test.json.gz", "V100 SXM2"),  # Tesla V100-SXM2-16GB
    ("kineto/gpu_metrics/gpu_metrics_input.json", "V100 SXM2"),  # Tesla V100-DGXS-32GB
    ("inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "MI300X"),  # "AMD Instinct MI300X"
    ("inference/vllm_decode_full/graph_execution.json.gz", "MI300X"),  # name "", no vendor, 9.4, 304 CUs
    ("tracelens/b200/eager_trace.json.gz", "B200"),
    ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "H100 SXM"),  # "NVIDIA H100 80GB HBM3"
    ("tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb", "MI300X"),  # XSpace: no name, vendor AMD, 9.4
    ("xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb", "V100 SXM2"),  # XSpace: no name, 7.0, 80 SMs
    ("xprof/test_xplanes/tpu_inference_2.xplane.pb", "TPU v6e"),  # "TPU v6 Lite"
]


@pytest.mark.parametrize(("relative", "expected"), REAL_DEVICES)
def test_real_trace_devices_resolve(relative: str, expected: str) -> None:
    path = shared_trace(relative)
    devices = load_run(choose_run(path).run, path, 1).devices
    described = [d for d in devices.values() if d.name or d.compute_capability]  # not a bare stream-only device
    assert described
    for info in described:
        peaks = device_peaks(info)
        assert peaks is not None and peaks.name == expected, info


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (DeviceInfo("GPU:0", "NVIDIA A100-SXM4-80GB"), "A100 SXM4 80GB"),
        (DeviceInfo("GPU:0", "NVIDIA A100-SXM4-40GB", "Nvidia", "8.0", 108, 42_505_273_344), "A100 SXM4 40GB"),
        (DeviceInfo("GPU:0", "NVIDIA A100 80GB PCIe"), "A100 PCIe 80GB"),
        (DeviceInfo("GPU:0", "NVIDIA A100-PCIE-40GB"), "A100 PCIe 40GB"),
        (DeviceInfo("GPU:0", "Tesla V100-PCIE-16GB"), "V100 PCIe"),
        (DeviceInfo("GPU:0", "Tesla V100S-PCIE-32GB"), "V100S PCIe"),
        (DeviceInfo("GPU:0", "NVIDIA H100 PCIe", "Nvidia", "9.0", 114), "H100 PCIe"),
        (DeviceInfo("GPU:0", "NVIDIA H100 NVL"), "H100 NVL"),
        (DeviceInfo("GPU:0", "NVIDIA H200"), "H200 SXM"),
        (DeviceInfo("GPU:0", "NVIDIA H200 NVL"), "H200 NVL"),
        (DeviceInfo("GPU:0", "NVIDIA L4", "Nvidia", "8.9", 58), "L4"),
        (DeviceInfo("GPU:0", "NVIDIA L40S"), "L40S"),
        (DeviceInfo("GPU:0", "Tesla T4"), "T4"),
        (DeviceInfo("GPU:0", "AMD Instinct MI250X / MI250", "AMD", "9.0", 110), "MI250X GCD"),
        (DeviceInfo("GPU:0", "AMD Instinct MI250X/MI250", "AMD", "9.0", 104), "MI250 GCD"),
        (DeviceInfo("GPU:0", "AMD Instinct MI355X"), "MI355X"),
        (DeviceInfo("TPU:0", "TPU v4"), "TPU v4"),
        (DeviceInfo("TPU:0", "TPU v5 lite"), "TPU v5e"),
        (DeviceInfo("TPU:0", "TPU v5e"), "TPU v5e"),
        (DeviceInfo("TPU:0", "TPU v5"), "TPU v5p"),
        (DeviceInfo("TPU:0", "TPU v5p"), "TPU v5p"),
        (DeviceInfo("TPU:0", "Trillium"), "TPU v6e"),
        # no name: compute capability and SM count, of the vendor the trace gives
        (DeviceInfo("GPU:0", None, "Nvidia", "9.0", 132, 85_018_279_936), "H100 SXM"),
        (DeviceInfo("GPU:0", None, "AMD", "9.0", 104), "MI250 GCD"),
        (DeviceInfo("GPU:0", "", None, "9.0", 110), "MI250X GCD"),
        (DeviceInfo("GPU:0", None, None, "8.9", 142), "L40S"),
        (DeviceInfo("GPU:0", None, None, "10.0"), "B200"),
    ],
)
def test_names_resolve(info: DeviceInfo, expected: str) -> None:
    peaks = device_peaks(info)
    assert peaks is not None and peaks.name == expected


@pytest.mark.parametrize(
    "info",
    [
        DeviceInfo("GPU:0", "NVIDIA GeForce RTX 4090", "Nvidia", "8.9", 128),  # an 8.9 part, not an L40S
        DeviceInfo("GPU:0", "NVIDIA A10G", "Nvidia", "8.6", 80),  # not the A10
        DeviceInfo("GPU:0", "NVIDIA GH200 480GB", "Nvidia", "9.0", 132),  # its own clocks and memory
        DeviceInfo("GPU:0", None, None, "9.0"),  # an H100 or an MI250: no SM count to tell
        DeviceInfo("GPU:0", None, "Nvidia", "8.9", 76),  # an 8.9 with neither an L4's nor an L40S's SMs
        DeviceInfo("GPU:0", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "Nvidia", "9.0", 16),  # a MIG slice
        DeviceInfo("TPU:0", "TPU v3"),
        DeviceInfo("GPU:0"),
    ],
)
def test_unknown_devices_have_no_peaks(info: DeviceInfo) -> None:
    assert device_peaks(info) is None


def test_table_is_dense_and_sourced() -> None:
    assert len({d.name for d in DEVICES}) == len(DEVICES)
    for d in DEVICES:
        assert d.source and d.memory_tbps > 0, d.name
        sixteen_bit = d.bf16 or d.fp16
        assert sixteen_bit, d.name  # every part listed has 16-bit matrix units
        assert d.fp32 is None or sixteen_bit > d.fp32, d.name
        assert d.peak("bogus") is None
        # A narrower block-scaled format runs at least as fast as FP8 where the part multiplies it natively.
        assert all(d.peak(n) is None or d.peak(n) >= (d.fp8 or 0) for n in ("fp6", "fp4")), d.name


def test_fp4_and_fp6_peaks_only_where_the_data_sheet_gives_them() -> None:
    """Hopper multiplies MXFP4 weights in bf16 (no FP4 Tensor Cores): no peak. B200: FP6 at the FP8 rate and FP4
    twice it (HGX B200, 72 / 144 PFLOPS sparse for 8 GPUs); MI355X: MXFP6 and MXFP4 10.1 PFLOPS."""
    by_name = {d.name: d for d in DEVICES}
    assert by_name["H100 SXM"].peak("fp4") is None and by_name["MI300X"].peak("fp6") is None
    b200 = by_name["B200"]
    assert (b200.peak("fp6"), b200.peak("fp4")) == (b200.fp8, 2 * b200.fp8) == (4500.0, 9000.0)
    assert by_name["MI355X"].peak("fp4") == pytest.approx(10_100, rel=0.01)


def test_ridge_point() -> None:
    h100 = device_peaks(DeviceInfo("GPU:0", "NVIDIA H100 80GB HBM3"))
    assert h100 is not None
    assert ridge_point(h100, "bf16") == pytest.approx(989.5 / 3.35)  # TFLOP/s over TB/s = FLOP per byte
    assert ridge_point(h100, "fp8") == pytest.approx(2 * 989.5 / 3.35)
    v100 = device_peaks(DeviceInfo("GPU:0", "Tesla V100-SXM2-16GB"))
    assert (
        v100 is not None
        and ridge_point(v100, "bf16") is None
        and ridge_point(v100, "fp32") == pytest.approx(15.7 / 0.9)
    )
    assert all(ridge_point(d, dtype) is None or ridge_point(d, dtype) > 1 for d in DEVICES for dtype in DTYPES)


def test_mixed_precision_table_agrees_with_devices() -> None:
    """`PEAKS` (the flagship part of each compute capability, for the mixed-precision estimate) and `DEVICES` give
    the same FP32 and FP16 peaks to the rounding of their data sheets, and the estimate is unchanged."""
    flagship = {"V100": "V100 SXM2", "H100 SXM": "H100 SXM", "A100": "A100 SXM4 80GB"}
    by_name = {d.name: d for d in DEVICES}
    for peaks in PEAKS.values():
        device = by_name[flagship.get(peaks.gpu, peaks.gpu)]
        assert device.fp32 == pytest.approx(peaks.fp32_tflops, rel=0.01)
        assert device.fp16 == pytest.approx(peaks.fp16_tensor_tflops, rel=0.01)
        assert device.tf32 == pytest.approx(peaks.tf32_tflops, rel=0.01) if peaks.tf32_tflops else device.tf32 is None
    speedup = mixed_precision_speedup((7, 0))
    assert speedup is not None and speedup[0] == pytest.approx(125 / 15.7)
