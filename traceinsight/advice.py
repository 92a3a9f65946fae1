"""What to change for each bottleneck: one table of tips keyed by rule, framework and workload, and the choice of
the tips that fit a run.

A tip is only worth reading when it fits the run: a TensorFlow run is never told about `torch.compile`, an
inference server never about gradient accumulation or DDP's buckets, and no run about a setting the trace already
shows in place. So each row of `TABLE` names the rule (`findings.RULES` ids), the framework its tips are written
for (``pytorch``, ``tensorflow``, ``jax``, or ``any``: framework-neutral words) and the workload they fit
(``training``, ``inference``, ``server`` or ``any``; `analysis/capture.py` claims a workload only on positive
evidence, else it is ``unknown`` and only ``any`` rows fit). A ``server`` row may name the serving framework whose
knobs it gives (vLLM, SGLang, TGI, TensorRT-LLM); a ``cpu_only`` row replaces its framework's rows on a run with
no accelerator. Each `Tip` then reads what the run already does (`analysis/settings.py` keys) and is dropped
where that setting is in place, or given only where it applies (DDP's tips need DDP's reducer in the trace).

`tips_for` chooses the rows: a server's own rows where the rule has them; else the run's framework's rows that fit
its workload (a CPU-only run's own rows first); else the framework-neutral rows; and, for a run whose framework is
unknown and a rule with no neutral row, each framework's first tip, named.
"""

from __future__ import annotations

from typing import Any

import msgspec

from traceinsight.analysis import Analysis
from traceinsight.rules import AMPERE_CC, DEFAULT_BATCH_FACTOR

FRAMEWORK_ROWS = ("pytorch", "tensorflow", "jax", "any")
WORKLOAD_ROWS = ("training", "inference", "server", "any")


class Tip(msgspec.Struct, frozen=True):
    """One piece of advice that depends on what the run already does (`analysis/settings.py` keys): dropped
    when any of `skip_if` is seen in place, given only when one of `only_if` is (if it has any).
    `{function}` names the input pipeline's slowest user function, `{batch_factor}` the batch growth assumed."""

    text: str
    skip_if: tuple[tuple[str, bool | str], ...] = ()
    only_if: tuple[tuple[str, bool | str], ...] = ()
    stage: str | None = None  # the tf.data stage kind it speeds up: it comes first when that stage is the slowest
    # Given only on NVIDIA GPUs of at least / below this compute capability (bf16 and TF32 arrive with Ampere, 8.0);
    # on a run whose GPU is unknown every variant is given.
    cc_at_least: tuple[int, int] | None = None
    cc_below: tuple[int, int] | None = None
    # Given only where the trace shows one of these settings at all (a DataLoader, tf.data stages, DDP), or none of
    # them: advice about an input pipeline goes only where the trace shows that pipeline.
    only_with: tuple[str, ...] = ()
    unless_with: tuple[str, ...] = ()
    # Given only where the finding's evidence holds this key true (what its figures say is worth doing).
    when: str | None = None

    def applies(
        self, seen: dict[str, Any], cc: tuple[int, int] | None = None, evidence: dict[str, Any] | None = None
    ) -> bool:
        if self.when is not None and not (evidence or {}).get(self.when):
            return False
        if any(seen.get(key) == value for key, value in self.skip_if):
            return False
        if self.only_with and not any(key in seen for key in self.only_with):
            return False
        if any(key in seen for key in self.unless_with):
            return False
        if cc is not None and not (self.cc_at_least or (0, 0)) <= cc < (self.cc_below or (99, 0)):
            return False
        return not self.only_if or any(seen.get(key) == value for key, value in self.only_if)


class Row(msgspec.Struct, frozen=True):
    """The tips `rule` gives a run of `framework` doing `workload` (see the module docstring)."""

    rule: str
    framework: str  # one of FRAMEWORK_ROWS
    workload: str  # one of WORKLOAD_ROWS
    tips: tuple[str | Tip, ...]
    server: str | None = None  # workload "server": the serving framework whose knobs these are (None: any server)
    cpu_only: bool = False  # given instead of the framework's other rows on a run with no accelerator

    @property
    def key(self) -> tuple[str, str, str, str | None, bool]:
        return self.rule, self.framework, self.workload, self.server, self.cpu_only


# The settings that say the trace shows a DataLoader / tf.data stages / DDP (`analysis/settings.py` keys).
DATALOADER = "dataloader"
TF_DATA = ("prefetch", "cache", "map_parallel", "interleave_parallel")
DDP = "ddp"
_DDP_ONLY = ((DDP, True),)

# Words for the settings a sentence names (analysis/settings.py keys).
SETTING_WORDS = {
    "prefetch": "prefetch",
    "map_parallel": "a parallel map",
    "interleave_parallel": "parallel interleave",
    "cache": "a cache",
    "pin_memory": "pinned memory",
    "graph": "graph mode (tf.function)",
    "xla": "XLA",
    "torch_compile": "torch.compile",
    "cuda_graphs": "CUDA graphs",
    "mixed_precision": "mixed precision",
    "ddp": "DDP",
}

# What compiles a step, in each framework's words (an assumption names only the run's own).
COMPILED_STEP = {"pytorch": "torch.compile", "tensorflow": "tf.function", "jax": "jax.jit"}

