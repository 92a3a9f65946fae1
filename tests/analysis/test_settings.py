"""`settings_seen` on real captures: what each run is known to have done, from outside our code.

The oracles: `run_info.json` beside each of our before/after pairs (the settings `tools/capture_pairs.py`
ran with), the `run_info.json` and README of the shared TF CPU profiles, the XSpace files' own stats
(read raw here, as the event table does not keep them), the shared-trace README, and kernel and
runtime names read by hand (quoted in each test). Where a trace cannot show a setting the capture
used, the test asserts that the key is absent, and says why.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import SAMPLE_TRACES, shared_trace
from traceinsight.analysis.settings import Seen, settings_seen
from traceinsight.discover import discover
from traceinsight.events import Profile
from traceinsight.load import load_run
from traceinsight.readers.xplane_schema import XSpace

PAIRS = SAMPLE_TRACES / "pairs"
PAIR_SIDES = sorted(str(p.relative_to(PAIRS)) for p in PAIRS.glob("*/*") if (p / "run_info.json").is_file())
TF_CPU_A = "tf_cpu/a_input_bound"
TF_CPU_B = "tf_cpu/b_input_tuned"
RESNET_NW0 = "kineto/resnet50_num_workers_0"
RESNET_NW4 = "kineto/resnet50_num_workers_4"
OWLV2 = "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@cache
def _profile(path: Path) -> Profile:
    return load_run(discover(path), path)


def _seen(path: Path) -> Seen:
    profile = _profile(path)
    return settings_seen(profile.events, profile.framework)


def _pair(side: str) -> Seen:
    folder = PAIRS / side
    if not folder.is_dir():
        pytest.skip(f"sample_traces/pairs/{side} not present")
    return _seen(folder)


def _shared(relative: str) -> Seen:
    return _seen(shared_trace(relative))


def _largest(precision_ns: dict[str, int]) -> str:
    """The precision with the most eligible kernel time."""
    return max(precision_ns.items(), key=lambda item: item[1])[0]


def _stage_stats(folder: Path) -> dict[str, dict[str, int]]:
    """tf.data stage name -> its integer stats (``parallelism`` ...), straight from the XSpace file."""
    stats: dict[str, dict[str, int]] = {}
    for path in folder.glob("plugins/profile/*/*.xplane.pb"):
        space = XSpace()
        space.ParseFromString(path.read_bytes())
        for plane in space.planes:
            stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
            for line in plane.lines:
                for event in line.events:
                    metadata = plane.event_metadata[event.metadata_id]
                    if metadata.name.startswith("Iterator::") and metadata.name not in stats:
                        stats[metadata.name] = {
                            stat_names.get(s.metadata_id, ""): s.int64_value or s.uint64_value for s in event.stats
                        }
    return stats


# --------------------------------------------------------------------------- our before/after pairs


@pytest.mark.parametrize("side", PAIR_SIDES)
def test_pairs_agree_with_the_settings_they_were_captured_with(side):
    """Every setting run_info.json records and the trace can show is read back as recorded."""
    seen = _pair(side)
    info = json.loads((PAIRS / side / "run_info.json").read_text())
    settings = info["settings"]
    checked = 0
    for key in ("prefetch", "map_parallel", "interleave_parallel"):
        if key in settings:
            assert seen.input[key] is settings[key], (key, seen.evidence.get(key))
            checked += 1
    if "tf_function" in settings:
        assert seen.run["graph"] is settings["tf_function"], seen.evidence.get("graph")
        checked += 1
    if "num_workers" in settings:
        assert seen.input["dataloader"] == ("multiprocess" if settings["num_workers"] > 0 else "single_process")
        checked += 1
    if side.startswith("torch_small_batch/"):  # in-memory slices: no DataLoader, so no DataLoader key
        assert "(no DataLoader)" in info["pipeline"]
        assert "dataloader" not in seen.input
    elif side == "tf_tuned/after":  # its settings are in the pipeline only: test_tf_tuned_warm_cache_hides_the_map
        assert info["pipeline"] == "range(384)->map(py_function, AUTOTUNE)->cache->batch(16)->prefetch(AUTOTUNE)"
    else:
        assert checked


def test_pairs_named_in_the_issue():
    before = _pair("tf_prefetch_slow_map/before")  # "sequential slow map, already ends in prefetch(AUTOTUNE)"
    assert before.input["prefetch"] is True
    assert before.input["map_parallel"] is False
    assert _pair("tf_interleave/before").input["interleave_parallel"] is False
    assert _pair("tf_interleave/after").input["interleave_parallel"] is True
    assert _pair("torch_dataloader_2workers_bound/before").input["dataloader"] == "multiprocess"  # num_workers=2
    assert _pair("torch_dataloader_workers/before").input["dataloader"] == "single_process"  # num_workers=0
    assert _pair("tf_eager_vs_function/before").run["graph"] is False  # step run eagerly
    assert _pair("tf_eager_vs_function/after").run["graph"] is True  # the same step under tf.function


def test_tf_tuned_warm_cache_hides_the_map():
    """range->map(py_function, AUTOTUNE)->cache->batch->prefetch, profiled in epoch 2 with the cache warm.

    Prefetch and cache show. The parallel map ran only in epoch 1: the trace's stages are
    Root, Prefetch, BatchV2, MemoryCache and MemoryCacheImpl, nothing below the cache runs and no
    py_function op either, so `map_parallel` and `map_function_py` cannot be told and are absent.
    """
    seen = _pair("tf_tuned/after")
    assert seen.input["prefetch"] is True
    assert seen.input["cache"] is True
    assert "MemoryCache" in seen.evidence["cache"]
    assert "map_parallel" not in seen.input
    assert "map_function_py" not in seen.input


def test_interleave_with_sequential_inner_maps():
    """tf_interleave: each file's dataset maps sequentially, inside a (parallel, after) interleave."""
    info = json.loads((PAIRS / "tf_interleave/after/run_info.json").read_text())
    assert "map(py_function, sequential)" in info["pipeline"]
    seen = _pair("tf_interleave/after")
    assert seen.input["map_parallel"] is False
    assert "ParallelInterleaveV4" in seen.evidence["map_parallel"]  # the Map stage inside the interleave
    assert seen.input["map_function_py"] is True