_PT_LOADER = "DataLoader(dataset, batch_size=..., num_workers=8{pin}, persistent_workers=True)"
_BIGGER_BATCH_LAUNCH = "Use a bigger batch so each kernel does more work per launch."
# launch_bound's evidence names the small-kernel sequence every step repeats at the highest launch cost.
_REPEATED_SEQUENCE = Tip(
    "Every step repeats the small kernels {sequence}{sequence_ops}: fuse them, or capture them in a graph, so the "
    "sequence costs one launch instead of one per kernel.",
    when="top_sequence",
)
_BIGGER_BATCH_DISPATCH = "Use a bigger batch so each op does more work per dispatch."
_BIGGER_BATCH_BLOCKS = "Use a bigger batch (if memory allows) so kernels launch enough blocks to fill every SM."
_LR_SCALING = "Scale the learning rate with the batch (linear, or square-root, rule with a warm-up)."
_ACCUMULATION = "Keep the global batch fixed with gradient accumulation if the recipe needs it."
_TF_STEPS_PER_CALL = "Run several steps per call: `model.compile(..., steps_per_execution=32)`."
_TF_XLA = Tip("Compile the step with XLA: `@tf.function(jit_compile=True)`.", skip_if=(("xla", True),))
_MATMUL_WORK = Tip("Give the matmuls more work each: a bigger batch, fused projections.", when="gemm_below_roofline")
# A CPU-only run whose step is its own compute (host_bound's `cpu_bound` evidence): where it can run, and how the CPU
# runs it faster.
_ACCELERATOR = "The step is CPU compute: run it on an accelerator if the machine has one"
_CPU_BOUND_TORCH = (
    Tip(f'{_ACCELERATOR}, the model and each batch moved with `.to("cuda")`.', when="cpu_bound"),
    Tip(
        "On the CPU, let each op use every core: `torch.set_num_threads(os.cpu_count())` (`torch.get_num_threads()` "
        "says how many it uses now).",
        when="cpu_bound",
    ),
    Tip(
        'On a CPU with bf16 (AVX-512 BF16 or AMX), run the forward pass in `torch.autocast("cpu", '
        "dtype=torch.bfloat16)`.",
        when="cpu_bound",
    ),
)
# A run whose device events are missing and whose step is the CPU's own ops (host_bound's `device_unrecorded`
# evidence): do that work on the device, and record the device to see the rest.
_DEVICE_UNRECORDED_TORCH = (
    Tip(
        "The step is CPU work in ops that give the GPU nothing to do: do it on the GPU, creating tensors there "
        '(`torch.randn(..., device="cuda")`, `torch.zeros(..., device="cuda")`) rather than on the CPU and copying '
        "them.",
        when="device_unrecorded",
    ),
    Tip(
        "Profile with the GPU's activity, `profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])`, to "
        "see what it did meanwhile.",
        when="device_unrecorded",
    ),
)
_CPU_BOUND_TF = (
    Tip(f"{_ACCELERATOR} (`tf.config.list_physical_devices('GPU')` lists them).", when="cpu_bound"),
    Tip(
        "On the CPU, let each op use every core: `tf.config.threading.set_intra_op_parallelism_threads(0)` (0: all) "
        "with oneDNN on (`TF_ENABLE_ONEDNN_OPTS=1`).",
        when="cpu_bound",
    ),
)

# A server's own knobs (`capture.server`): they replace the framework's rows of the rules that read them.
_VLLM_BATCH = (
    "Batch more requests per step: raise `--max-num-seqs` and `--max-num-batched-tokens`, so each step's fixed "
    "host and launch cost is spread over more tokens."
)
_VLLM_CHUNKED = (
    "Enable chunked prefill (`--enable-chunked-prefill`) so prefills and decodes share one step instead of alternating."
)
_VLLM_GRAPHS = (
    "Capture CUDA graphs for the batch sizes you serve: `--compilation-config "
    "'{\"cudagraph_capture_sizes\": [...]}'` up to `--max-num-seqs`, so decode steps replay a graph."
)
_SGLANG_BATCH = "Run more requests at once: raise `--max-running-requests` (and `--chunked-prefill-size` for prefills)."
_SGLANG_GRAPHS = (
    "Raise `--cuda-graph-max-bs` to the running batch size, so decode steps replay a captured graph instead of "
    "launching kernels one by one."
)
_TGI_BATCH = (
    "Batch more requests per step: raise `--max-batch-total-tokens` (and `--max-batch-size`, "
    "`--max-concurrent-requests`) so each step's fixed cost is spread over more tokens."
)
_TGI_GRAPHS = (
    "List the batch sizes you serve in `--cuda-graphs` (e.g. `--cuda-graphs 1,2,4,8,16,32`), so decode steps replay "
    "a graph."
)
_TRTLLM_BATCH = (
    "Batch more requests per step: raise `max_batch_size` and `max_num_tokens` in the LLM API / `trtllm-serve` config."
)
_TRTLLM_GRAPHS = (
    "Capture CUDA graphs for the batch sizes you serve: `cuda_graph_config` with `batch_sizes` up to "
    "`max_batch_size` (`enable_padding: true` so other sizes round up to one)."
)
_SERVER_KNOBS: dict[str, tuple[str, ...]] = {
    "vLLM": (_VLLM_BATCH, _VLLM_CHUNKED, _VLLM_GRAPHS),
    "SGLang": (_SGLANG_BATCH, _SGLANG_GRAPHS),
    "TGI": (_TGI_BATCH, _TGI_GRAPHS),
    "TensorRT-LLM": (_TRTLLM_BATCH, _TRTLLM_GRAPHS),
}
_SERVER_BATCH = {"vLLM": _VLLM_BATCH, "SGLang": _SGLANG_BATCH, "TGI": _TGI_BATCH, "TensorRT-LLM": _TRTLLM_BATCH}


def _served(rule: str, knobs: dict[str, tuple[str, ...]]) -> tuple[Row, ...]:
    """One server row per serving framework: its own knobs for `rule`."""
    return tuple(Row(rule, "any", "server", tips, server=server) for server, tips in knobs.items())


TABLE: tuple[Row, ...] = (
    # ------------------------------------------------------------------------------------------- transfer_bound
    Row(
        "transfer_bound",
        "jax",
        "any",
        (
            "Host offloading moves these arrays between host and device memory every step: keep the ones that fit "
            "on the device (offload fewer activations or optimizer states, or drop `memory_kind='pinned_host'` "
            "for them).",
            "Give each copy-start independent work to overlap before its copy-done (offload earlier, fetch "
            "back later), so the transfer runs under compute.",
        ),
    ),
    Row(
        "transfer_bound",
        "pytorch",
        "any",
        (
            Tip(
                "Pin host memory so copies run at full speed and asynchronously: `DataLoader(..., pin_memory=True)` "
                'or `tensor.pin_memory()`, then `x.to("cuda", non_blocking=True)`.',
                skip_if=(("pin_memory", True),),
                only_if=(("pin_memory", False),),
            ),
            "Keep tensors on the device instead of moving them back and forth each step (CPU offload of "
            "activations or optimizer states costs this time).",
            "Overlap the copies that remain: `non_blocking=True` from pinned memory, on a side stream.",
        ),
    ),
    Row(
        "transfer_bound",
        "tensorflow",
        "any",
        (
            "Keep tensors on the device between steps, and stage input batches with "
            '`tf.data.experimental.prefetch_to_device("/gpu:0")`.',
        ),
    ),
    # ---------------------------------------------------------------------------------------------- input_bound
    Row(
        "input_bound",
        "pytorch",
        "any",
        (
            Tip(
                f"Load batches in worker processes: `{_PT_LOADER.format(pin=', pin_memory=True')}` (start near the "
                "number of CPU cores).",
                skip_if=(("dataloader", "multiprocess"), ("pin_memory", True)),
            ),
            Tip(  # host memory already pinned: the loader without the setting already in place
                f"Load batches in worker processes: `{_PT_LOADER.format(pin='')}` (start near the number of CPU "
                "cores).",
                skip_if=(("dataloader", "multiprocess"),),
                only_if=(("pin_memory", True),),
            ),
            Tip(
                "Raise `num_workers` while CPU cores allow: the loader already uses worker processes and the "
                "loop still waits for them.",
                only_if=(("dataloader", "multiprocess"),),
            ),
            "Keep workers alive between epochs (`persistent_workers=True`) and let them run ahead "
            "(`prefetch_factor=4`).",
            'Make `__getitem__` cheaper: decode on the GPU (`torchvision.io.decode_jpeg(..., device="cuda")`, '
            "NVIDIA DALI), augment on the GPU, or pre-process once offline.",
            "Cache decoded samples in memory (or on local disk) when they fit, instead of decoding every epoch.",
        ),
    ),
    Row(
        "input_bound",
        "tensorflow",
        "any",
        (
            Tip(
                "Parallelise the map: `ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)`.",
                skip_if=(("map_parallel", True), ("cache", True)),
                only_if=(("map_parallel", False), ("map_function_py", True)),  # a map the trace shows
                stage="Map",
            ),
            Tip(
                "`{function}` is a `tf.py_function` / `numpy_function`: it holds Python's GIL, so parallel calls "
                "barely scale it. Rewrite it with TF ops (`tf.io`, `tf.image`) or do that work offline.",
                only_if=(("map_function_py", True),),
            ),
            Tip(
                "Read files in parallel: `ds = files.interleave(tf.data.TFRecordDataset, "
                "num_parallel_calls=tf.data.AUTOTUNE)`.",
                skip_if=(("interleave_parallel", True),),
                stage="Interleave",
            ),
            Tip(
                "Overlap input with compute: end the pipeline with `ds = ds.prefetch(tf.data.AUTOTUNE)`.",
                skip_if=(("prefetch", True),),
            ),
            Tip(
                "Cache what does not change between epochs: `ds = ds.cache()` after the expensive map "
                "(where the data fits in memory or on local disk).",
                skip_if=(("cache", True),),
            ),
            "Vectorise: `ds.batch(n).map(fn)` runs the function once per batch instead of once per element; "
            "move image work onto the device (`tf.image` inside the model) or into NVIDIA DALI.",
            "Add input workers or hosts: the tf.data service (`tf.data.experimental.service.distribute`) "
            "spreads preprocessing over other machines.",
        ),
    ),
    Row(
        "input_bound",
        "jax",
        "any",
        (
            "Feed from a parallel loader: grain with `worker_count > 0`, or any loader that prepares the next "
            "batches in other processes while the step runs.",
            "Put the next batch on the device while this step runs (`jax.device_put` ahead of time).",
        ),
    ),
    # --------------------------------------------------------------------------------------------- launch_bound
    *_served("launch_bound", _SERVER_KNOBS),
    Row(
        "launch_bound",
        "pytorch",
        "any",
        (
            _REPEATED_SEQUENCE,
            Tip("Fuse small ops: `model = torch.compile(model)`.", skip_if=(("torch_compile", True),)),
            Tip(
                'Capture the step in CUDA graphs: `torch.compile(model, mode="reduce-overhead")`, or '
                "`torch.cuda.make_graphed_callables`, so hundreds of kernels launch with one call.",
                skip_if=(("cuda_graphs", True),),
            ),
            _BIGGER_BATCH_LAUNCH,
        ),
    ),
    Row(
        "launch_bound",
        "tensorflow",
        "any",
        (
            _REPEATED_SEQUENCE,
            Tip(
                "Run the step as a graph: `@tf.function` on the step function (no per-op Python dispatch).",
                skip_if=(("graph", True),),
            ),
            Tip(
                "Fuse kernels with XLA: `@tf.function(jit_compile=True)` or `model.compile(..., jit_compile=True)`.",
                skip_if=(("xla", True),),
            ),
            _TF_STEPS_PER_CALL,
            _BIGGER_BATCH_LAUNCH,
        ),
    ),
    Row(
        "launch_bound",
        "jax",
        "any",
        (
            _REPEATED_SEQUENCE,
            "`jax.jit` the whole step, not its pieces, so XLA fuses it into few kernels.",
            "Run several steps per call with `jax.lax.scan`, and use a bigger batch.",
        ),
    ),
    # ----------------------------------------------------------------------------------------------- host_bound
    *_served("host_bound", _SERVER_KNOBS),
    Row(
        "host_bound",
        "pytorch",
        "any",
        (
            "Look at the host activity in the longest gaps below and move that work out of the step.",
            Tip(
                "Remove Python overhead with `torch.compile(model)`; avoid per-step `.item()`, `.cpu()`, logging.",
                skip_if=(("torch_compile", True),),
            ),
            Tip(
                'Cut launch overhead with CUDA graphs: `torch.compile(model, mode="reduce-overhead")`.',
                skip_if=(("cuda_graphs", True),),
            ),
        ),
    ),
    Row(
        "host_bound",
        "tensorflow",
        "any",
        (
            Tip("Wrap the step in `@tf.function` and avoid Python-side work per step.", skip_if=(("graph", True),)),
            _TF_XLA,
            _TF_STEPS_PER_CALL,
        ),
    ),
    Row("host_bound", "jax", "any", ("`jax.jit` the whole step and keep Python-side bookkeeping out of the loop.",)),
    Row(
        "host_bound",
        "tensorflow",
        "any",
        (
            *_CPU_BOUND_TF,
            Tip(
                "Run the step as a graph: `@tf.function` on the step function, so ops no longer go through "
                "Python and the eager runtime one by one.",
                skip_if=(("graph", True),),
            ),
            _TF_XLA,
            _TF_STEPS_PER_CALL,
            _BIGGER_BATCH_DISPATCH,
        ),
        cpu_only=True,
    ),
    Row(
        "host_bound",
        "pytorch",
        "any",
        (
            *_CPU_BOUND_TORCH,
            *_DEVICE_UNRECORDED_TORCH,
            Tip(
                "Compile the model: `model = torch.compile(model)` fuses small ops and removes per-op Python dispatch.",
                skip_if=(("torch_compile", True),),
            ),
            _BIGGER_BATCH_DISPATCH,
        ),
        cpu_only=True,
    ),
    # -------------------------------------------------------------------------------------------------- h2d_copy
    Row(
        "h2d_copy",
        "pytorch",
        "any",
        (
            Tip(
                "Pin host memory and copy asynchronously: `DataLoader(..., pin_memory=True)` and "
                '`x = x.to("cuda", non_blocking=True)`.',
                skip_if=(("pin_memory", True),),
                only_with=(DATALOADER,),
            ),
            Tip(
                'Pin host memory and copy asynchronously: `x = x.pin_memory().to("cuda", non_blocking=True)`, '
                "or allocate the host buffers pinned once (`torch.empty(..., pin_memory=True)`).",
                skip_if=(("pin_memory", True),),
                unless_with=(DATALOADER,),
            ),
            Tip(  # already pinned: what is left is copying while the GPU computes
                'Copy asynchronously from the pinned buffers: `x.to("cuda", non_blocking=True)`, issued a step '
                "ahead (or on a side stream) so the copy overlaps compute.",
                only_if=(("pin_memory", True),),
            ),
            "Keep tensors on the GPU across steps: create constants, masks and buffers on the device once.",
            "Send compact data (uint8 images) and convert/normalise on the GPU.",
        ),
    ),
    Row(
        "h2d_copy",
        "tensorflow",
        "any",
        (
            Tip(
                "Stage batches on the GPU ahead of time: `ds = ds.apply(tf.data.experimental.prefetch_to_device("
                '"/gpu:0"))` as the last stage.',
                only_with=TF_DATA,
            ),
            "Keep variables and constants on the device; send compact dtypes (uint8) and cast on the GPU.",
        ),
    ),
    Row(
        "h2d_copy",
        "jax",
        "any",
        (
            "`jax.device_put` the next batch ahead of time and keep parameters on the device.",
            "Send compact dtypes and convert on the device.",
        ),
    ),
    # -------------------------------------------------------------------------------------------------- d2h_sync
    Row(
        "d2h_sync",
        "any",
        "server",
        (
            "Overlap the scheduler with the GPU: `--async-scheduling`, so the host does not wait for each "
            "step's sampled tokens before preparing the next step.",
        ),
        server="vLLM",
    ),
    Row(
        "d2h_sync",
        "any",
        "server",
        (
            "Keep the overlap scheduler on (do not pass `--disable-overlap-schedule`), so the host prepares the "
            "next batch while the GPU runs this one.",
        ),
        server="SGLang",
    ),
    Row(
        "d2h_sync",
        "pytorch",
        "any",
        (
            "Remove `.item()`, `.cpu()`, `.numpy()`, `print(loss)` from the step: accumulate metrics on the GPU "
            "and read them every N steps.",
            "Drop `torch.cuda.synchronize()` from the loop (keep it only around timing code).",
            "Copy results back with `non_blocking=True` into pinned buffers.",
        ),
    ),
    Row(
        "d2h_sync",
        "tensorflow",
        "any",
        ("Avoid `.numpy()` and Python conditionals on tensors inside the loop; log metrics every N steps.",),
    ),
    Row(
        "d2h_sync",
        "jax",
        "any",
        ("Avoid `block_until_ready()`, `float(x)` or `np.asarray(x)` every step; log every N steps.",),
    ),
    # --------------------------------------------------------------------------------------------- low_occupancy
    *_served("low_occupancy", {server: (batch,) for server, batch in _SERVER_BATCH.items()}),
    Row(
        "low_occupancy",
        "pytorch",
        "any",
        (
            _BIGGER_BATCH_BLOCKS,
            Tip(
                "Fuse small ops: `model = torch.compile(model)`, so fewer, larger kernels run.",
                skip_if=(("torch_compile", True),),
            ),
        ),
    ),
    Row(
        "low_occupancy",
        "tensorflow",
        "any",
        (
            _BIGGER_BATCH_BLOCKS,
            Tip(
                "Fuse small ops with XLA: `@tf.function(jit_compile=True)`, so fewer, larger kernels run.",
                skip_if=(("xla", True),),
            ),
        ),
    ),
    Row(
        "low_occupancy",
        "jax",
        "any",
        (
            _BIGGER_BATCH_BLOCKS,
            "Keep the whole step in one `jax.jit`, so XLA fuses small ops into fewer, larger kernels.",
        ),
    ),
    Row(
        "low_occupancy",
        "any",
        "any",
        (_BIGGER_BATCH_BLOCKS, "Fuse small ops with the framework's compiler, so fewer, larger kernels run."),
    ),
    # ---------------------------------------------------------------------------------------------- fp32_compute
    Row(
        "fp32_compute",
        "pytorch",
        "any",
        (
            Tip(
                'Enable mixed precision: `with torch.autocast("cuda", dtype=torch.bfloat16):` around the forward '
                "pass (Ampere and newer; bf16 needs no loss scaler).",
                cc_at_least=AMPERE_CC,
            ),
            Tip(
                'Enable mixed precision: `with torch.autocast("cuda", dtype=torch.float16):` around the forward '
                "pass (Volta/Turing Tensor Cores have no bf16); in training, scale the loss with "
                "`scaler = torch.amp.GradScaler()`.",
                cc_below=AMPERE_CC,
            ),
            Tip(
                "Allow TF32 for what stays in FP32 (Ampere and newer): "
                "`torch.backends.cuda.matmul.allow_tf32 = True` and `torch.backends.cudnn.allow_tf32 = True`.",
                cc_at_least=AMPERE_CC,
            ),
        ),
    ),
    Row(
        "fp32_compute",
        "tensorflow",
        "any",
        (
            Tip(
                'Enable mixed precision: `tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")` '
                "(Ampere and newer).",
                cc_at_least=AMPERE_CC,
            ),
            Tip(
                'Enable mixed precision: `tf.keras.mixed_precision.set_global_policy("mixed_float16")` '
                "(Volta/Turing Tensor Cores have no bf16; Keras scales the loss).",
                cc_below=AMPERE_CC,
            ),
        ),
    ),
    Row(
        "fp32_compute",
        "jax",
        "any",
        ("Compute in bfloat16: cast parameters and inputs to `jnp.bfloat16` (keep an fp32 master copy).",),
    ),
    # ------------------------------------------------------------------------------------ low_compute_efficiency
    # A served model's GEMMs read every weight once a step whatever the batch: more sequences a step is more work
    # for the same memory traffic (the server already compiles and replays graphs).
    Row(
        "low_compute_efficiency",
        "any",
        "server",
        (
            "Batch more requests per step: raise `--max-num-seqs` and `--max-num-batched-tokens`, so each GEMM "
            "multiplies more rows for the weights it reads anyway.",
        ),
        server="vLLM",
    ),
    Row(
        "low_compute_efficiency",
        "any",
        "server",
        (
            "Run more requests at once: raise `--max-running-requests` (and `--cuda-graph-max-bs` with "
            "it), so each GEMM multiplies more rows for the weights it reads anyway.",
        ),
        server="SGLang",
    ),
    Row(
        "low_compute_efficiency",
        "any",
        "server",
        (
            "Batch more requests per step: raise `--max-batch-total-tokens` and `--max-batch-size`, so "
            "each GEMM multiplies more rows for the weights it reads anyway.",
        ),
        server="TGI",
    ),
    Row(
        "low_compute_efficiency",
        "any",
        "server",
        (
            "Batch more requests per step: raise `max_batch_size` and `max_num_tokens`, so each "
            "GEMM multiplies more rows for the weights it reads anyway.",
        ),
        server="TensorRT-LLM",
    ),
    Row(
        "low_compute_efficiency",
        "pytorch",
        "any",
        (
            Tip(
                "Fuse the elementwise and normalisation kernels that hold most of the time: "
                "`model = torch.compile(model)` (or fused kernels: RMSNorm, SwiGLU, rotary).",
                skip_if=(("torch_compile", True),),
                when="elementwise_heavy",
            ),
            Tip(  # compiled already: what it leaves unfused
                "Replace the elementwise and normalisation kernels that hold most of the time with fused ones "
                "(RMSNorm, SwiGLU, rotary kernels) where the compiled graph still runs them apart.",
                only_if=(("torch_compile", True),),
                when="elementwise_heavy",
            ),
            Tip(
                "Use FlashAttention / SDPA instead of matmul + softmax: "
                '`torch.nn.functional.scaled_dot_product_attention` (or `attn_implementation="sdpa"`).',
                when="attention_unfused",
            ),
            Tip(
                'Compute in bf16 (or FP8 on Hopper and newer): `torch.autocast("cuda", dtype=torch.bfloat16)`.',
                when="wide_dtype",
            ),
            Tip(
                "Give the GEMMs more work each: a bigger batch or sequence, fused QKV / gate-up projections, "
                'and CUDA graphs or torch.compile(mode="max-autotune") to pick faster kernels.',
                when="gemm_below_roofline",
            ),
        ),
    ),
    Row(
        "low_compute_efficiency",
        "tensorflow",
        "any",
        (
            Tip(
                "Let XLA fuse the elementwise kernels: `@tf.function(jit_compile=True)`.",
                skip_if=(("xla", True),),
                when="elementwise_heavy",
            ),
            Tip('Compute in bf16: `tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")`.', when="wide_dtype"),
            _MATMUL_WORK,
        ),
    ),
    Row(
        "low_compute_efficiency",
        "jax",
        "any",
        (
            Tip("Keep the step in one `jax.jit` so XLA fuses its elementwise ops.", when="elementwise_heavy"),
            Tip("Compute in bfloat16 (`jnp.bfloat16` inputs and parameters).", when="wide_dtype"),
            _MATMUL_WORK,
        ),
    ),
    # ------------------------------------------------------------------------------------------------- straggler
    Row(
        "straggler",
        "pytorch",
        "any",
        (
            "Even out the late rank's slow phase (the evidence names it): its data loading (more DataLoader "
            "workers, the same shard sizes on every rank), its batch (the same per-rank batch, or sequence "
            "lengths bucketed alike), or its host (a busier or slower machine).",
            "Find what differs on that rank: profile all ranks together and compare the phase the evidence "
            "names (`traceinsight runs` lists them).",
        ),
    ),
    Row(
        "straggler",
        "tensorflow",
        "any",
        (
            "Even out the late worker's slow phase: the same input pipeline settings and shard sizes on every "
            "worker (`tf.data` with `num_parallel_calls` and `prefetch`).",
        ),
    ),
    Row(
        "straggler",
        "jax",
        "any",
        ("Even out the late host's slow phase: the same input pipeline and shard sizes on every host.",),
    ),
    # --------------------------------------------------------------------------------------------- communication
    Row(
        "communication",
        "any",
        "server",
        (
            "Run fewer tensor-parallel ranks per model replica and more replicas (vLLM `--tensor-parallel-size` "
            "with `--data-parallel-size`, SGLang `--tp-size` with `--dp-size`, TGI `--num-shard`): each layer's "
            "all-reduce then spans fewer GPUs.",
        ),
    ),
    Row(
        "communication",
        "pytorch",
        "training",
        (  # DDP's reducer is in the trace: its own knobs
            Tip(
                "Let DDP overlap all-reduce with backward: tune `bucket_cap_mb`, use `gradient_as_bucket_view=True`, "
                "avoid `find_unused_parameters=True`.",
                only_if=_DDP_ONLY,
            ),
            Tip(
                "Communicate less often: gradient accumulation with `model.no_sync()`, or a bigger batch.",
                only_if=_DDP_ONLY,
            ),
        ),
    ),
    Row(
        "communication",
        "pytorch",
        "any",
        (
            Tip(
                "Overlap the collectives with compute: start them with `async_op=True` and `wait()` on the handle "
                "only where the result is needed.",
                unless_with=(DDP,),
            ),
            "Use a bigger batch, so each collective carries more work per call.",
        ),
    ),
    Row(
        "communication",
        "tensorflow",
        "training",
        ("Use NCCL all-reduce (`MultiWorkerMirroredStrategy`) and a bigger per-replica batch.",),
    ),
    Row(
        "communication",
        "jax",
        "any",
        ("Shard so collectives overlap compute (`jax.jit` with shardings); use a bigger batch.",),
    ),
    Row("communication", "any", "any", ("Use a bigger batch, so each collective carries more work per call.",)),
    # ----------------------------------------------------------------------------------------------- small_batch
    *_served("small_batch", _SERVER_KNOBS),
    Row(
        "small_batch",
        "pytorch",
        "any",
        (
            Tip(
                "Raise the batch size about {batch_factor}x: `DataLoader(..., batch_size={batch_factor} * bs)`.",
                only_with=(DATALOADER,),
            ),
            Tip(
                "Raise the batch size about {batch_factor}x (the leading dimension of the step's inputs).",
                unless_with=(DATALOADER,),
            ),
        ),
    ),
    Row("small_batch", "pytorch", "training", (_LR_SCALING, _ACCUMULATION)),
    Row("small_batch", "pytorch", "inference", ("Batch requests together.",)),
    Row(
        "small_batch",
        "tensorflow",
        "any",
        (
            Tip(
                "Raise the batch size about {batch_factor}x: `ds = ds.batch({batch_factor} * batch_size)`.",
                only_with=TF_DATA,
            ),
            Tip(
                "Raise the batch size about {batch_factor}x (the leading dimension of the step's inputs).",
                unless_with=TF_DATA,
            ),
        ),
    ),
    Row("small_batch", "tensorflow", "training", (_LR_SCALING, _ACCUMULATION)),
    Row(
        "small_batch",
        "jax",
        "any",
        (Tip("Raise the per-device batch about {batch_factor}x (the leading axis of the inputs to the jitted step)."),),
    ),
    Row("small_batch", "jax", "training", (_LR_SCALING,)),
    # ------------------------------------------------------------------------------------------- collective_wait
    Row(
        "collective_wait",
        "any",
        "any",
        (
            "Profile every rank together (one trace per rank in one folder): the rank the others wait for, and "
            "the phase that makes it late, are then named (`straggler`).",
            "Look for imbalance across ranks: uneven data shards or sequence lengths, a slower or busier host, "
            "a rank that logs, checkpoints or evaluates while the others work.",
        ),
    ),
    # ------------------------------------------------------------------------------------------------ idle_other
    Row(
        "idle_other",
        "pytorch",
        "any",
        (
            "Read the host activity of the longest gaps below: it shows what the device waited for.",
            'Name suspect code in the trace (`with torch.profiler.record_function("..."):`) and profile again.',
            "Capture what the trace lacks to explain it: other streams and processes (all ranks together), "
            "the Python stack (`with_stack=True`), and more steps to separate warm-up from the steady state.",
        ),
    ),
    Row(
        "idle_other",
        "tensorflow",
        "any",
        (
            "Read the host activity of the longest gaps below: it shows what the device waited for.",
            'Name suspect code in the trace (`with tf.profiler.experimental.Trace("..."):`) and profile again.',
            "Capture what the trace lacks to explain it: every worker together, the Python stack "
            "(`tf.profiler.experimental.ProfilerOptions(python_tracer_level=1)`), and more steps to separate "
            "warm-up from the steady state.",
        ),
    ),
    Row(
        "idle_other",
        "jax",
        "any",
        (
            "Read the host activity of the longest gaps below: it shows what the device waited for.",
            'Name suspect code in the trace (`with jax.named_scope("..."):` or `jax.profiler.TraceAnnotation`) '
            "and profile again.",
            "Capture what the trace lacks to explain it: every host together, and more steps to separate "
            "warm-up from the steady state.",
        ),
    ),
    Row(
        "idle_other",
        "any",
        "any",
        (
            "Read the host activity of the longest gaps below: it shows what the device waited for.",
            "Name suspect code in the trace with your profiler's annotation ranges, and profile again.",
            "Capture what the trace lacks to explain it: other streams and processes (all ranks together), "
            "the Python stack, and more steps to separate warm-up from the steady state.",
        ),
    ),
    # --------------------------------------------------------------------------------------------- external_wait
    Row(
        "external_wait",
        "any",
        "any",
        (
            "Profile a window that starts before this call (more steps, or start the profiler earlier), so "
            "the work it waits for is in the trace.",
            "Profile every process and rank of the job together (one trace per rank, same window): the wait "
            "may be another rank's collective or a scheduler process.",
            "A server's first request waits for start-up work (weight loading, graph capture): profile a later "
            "request.",
        ),
    ),
    # ------------------------------------------------------------------------------------------ warmup_in_window
    Row(
        "warmup_in_window",
        "pytorch",
        "any",
        (
            "Profile after warm-up: `torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, "
            "active=3), on_trace_ready=torch.profiler.tensorboard_trace_handler(logdir))` and call "
            "`prof.step()` every step.",
            "Or run a few steps (torch.compile's compilation, cuDNN autotuning) before starting the profiler.",
        ),
    ),
    Row(
        "warmup_in_window",
        "tensorflow",
        "any",
        (
            "Profile after warm-up: Keras `tf.keras.callbacks.TensorBoard(log_dir, profile_batch=(10, 15))`.",
            "Or call `tf.profiler.experimental.start(logdir)` after a few steps (XLA compiles on the first "
            "call) and `tf.profiler.experimental.stop()` a few steps later.",
        ),
    ),
    Row(
        "warmup_in_window",
        "jax",
        "any",
        (
            "Profile after the first call: run the jitted step once (it compiles), `block_until_ready()`, then "
            "`jax.profiler.start_trace(logdir)` for a few steps.",
        ),
    ),
    Row(
        "warmup_in_window",
        "any",
        "any",
        ("Start the profiler after a few steps, so compilation and set-up are not in the window.",),
    ),
)