def test_stage_names_agree_with_the_xspace_parallelism_stats():
    """The pairs' map and interleave stages carry a `parallelism` stat in the raw file (AUTOTUNE: 2 or 4 on
    the capture machine; a sequential Map has none): the parallel ones are the ones we call parallel."""
    for side in ("tf_prefetch_slow_map/after", "tf_data_parallel/after", "tf_interleave/after"):
        stats = _stage_stats(PAIRS / side)
        parallel = {name: s["parallelism"] for name, s in stats.items() if s.get("parallelism")}
        assert parallel and all(p > 1 for p in parallel.values()), parallel
        seen = _pair(side)
        key = "interleave_parallel" if "interleave" in side else "map_parallel"
        assert seen.input[key] is True
        assert seen.evidence[key] in parallel


# --------------------------------------------------------------------------- shared real traces


def test_tf_cpu_input_bound():
    """range->map(slow py_function, sequential)->batch(32), no prefetch, which tf.data fused into MapAndBatch.

    The fused stage keeps its parallelism only in an XSpace stat (1 here, read from the file), not in
    the event table; what the table shows is that its 319 py_function calls never overlapped, so the
    map is sequential. The trace's stages are Root, MapAndBatch and Range: tf.data's default prefetch
    injection added no Prefetch stage to this pipeline, so `prefetch` is False as the trace says.
    """
    folder = shared_trace(TF_CPU_A)
    stats = _stage_stats(folder)
    assert stats["Iterator::Root::MapAndBatch"]["parallelism"] == 1
    assert not any("Prefetch" in name for name in stats)
    seen = _shared(TF_CPU_A)
    assert seen.input["map_parallel"] is False
    assert "MapAndBatch" in seen.evidence["map_parallel"]
    assert seen.input["prefetch"] is False
    assert seen.input["cache"] is False
    assert seen.input["map_function_py"] is True  # slow_decode:EagerPyFunc
    assert seen.run["graph"] is True  # Keras' multi_step_on_iterator tf.function
    assert seen.run["xla"] is False