def _fits(row: Row, workload: str, server: str | None) -> bool:
    """Whether a row's workload fits the run's: ``any`` always; a server is an inference run too."""
    if row.workload == "server":
        return server is not None and row.server in (None, server)
    return row.workload in ("any", workload) or (row.workload == "inference" and workload == "server")


def tips_for(rule: str, framework: str, workload: str, server: str | None, cpu_only: bool) -> tuple[str | Tip, ...]:
    """The rule's tips for a run (see the module docstring); empty when none fits."""
    rows = [r for r in TABLE if r.rule == rule and _fits(r, workload, server)]
    served = [r for r in rows if r.workload == "server"]
    if served:
        return _joined(served)
    own = [r for r in rows if r.framework == framework]
    cpu_rows = cpu_only and any(r.cpu_only for r in own)  # a CPU-only run's own rows replace the others
    own = [r for r in own if r.cpu_only == cpu_rows]
    return _joined(own) or _joined([r for r in rows if r.framework == "any"])


def _joined(rows: list[Row]) -> tuple[str | Tip, ...]:
    return tuple(tip for row in rows for tip in row.tips)


def _run_tips(rule: str, analysis: Analysis) -> tuple[str | Tip, ...]:
    c = analysis.capture
    return tips_for(rule, analysis.profile.framework, c.workload, c.server, not analysis.devices)