def test_tf_cpu_input_tuned():
    """map(py_function, AUTOTUNE)->cache->batch(32)->prefetch(AUTOTUNE), profiled in epoch 2 (cache warm).

    Prefetch and cache show (Iterator::Root::Prefetch, ...::MemoryCache). The map's stage and its
    py_function calls do not: the warm cache serves every element, so nothing below it runs in the
    window and `map_parallel` is absent rather than the True the pipeline was built with.
    """
    seen = _shared(TF_CPU_B)
    assert seen.input["prefetch"] is True
    assert seen.input["cache"] is True
    assert "map_parallel" not in seen.input
    assert not any("Map" in name for name in _stage_stats(shared_trace(TF_CPU_B)))


def test_resnet_dataloaders_and_pageable_copies():
    """The same ResNet-50 job with num_workers 4 and 0; both copy batches from pageable memory (README:
    "HtoD copies are pageable"), so pin_memory is False; fp32 cuDNN / volta_sgemm kernels throughout."""
    four, zero = _shared(RESNET_NW4), _shared(RESNET_NW0)
    assert four.input["dataloader"] == "multiprocess"
    assert zero.input["dataloader"] == "single_process"
    for seen in (four, zero):
        assert seen.input["pin_memory"] is False
        assert seen.run["mixed_precision"] is False
        assert seen.run["low_precision_share"] == 0.0
        assert set(seen.kernel_precision_ns) == {"fp32"}
        assert seen.run["torch_compile"] is False
        assert seen.run["cuda_graphs"] is False  # cudaLaunchKernel only


def test_nccl_trace_runs_tf32_not_mixed_precision():
    """hta/nccl_parser_config (A100): its GEMMs are cutlass_80_tensorop_s1688gemm_* and cuDNN
    sm80_xmma_*_tf32f32_tf32f32_f32_* kernels, i.e. fp32 data on Tensor Cores via TF32; nothing 16-bit."""
    seen = _shared("hta/nccl_parser_config")
    assert seen.run["mixed_precision"] is False
    assert seen.run["low_precision_share"] == 0.0
    precision = seen.kernel_precision_ns
    assert _largest(precision) == "tf32"
    assert "s1688gemm" in seen.evidence["mixed_precision"]


@pytest.mark.parametrize("trace", [OWLV2, QWEN])
def test_h100_inference_runs_bf16(trace):
    """OWLv2: cutlass_75_tensorop_bf16_s1688gemm_bf16_* and sm90_xmma_gemm_bf16bf16_*; Qwen: the same
    sm90 bf16 GEMM and pytorch_flash::flash_fwd_kernel on cutlass::bfloat16_t, beside one tiny fp32
    cutlass_80_simt_sgemm."""
    seen = _shared(trace)
    assert seen.run["mixed_precision"] is True
    assert float(seen.run["low_precision_share"]) > 0.99
    assert _largest(seen.kernel_precision_ns) == "bf16"


def test_b200_vllm_trace():
    """vLLM MoE step on B200: MX-FP4 bmm_MxE4m3_MxE2m1* / bmm_Bfloat16_MxE2m1* GEMMs, fp8 fmhaSm100a
    attention, bf16 nvjet_tst GEMMs: all narrower than fp32. Its "eager" mode still runs a compiled
    region ("## Call CompiledFxGraph ...", "Torch-Compiled Region: 0/1", a triton_poi_fused_* kernel)
    and launches every kernel itself (cudaLaunchKernel, cuLaunchKernelEx; no graph launch)."""
    seen = _shared("tracelens/b200")
    assert seen.run["mixed_precision"] is True
    assert seen.run["low_precision_share"] == 1.0
    assert _largest(seen.kernel_precision_ns) == "fp4"
    assert seen.run["torch_compile"] is True
    assert seen.run["cuda_graphs"] is False


def test_hta_test_trace_compiles_and_replays_graphs():
    """hta/trace_diff/test: CompiledFunction / CompiledFunctionBackward ops (AOTAutograd) and 12
    cudaGraphLaunch runtime calls; its H2D copies are all "Pinned -> Device"."""
    seen = _shared("hta/trace_diff/test")
    assert seen.run["torch_compile"] is True
    assert seen.run["cuda_graphs"] is True
    assert seen.evidence["cuda_graphs"] == "cudaGraphLaunch"
    assert seen.input["pin_memory"] is True


def test_jax_traces_run_xla():
    """JAX on MI300X (jit_forward_3d_conv, a hipBLASLt Cijk_..._BBS_BH bf16 GEMM) and on TPU (jit_f)."""
    mi300 = _shared("tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb")
    assert mi300.run["xla"] is True
    assert mi300.run["mixed_precision"] is True
    assert _shared("xprof/test_xplanes/tpu_inference_2.xplane.pb").run["xla"] is True


def test_cpu_only_trace_says_nothing_it_cannot_see():
    """No GPU, no DataLoader: no copy, precision, graph or DataLoader key is guessed."""
    seen = _shared("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert seen.input == {}
    assert not {"cuda_graphs", "mixed_precision", "low_precision_share"} & set(seen.run)
    assert seen.kernel_precision_ns == {}


# --------------------------------------------------------------------------- contract


@pytest.mark.parametrize(
    "side", ["tf_tuned/after", "tf_interleave/before", "torch_dataloader_workers/before", "tf_eager_vs_function/before"]
)
def test_values_are_plain_python_and_every_key_has_evidence(side):
    seen = _pair(side)
    assert set(seen.evidence) == set(seen.input) | set(seen.run)
    for value in (*seen.input.values(), *seen.run.values()):
        assert type(value) in (bool, str, int, float)


def test_only_rows_the_table_has_count():
    """A table cut to fewer rows keeps every name category; names no row has any more are not evidence."""
    profile = _profile(PAIRS / "tf_prefetch_slow_map/before")
    events = profile.events
    names = events["name"].astype(str)
    without_map = events[~names.str.endswith("::Map").to_numpy() & ~names.str.endswith("::Map::Range").to_numpy()]
    assert len(without_map["name"].cat.categories) == len(events["name"].cat.categories)
    seen = settings_seen(without_map, "tensorflow")
    assert "map_parallel" not in seen.input
    assert seen.input["prefetch"] is True


def test_unknown_framework_reads_the_same_names():
    for side in ("tf_prefetch_slow_map/before", "torch_dataloader_workers/after"):
        profile = _profile(PAIRS / side)
        assert settings_seen(profile.events, "unknown").input == settings_seen(profile.events, profile.framework).input


def test_empty_table_and_bad_framework():
    events = _profile(PAIRS / "tf_tuned/after").events
    assert settings_seen(events.iloc[:0], "tensorflow") == Seen()
    with pytest.raises(ValueError):
        settings_seen(events, "mxnet")
    unnamed = events.assign(
        name=pd.Categorical.from_codes([-1] * len(events), categories=events["name"].cat.categories)
    )
    assert settings_seen(unnamed, "tensorflow") == Seen()  # rows without names show no setting


def test_two_dataloaders_the_longer_waited_on_wins():
    """Both DataLoader kinds in one table (the num_workers=0 and =4 captures side by side): the one whose
    events take longer is reported, counted here by plain string matching over the rows."""
    tables = [
        _profile(PAIRS / side).events for side in ("torch_dataloader_workers/before", "torch_dataloader_workers/after")
    ]
    both = pd.concat(tables, ignore_index=True)
    both["name"] = both["name"].astype(str).astype("category")
    names = both["name"].astype(str)
    single = both["dur_ns"][names.str.contains("_SingleProcessDataLoaderIter")].sum()
    multi = both["dur_ns"][names.str.contains("_MultiProcessingDataLoaderIter")].sum()
    assert single > 0 and multi > 0
    expected = "single_process" if single > multi else "multiprocess"
    assert settings_seen(both, "pytorch").input["dataloader"] == expected