def _settings_of(rule: str, analysis: Analysis) -> set[str]:
    """The settings a rule's advice depends on: the keys of its tips."""
    tips = _run_tips(rule, analysis)
    return {key for t in tips if isinstance(t, Tip) for key, _ in (*t.skip_if, *t.only_if)}


def seen_evidence(rule: str, analysis: Analysis) -> dict[str, Any]:
    """`seen`: the settings relevant to the rule that the trace shows (every input setting for input_bound),
    and `in_place`: a sentence saying what is already there and what is not, for people."""
    settings = analysis.settings
    every = {**settings.input, **settings.run}
    keys = _settings_of(rule, analysis) | (set(settings.input) if rule == "input_bound" else set())
    seen = {k: every[k] for k in sorted(keys) if k in every}
    if not seen:
        return {}
    present = [SETTING_WORDS[k] for k, v in seen.items() if v is True and k in SETTING_WORDS]
    missing = [SETTING_WORDS[k] for k, v in seen.items() if v is False and k in SETTING_WORDS]
    if seen.get("dataloader") == "multiprocess":
        present.append("DataLoader worker processes")
    elif seen.get("dataloader") == "single_process":
        missing.append("DataLoader worker processes")
    words = []
    if present:
        words.append(f"already in place: {', '.join(present)}")
    if missing:
        words.append(f"not in place: {', '.join(missing)}")
    sentence = "; ".join(words)
    return {"seen": seen, "in_place": sentence[:1].upper() + sentence[1:] + "." if words else None}


def _speeds_up(tip: str | Tip, evidence: dict[str, Any], seen: dict[str, Any]) -> bool:
    """Whether `tip` works on the slowest tf.data stage (an `Iterator::...::Interleave` stage: parallel
    interleave first), or on an interleave the trace shows runs one input at a time."""
    if not isinstance(tip, Tip) or tip.stage is None:
        return False
    stage = str(evidence.get("slowest_stage") or "").rsplit("::", 1)[-1]
    return tip.stage in stage or (tip.stage == "Interleave" and seen.get("interleave_parallel") is False)


def advise(rule: str, analysis: Analysis, evidence: dict[str, Any], cc: tuple[int, int] | None) -> list[str]:
    """The rule's advice for the run (its framework, workload and server, the settings already in place, the GPU's
    compute capability `cc`), in the table's order; a tip for the slowest tf.data stage first."""
    seen = {**analysis.settings.input, **analysis.settings.run}
    ops = evidence.get("top_sequence_ops")
    context = {
        "function": evidence.get("slowest_function") or "the map function",
        "sequence": evidence.get("top_sequence") or "",
        "sequence_ops": f", issued by `{ops}`" if ops else "",
        "batch_factor": f"{evidence.get('batch_factor_assumed', DEFAULT_BATCH_FACTOR):g}",
    }

    def text(tip: str | Tip) -> str | None:
        if isinstance(tip, str):
            return tip
        return tip.text.format(**context) if tip.applies(seen, cc, evidence) else None

    own = _run_tips(rule, analysis)
    if own:
        tips = [text(t) for t in sorted(own, key=lambda t: not _speeds_up(t, evidence, seen))]
    elif analysis.profile.framework not in FRAMEWORK_ROWS:  # framework unknown: each framework's first tip, named
        c = analysis.capture
        tips = []
        for fw in FRAMEWORK_ROWS[:-1]:
            first = next(filter(None, map(text, tips_for(rule, fw, c.workload, None, not analysis.devices))), None)
            tips += [f"{fw}: {first}"] if first else []
    else:
        tips = []
    return [t for t in tips if t]
