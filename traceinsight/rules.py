"""Every threshold and name rule the readers, analyses and findings apply, in one place.

A newcomer asking "why 20 %?" or "which kernels count as Tensor Core work?" finds the answer here, with
where it comes from: XProf's verdict words and thresholds, HTA's and the PyTorch TensorBoard plugin's
rules where we follow them (``../shared/notes/peers.md``), our own measurements where we chose. The
modules that apply a rule import it from here; how a rule is applied (vectorised, once per distinct
name) stays with them. Published GPU peaks are data, not rules: ``analysis/hardware.py``.

Sections: event names every reader classifies the same way (and the CUDA / HIP graph-capture calls);
reading in parallel; the GPU-Util target; the input verdict; steps; gaps, blocking calls and host ops;
kernels (small, communication, the Tensor Core tables); the step model; capture kinds
(``analysis/capture.py``); device memory; what the run already does (``analysis/settings.py``'s
detectors); the bottleneck rules (``findings.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

# --------------------------------------------------------------------------- name matching

# The longest name the rules' patterns are searched in: a longer one is cut to it (and counted in the warnings)
# before any rule reads it. Real names stay far below it: the longest kernel names seen (CUTLASS / CK templates,
# `benchmarks/README.md`'s traces) hold 1-3 kB; a hostile one of megabytes would otherwise cost every pattern a pass
# over all of it, per rule and per analysis.
NAME_MATCH_MAX_CHARS = 4096


def first_then(first: str, then: str, between: str = r"\w") -> str:
    """A pattern for `first`, then `then` after a run of `between` characters, whose search takes linear time.

    The plain ``first{between}*then`` rescans the run from every `first` in it: a name of many of them costs
    quadratic time. Whether any `first` of a run is followed by `then` in it is whether the run's first one is,
    so the search starts only at a run's start (`first` begins with a `between` character) and moves there
    possessively to its first `first`.
    """
    return rf"(?<!{between})(?:(?!{first}){between})*+(?:{first}){between}*{then}"


# --------------------------------------------------------------------------- event names (all readers)

# Host events that mean "the training loop is waiting for its next batch".
# tf.data consumer side (XProf's input-op rule) and PyTorch DataLoader / DataPipe
# (the PyTorch TensorBoard plugin's DataLoader rule).
# TF1 timelines name the op by its type alone (`IteratorGetNext`).
INPUT_WAIT_PATTERN = re.compile(
    r"^(?:Iterator(?:GetNext|GetNextAsOptional|GetNextSync)(?:Op::DoCompute)?"
    r"|enumerate\(DataLoader\)#.*__next__"
    r"|enumerate\(DataPipe\)#.*)$"
)
# PyTorch's step marker; the number is the step id.
PROFILER_STEP_PATTERN = re.compile(r"^ProfilerStep\s*#\s*(\d{1,9})$")  # 9 digits fit int32
# Host API calls that block until the device catches up: time spent in them is a
# sync, not launch overhead. CUDA runtime and driver spellings, and HIP's.
SYNC_API_PATTERN = re.compile(
    r"^(?:cuda(?:Device|Stream|Event)Synchronize|cu(?:Ctx|Stream|Event)Synchronize|hip\w*Synchronize)"
    r"(?:_v\d+)?$"
)

# Nsight Systems names a CUDA runtime call by its CUPTI callback id: the function and the CUDA version that gave it
# its signature (``cudaLaunchKernel_v7000``, ``cudaMemcpy_v3020``). nsys's own ``cuda_api_sum`` report prints the
# function alone, as Kineto names it, so the suffix goes (4+ digits: a driver call's ``_v2`` is part of its name,
# ``cuMemcpyHtoD_v2``).
NSYS_API_VERSION_SUFFIX = r"_v\d{4,}$"
# An nsys export says nothing of the framework that ran; PyTorch's own NVTX ranges do: `torch.profiler` schedule's
# ``ProfilerStep#N`` and `torch.autograd.profiler.emit_nvtx`'s ``aten::`` ops.
NSYS_PYTORCH_RANGE = r"^(?:aten::|ProfilerStep\s*#)"
# The environment variables that carry a process's rank, as launchers set them, looked for in that order in the
# environment nsys records (``TARGET_INFO_SYSTEM_ENV.DeviceEnvironment``): MPICH/PMI and Cray PALS (pipit's
# Perlmutter export has PMI_RANK, PALS_RANKID, SLURM_PROCID), Open MPI, MVAPICH, torchrun, then Slurm's task id.
NSYS_RANK_VARIABLES = (
    b"PMI_RANK",
    b"PALS_RANKID",
    b"OMPI_COMM_WORLD_RANK",
    b"MV2_COMM_WORLD_RANK",
    b"RANK",
    b"SLURM_PROCID",
)

# A copy's direction from its event name (Kineto, XSpace and XProf spellings); the first match wins.
COPY_KIND_PATTERNS = (
    ("h2d", re.compile(r"HtoD|H2D|HostToDevice")),
    ("d2h", re.compile(r"DtoH|D2H|DeviceToHost")),
    ("d2d", re.compile(r"DtoD|D2D|DeviceToDevice")),
    ("p2p", re.compile(r"PtoP|P2P|Peer")),
)
# XLA's asynchronous copies on a TPU's "XLA Ops" line (`%copy-start.2 = (...) copy-start(...)`, `%copy-done.2 = ...`):
# transfers, not compute. Memory space S(5) is the host's (XLA's host offloading, memory_space=5), so a copy whose
# destination shape carries it goes to the host and one whose other shapes do comes from it; XProf files them under
# its "data formatting / host offload" categories rather than compute.
XLA_ASYNC_COPY = re.compile(r"^%?copy-(?:start|done)(?:\.\d+)?(?:\s|$)")
XLA_HOST_MEMORY_SPACE = "S(5)"
# XProf's host-side rules (as in xspace.py): explicit step markers with a step_num
# stat, TF ops "<node>:<OpType>", and Python tracer events "$<function>".
STEP_MARKER_PATTERN = re.compile(r"^(?:(?:train|test|TraceContext)[^/]*|Profiled batch)$")
TF_OP_PATTERN = re.compile(r"^[A-Za-z0-9_.][\w.\-/>]*:[A-Za-z_]\w*$")
# Chrome traces whose events carry no Kineto cat (home-grown tracers, legacy exports): chrome://tracing and Perfetto
# show such a trace by its process and thread names alone (`process_name` / `thread_name` metadata events, or a pid
# written as a name), so those names are how its writer says which lines are the GPU's: "GPU 0", "cuda stream 7",
# "Stream #13", "/device:GPU:0". A line named so holds device work; the others are host work.
DEVICE_LINE_PATTERN = re.compile(r"stream|gpu|device|cuda", re.IGNORECASE)
# The device's number in such a name ("GPU 1", "cuda:0", "device 2") and the stream's ("stream 7", "Stream #13").
DEVICE_NUMBER_PATTERN = re.compile(r"(?:gpu|cuda|device)\D{0,3}?(\d{1,6})(?!\d)", re.IGNORECASE)
STREAM_NUMBER_PATTERN = re.compile(r"stream\D{0,3}?(\d{1,9})(?!\d)", re.IGNORECASE)
# Legacy `torch.autograd.profiler.profile(...).export_chrome_trace` (torch 0.4-1.7, and
# `torch.autograd.profiler_legacy.profile` to this day: torch/autograd/profiler.py, later profiler_util.py): the
# array form, its pid the process *name*: every op an "X" event of pid "CPU functions" (tid: the thread), and with
# `use_cuda=True` (torch <= 1.7) the op's CUDA time, timed by CUDA events, an "X" event of pid "CUDA functions" whose
# tid is the device index (pytorch/pytorch#33961 shows one). No cat but on the "s"/"f" flow arrows.
LEGACY_AUTOGRAD_CPU_PROCESS = "CPU functions"
LEGACY_AUTOGRAD_CUDA_PROCESS = "CUDA functions"
# CUPTI activity types XProf puts on "Stream #" lines that are not device work.
NON_KERNEL_ACTIVITY = frozenset(
    {
        "MemoryAlloc",
        "MemoryFree",
        "MemoryResidency",
        "UnifiedMemory",
        "HostRegister",
        "HostUnregister",
        "Overhead",
    }
)

# CUDA / HIP graph capture: calls that record kernels into a graph (they run once, if at all, while recorded), so a
# trace holding them is a capture pass, not a steady state. `hipStreamIsCapturing` / `cudaStreamIsCapturing` are
# not evidence: servers call them before every replay too. Discovery looks for the bytes of the first call in a
# file (`GRAPH_CAPTURE_BYTES`) to tell a capture pass from the replay beside it without reading it.
GRAPH_CAPTURE_PATTERN = re.compile(
    r"^(?:cuda|cu|hip)(?:StreamBeginCapture|StreamEndCapture|GraphInstantiate)\w*$"
    r"|^torch/cuda/graphs\.py\(\d+\): capture_begin$"
)
GRAPH_CAPTURE_BYTES = b"StreamBeginCapture"
# Files of one folder are one run when their capture windows share at least this much of the shorter window
# (`discover.group_captures`): the ranks of one job record the same steps (the 2-rank gloo samples share over
# 99 %, HTA's 8-rank traces and XProf hosts alike), while one process's successive captures (a repeating
# schedule, a re-run) are disjoint or only touch, and unrelated traces lie hours apart (tracelens/h100: 2.6 h).
RUN_OVERLAP_MIN_SHARE = 0.5
# The calls that open and close the recording of one graph on a stream: the kernel launches between them, in order,
# are its nodes (`analysis/op_kernels.replay_owners` maps a replay's nodes to the ops that launched them here).
GRAPH_CAPTURE_BEGIN = re.compile(r"^(?:cuda|cu|hip)StreamBeginCapture")
GRAPH_CAPTURE_END = re.compile(r"^(?:cuda|cu|hip)StreamEndCapture")

# --------------------------------------------------------------------------- reading in parallel

# From how large a file several processes read it. The two differ on purpose: each is measured for its format
# (benchmarks/README.md), whose bytes cost differently to read (XSpace's lines in numpy passes, JSON text parsed).
# XSpace, bytes of a file's lines (xspace.py): below it a worker's start and its rows' way back cost more than
# it saves (a 6.4 MB file: 0.30 s in two processes, 0.14-0.18 s in one).
PARALLEL_MIN_BYTES = 16 << 20
# Kineto JSON, bytes of text (readers.read_trace): from about here on, its chunks are decoded by `jobs` processes.
PARALLEL_FILE_MIN_BYTES = 32 << 20
# A run of several files, bytes of JSON in all (a .gz counted as its text, `json_files.json_size_guess`; other
# formats as on disk): from here on its files are read and analysed in processes of their own
# (`load.reads_in_parallel`), below it one after another in this one. A worker costs its fork, its results' way
# back and their merge: on HTA's 2-rank trace_filter folder (2 MB guessed) two workers cost 15 % more CPU time
# (2.2 s against 1.9 s) for no gain; on 8 copies of nccl_parser_config (45 MB guessed, 80 MB of JSON) 1.37x the
# CPU time bought 1.19x on an idle 2-core machine (issue 38). So from the size a Kineto file's own chunks are
# shared at (`PARALLEL_FILE_MIN_BYTES`).
PARALLEL_RUN_MIN_BYTES = PARALLEL_FILE_MIN_BYTES
# A .gz trace's bytes of JSON, at the least, from its size on disk (`json_files.json_size_guess`, where the gzip
# trailer gives the size exactly below 4 GiB): Kineto JSON packs 8 to 20 fold (the traces of ../shared: 8.6-20x).
GZIP_JSON_RATIO_GUESS = 8
# A Kineto file of this many bytes of JSON or more, and of no more than EARLY_READ_MAX_BYTES, is read by a process of
# its own started as the `report` command begins, while this one imports pandas and the analyses for 0.25-0.3 s
# (`readers/early.py`). Medians of 5-7 alternated runs on the 2-core machine (benchmarks/README.md): 0.13 s less for
# trace_diff/control (35 MB), 0.07 s for resnet50_num_workers_4 (31 MB), 0.06 s for ns_resolution_trace (15 MB),
# 0.08 s for OWLv2 (56 MB); 0.02-0.03 s more for nccl_parser_config (10 MB) and the B200 eager trace (14 MB), whose
# reads cost little more than the process's start, its imports (numpy) and the rows' way back: those stay in one
# process (issue 38). From about 60 MB, decoding the chunks with `jobs` processes once the imports are done
# (PARALLEL_FILE_MIN_BYTES) is as fast, and at 86 MB faster (1.76 s against 1.93 s).
EARLY_READ_MIN_BYTES = 15_000_000  # about 0.1 s of reading
EARLY_READ_MAX_BYTES = 64 << 20
# `report FOLDER` reads early the folder's one trace file (`discover.lone_trace`) when the folder holds at most this
# many files and folders in all: listed before the imports and again by discovery after them, a TensorBoard logdir of
# one capture holds a handful, while a logdir of many runs would pay its listing twice for no early read.
LONE_TRACE_MAX_ENTRIES = 64
# A profile of this many events or more, and no more than CRITICAL_PATH_MAX_EVENTS, analysed where a core is free
# (`--jobs` over 1, forked workers), has its critical path walked and its compute efficiency found by a process of
# its own while the other analyses run (`analysis.analyze`, `parallel.beside`): on the 2-core machine, the analyses
# of 42,000-127,000 events took 5-25 % less time (benchmarks/README.md, "Issue 38, sixth session"). Below it the
# fork costs about what it saves; above it the walk is not made, and forking a process of gigabytes costs more.
ANALYSIS_BESIDE_MIN_EVENTS = 30_000
# How many processes by default (`parallel.default_jobs`): the cores left idle, the usable ones (CPU affinity, at most
# the cgroup's quota) less those other processes keep busy: the fewer of the 1-minute load average, which lags (a
# command that ended seconds ago still counts, as the last run of this one does), and the processes runnable now, a
# single sample. A worker on a busy core takes turns with what runs there: 8 ranks of 0.7 MB read 1.33x slower with
# one worker a core at a load of about 6 (issue 38).

# What practitioners aim GPU-Util at (the seed's 80-90 %): drawn as a strip in each device's band of the timeline.
GPU_UTIL_TARGET = (0.8, 0.9)
# AMD accelerators by the names a trace or the hardware table gives them: ROCm's device names ("AMD Instinct MI300X",
# "AMD Radeon Graphics" for an MI250), XSpace's `device_vendor` ("AMD") and the table's parts ("MI300X", "MI250 GCD",
# `analysis/hardware.py`). The report then says "Matrix Cores", AMD's name for its matrix units (CDNA white papers).
AMD_DEVICE = re.compile(r"\bAMD\b|\bInstinct\b|\bRadeon\b|^MI\d")

# --------------------------------------------------------------------------- input verdict

# The input verdict's thresholds are XProf's, so its users read ours the same way.
HIGH_INPUT_FRACTION = 0.20  # XProf: "HIGHLY input-bound"
MODERATE_INPUT_FRACTION = 0.05  # XProf: "MODERATELY input-bound"
POTENTIAL_OTHER_FRACTION = 0.03  # XProf: "POTENTIALLY input-bound" when "All Others" >= 3 %

# --------------------------------------------------------------------------- steps

# A step's time by category, highest priority first: an instant counts once, for the highest category active at
# it (as XProf and the PyTorch plugin do), so the parts sum to the step; idle is what is left.
BREAKDOWN = ("device_compute", "device_copy", "host_runtime", "input_wait", "host_compute", "idle")
# A repeating host event must cover this share of the window to be taken as the step.
MIN_REPEATING_COVERAGE = 0.3
MIN_REPEATS = 3
# A device idle gap at least this long, and at least half the longest gap, separates inferred steps.
MIN_STEP_GAP_NS = 1_000_000
# Inferred steps are a repeating structure at one scale: at least MIN_INFERRED_STEPS of them, none shorter than
# INFERRED_STEP_MIN_SHARE of the longest, except the last, which ends with its burst (no gap closes it) and is held to
# LAST_INFERRED_STEP_MIN_SHARE. Otherwise (one 493 ms burst beside microsecond ones) the window is one step.
MIN_INFERRED_STEPS = 3
INFERRED_STEP_MIN_SHARE = 0.1
LAST_INFERRED_STEP_MIN_SHARE = 0.01
# The warning of a run whose host calls say device events are missing (`analysis._device_events_cut`): the GPU was
# not recorded (a CPU-only activity list) or its events were cut off (a truncated file, a profiler buffer that
# overflowed). With no device work left, no CPU-only verdict and no finding is given: what the device did is not in
# the trace. One finding stays: host_bound, where host ops that gave the device nothing to do (no launch, copy or
# sync inside them) fill CPU_BOUND_MIN_SHARE of the step, from CPU_BOUND_MIN_OPS ops in the capture: that work bounds
# the step whatever the device did (`findings._cpu_bound_device_unrecorded`). The corpus' labels call gpu-practice's
# run host-bound (aten::randn on the CPU, 80 % of each step) and leave zoology's unjudged (such ops 16 % of its window,
# the rest ops that launched 260 kernels).
DEVICE_EVENTS_CUT = "device_events_cut"
# With no device work in the trace, the host calls that say the device had work: they give it some (kernel and graph
# launches, copies, memsets; CUDA runtime and driver, HIP), or a sync waits WAIT_MIN_NS or more for it. A framework
# queries the GPU as it starts whatever the model runs on (PyTorch: cudaGetDeviceCount, cudaGetDeviceProperties,
# cudaStreamIsCapturing, a cudaDeviceSynchronize of 43 µs), so those alone leave a CPU-only run CPU-only: the
# corpus' labels call such a run host-bound on the CPU (particle_transformer's CPU-activities trace: 2,752 CPU ops,
# mkldnn convolutions), and keep a 185 ms cudaDeviceSynchronize (flow_matching), 260 kernel launches (zoology) or
# launches and copies (gpu-practice) unjudged, their device work unrecorded.
DEVICE_WORK_CALL = re.compile(r"Launch|Mem(?:cpy|set)")
# The warning of a run with no device rows, no host call that used a device and no framework's ops: host spans alone
# (Triton's request traces, a home-grown tracer's). They do not say whether an accelerator ran, so neither a
# CPU-only verdict nor a finding is given (`Analysis.device_not_recorded`); a framework's CPU ops with no device
# call are a CPU-only run.
DEVICE_NOT_RECORDED = "device_not_recorded"
# With device work in the trace, kernel launches missing their kernel by at least this share of the launches: the
# device events were cut (a launch or two at the window's end may lose its kernel to the profiler's window).
DEVICE_EVENTS_MISSING_SHARE = 0.1
# Fewer steps than this get the `few_steps` warning: "profile at least N steps".
MIN_STEADY_STEPS = 3

# --------------------------------------------------------------------------- gaps and host ops

# A gap no longer than the device's timestamp resolution is not a gap: two kernels that run back to back are
# written 1 ns apart in a Kineto trace of ns clocks rounded to 3 decimals of a µs (ROCm graph replays: hundreds
# of "1 ns gaps"), 1 µs apart in one of whole µs, and the count and percentiles of gaps would be those of the
# rounding. The resolution is read from the timestamps themselves (`gaps.timestamp_resolution`): the largest
# power of ten of ns that divides every start and end of the device's work, since profilers round to decimal
# units; at most 1 µs, the unit of the Chrome trace format and the coarsest any reader takes, so a few events
# that happen to share a coarser multiple never hide real gaps.
TIMESTAMP_RESOLUTION_MAX_NS = 1_000

# Host calls that block until the device is done, beyond the `sync` kind (`SYNC_API_PATTERN`: the
# ``*Synchronize`` calls of both runtimes): the blocking copies of CUDA and HIP (a copy without ``Async`` waits for
# every earlier launch on its stream, then copies) and the framework ops that read a device value.
BLOCKING_COPY_CALLS = frozenset(
    {
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cuMemcpy",
        "cuMemcpyDtoH",
        "cuMemcpyDtoH_v2",
        "cuMemcpyHtoD",
        "cuMemcpyHtoD_v2",
        "cuMemcpyDtoD_v2",
        "hipMemcpy",
        "hipMemcpyWithStream",
        "hipMemcpy2D",
        "hipMemcpyDtoH",
        "hipMemcpyHtoD",
        "hipMemcpyDtoD",
        "hipMemcpyToSymbol",
        "hipMemcpyFromSymbol",
    }
)
BLOCKING_HOST_OPS = BLOCKING_COPY_CALLS | {"aten::item", "aten::_local_scalar_dense"}
# Critical path (`analysis/critical_path.py`): device work that starts this long after both its launch and the work
# before it on its stream waited for something else: the work on another stream of its device that ended last before
# it (a ``cudaStreamWaitEvent``). Kernels queued behind one another start within a few microseconds of the one before
# (HTA counts kernel-to-kernel delays up to 1.5 ms as overhead, `KERNEL_KERNEL_DELAY_THRESHOLD_US`, which hides such
# waits); a launch into an empty queue reaches the device in 5-20 us on the A100 / H100 traces of ../shared.
CROSS_STREAM_WAIT_MIN_NS = 10_000
# The critical path is walked for inputs of at most this many events: it costs about 1 us and, while it is built,
# about 300 bytes an event (benchmarks/README.md: a 40 MB, 134,660-event rank took 0.13 s and 40 MB more), so the
# 1M-tiny-event file of the memory bound's test and the 306 MB replica go without one; the report says so
# (`CRITICAL_PATH_NOT_WALKED`: the events of the inputs left out).
CRITICAL_PATH_MAX_EVENTS = 300_000
CRITICAL_PATH_NOT_WALKED = "critical_path_not_walked"
# Critical path: an interval of the step's thread with no traced child at least this long, through half of which an op
# of another thread of the process ran and ended inside it, is the step's thread waiting for that op: DDP's backward
# range waiting for gloo's all-reduce on its worker thread (sample_traces/distributed: 5-35 ms), the main thread
# waiting for autograd's device thread (kineto/resnet50_*). Shorter overlaps are threads running side by side.
# Also the step's thread's untraced stretches this long while the device ran through half of them: waits no call
# names (DeepSeek's expert-parallel dispatch spinning on a flag its kernels write: 22.7 ms, corpus deepseek_v3).
THREAD_WAIT_MIN_NS = 500_000
# A blocking call is a *wait* (its time is the device's other work, not its own copy) when it lasts at least this
# long and this many times its own device work (the copy with its correlation id).
WAIT_MIN_NS = 1_000_000
WAIT_OWN_WORK_RATIO = 10.0
# During a wait, device work covering less than this share of it means what it waited for is not in the trace
# (started before the capture window, or in another process or rank): no fix inside the trace removes it.
WAIT_SEEN_MIN_SHARE = 0.1
# An op is input-pipeline work when at least this share of its time lies inside input waits.
INPUT_WORK_COVERAGE = 0.5
# Ops that run Python under the GIL (tf.py_function, tf.numpy_function, the older py_func).
GIL_PATTERN = re.compile(r"EagerPyFunc|PyFunc|NumpyFunction|numpy_function|py_func", re.IGNORECASE)

# --------------------------------------------------------------------------- kernels

DEFAULT_SMALL_KERNEL_NS = 10_000
DEFAULT_SMALL_KERNEL_US = DEFAULT_SMALL_KERNEL_NS / 1000  # as --small-kernel-us and the API take it
# torch.compile's Triton GEMM templates: their names do not tell the precision they compute in.
TRITON_TEMPLATE_PATTERN = re.compile(r"^triton_tem_")
# Expert-parallel all-to-all kernels are collectives too: DeepEP's `deep_ep::intranode::dispatch`,
# `deep_ep::internode::combine`, `deep_ep::internode_ll::dispatch` (its source's namespaces; DeepSeek's own build names
# them `dpsk::ep::internode::*`, seen in its public V3 training trace, tools/corpus), which run on a few SMs by design.
COMMUNICATION_PATTERN = re.compile(
    r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|multimem|sendrecv"
    r"|\bep::(?:intranode|internode(?:_ll)?)::",
    re.IGNORECASE,
)


def folded(pattern: str) -> re.Pattern[str]:
    """A case-insensitive name pattern, compiled to search *lower-cased* names (`str.lower()`). On long C++ kernel
    names it takes a third of `re.IGNORECASE`'s time, which folds every character it compares. It holds for
    patterns without upper-case escapes (``\\W``, ``\\S``, ``\\D``, ``\\B``, ``\\A``, ``\\Z``), which lower-casing
    would turn into others: one is refused here."""
    if any(escaped.isupper() for escaped in re.findall(r"\\(.)", pattern)):
        raise ValueError(f"an upper-case escape cannot be folded: {pattern!r}")
    return re.compile(pattern.lower())


def first_match(name: str, patterns: Sequence[tuple[re.Pattern[str], bool]]) -> int:
    """The index of the first of `patterns` (each: the pattern, whether it is case-sensitive) that `name` matches,
    -1 none: a case-sensitive one is searched in the name as written, a `folded` one in the lower-cased name."""
    lowered = name.lower()
    for i, (pattern, case_sensitive) in enumerate(patterns):
        if pattern.search(name if case_sensitive else lowered):
            return i
    return -1


class _Pattern:
    """What both tables' rows share: a regex declared as a string, matched case-insensitively unless told."""

    __slots__ = ()  # a mixin of records (`msgspec.Struct`s), which keep no instance dict
    pattern: str
    case_sensitive: bool

    def compiled(self) -> re.Pattern[str]:
        """The pattern compiled once, so the table stays plain declared strings: a case-insensitive one `folded`,
        to search the lower-cased name."""
        return re.compile(self.pattern) if self.case_sensitive else folded(self.pattern)


class NameRule(msgspec.Struct, _Pattern, frozen=True):
    """One row of the table: names matching `pattern` (re.search) get these answers."""

    pattern: str
    eligible: bool
    tensor_core: bool
    why: str
    case_sensitive: bool = False
    # The name shows the work runs on CUDA cores (SIMT): Tensor Cores "no", not "not told".
    simt: bool = False


class PrecisionRule(msgspec.Struct, _Pattern, frozen=True):
    """One row of the precision table, read only for eligible names: the first match wins."""

    pattern: str
    precision: str
    why: str
    case_sensitive: bool = False


def _never(pattern: str, why: str, case_sensitive: bool = False) -> NameRule:
    """A rule for names that are no matrix work, so the table reads as what each row decides."""
    return NameRule(pattern, eligible=False, tensor_core=False, why=why, case_sensitive=case_sensitive)


def _tensor_core(pattern: str, why: str, case_sensitive: bool = False) -> NameRule:
    """A rule for matrix work whose name shows Tensor Core / matrix-core use."""
    return NameRule(pattern, eligible=True, tensor_core=True, why=why, case_sensitive=case_sensitive)


def _cuda_cores(pattern: str, why: str, case_sensitive: bool = False) -> NameRule:
    """A rule for matrix work whose name does not show Tensor Core use (nor that it goes without: unless its
    precision says so, `tensor_cores.classify_kernel_names` calls it unknown)."""
    return NameRule(pattern, eligible=True, tensor_core=False, why=why, case_sensitive=case_sensitive)


def _simt(pattern: str, why: str) -> NameRule:
    """A rule for matrix work whose name shows it runs on CUDA cores, whatever its element type."""
    return NameRule(pattern, eligible=True, tensor_core=False, why=why, simt=True)


# 16-, 8- and 4-bit and TF32 element types as they appear in CUTLASS and attention kernel names.
_NARROW_TYPE = r"(?:half_t|bfloat16_t|tfloat32_t|float_e4m3_t|float_e5m2_t|float_e2m1_t|_f16|bf16|tf32|e4m3|e5m2)"

NAME_RULES: tuple[NameRule, ...] = (
    # --- Triton: the kind prefix decides (see the module docstring) ---
    _cuda_cores(
        r"^triton_tem_",
        "Triton template kernel (mm, addmm, bmm, conv, flex attention); its dtype, hence Tensor Core use, "
        "is not in the name",
    ),
    _never(
        r"^triton_(?:poi|red|per|for)_", "Triton pointwise / reduction / foreach kernel, even when named after an addmm"
    ),
    _cuda_cores(r"^triton_\w*?_(?:mm|bmm|addmm|baddbmm|matmul)(?:_|$)", "other Triton kernels named after a matmul"),
    # --- never eligible: kernels whose names contain a matmul word or are easily mistaken for one ---
    _never(
        r"nccl|rccl|multimem|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|sendrecv",
        "communication (collectives, send/recv)",
    ),
    _never(
        r"cudnn::bn_|\bbn_(?:fw|bw)|batch_?norm|layer_?norm|rms_?norm|group_?norm|instance_?norm|GammaBetaBackward",
        "normalisation (cuDNN batch norm, layer / RMS / group norm)",
    ),
    _never(
        r"TensorConversionOp|_typeConvert|convert(?!er)|cast_kernel|cast_transpose|(?:^|::|\s)cast_|_to_copy"
        r"|bfloat16_copy|half_copy|quantiz|_quant_",
        "casts, conversions, (de)quantisation ('Conv' inside TensorConversionOp is no convolution)",
    ),
    _never(
        "EigenMetaKernel|TensorCwise|" + first_then("scalar_", r"\w_op") + "|elementwise_kernel",
        "elementwise (PyTorch TensorIterator, Eigen)",
    ),
    _never(
        r"reduce_kernel|splitKreduce|ReduceSplitK|reduce_1Block|reduce_wgrad|DeviceReduce|DeviceSegmentedReduce",
        "reductions, including the split-K reduction after a GEMM or a conv",
    ),
    _never(r"softmax_warp|cunn_SoftMax|SoftMax(?:Forward|Backward)|softmax_kernel", "softmax"),
    _never(
        r"fbgemm|embedding|EmbeddingBag|index_?select|permute_pooled_embs|bounds_check_indices|linearize_index",
        "embedding lookups and their index kernels ('gemm' inside fbgemm is no GEMM)",
    ),
    _never(
        r"reshape_and_cache|cache_kernel|copy_blocks|swap_blocks|_copy_page|memcpy|memset|copyBuffer|fillBuffer"
        r"|CatArray|copy_kernel|copy_device_to_device|recat_copy|copy-start|copy-done",
        "copies and KV-cache writes ('flash' inside reshape_and_cache_flash_kernel is no attention)",
    ),
    _never(
        r"nchwToNhwc|nhwcToNchw|transpose(?:_fusion|_kernel|Kernel)|(?:^|::|\s|%)(?:transpose|im\d?d?2col)",
        "layout transposes and im2col kernels around a conv or GEMM: copies (not CUTLASS's TMA IM2COL loads "
        "inside a conv kernel's name)",
    ),
    _never(
        first_then("cask_", r"\w::compute\w*Offsets") + r"|scalePackedTensor|winograd_nonfused::|generateWinogradTiles"
        r"|epilogue::impl::|gemmk1_kernel|\bgemv|\bdot_kernel|flash_bwd_dot_do_o|splitkv_combine",
        "conv / GEMM / attention helpers (offsets, scaling, Winograd transforms, epilogues, FlashAttention "
        "pre- and post-passes) and memory-bound BLAS (GEMV, K = 1 GEMM, dot): no MMA",
        case_sensitive=True,
    ),
    _never(r"moe::dev::(?:routing|finalize)", "MoE routing and un-permute: index work"),
    _never(r"depthwise", "depthwise convolution: a per-channel stencil, no GEMM"),
    # --- eligible, on CUDA cores although a Tensor Core pattern below might match ---
    _simt(first_then("cutlass", "_simt_"), "CUTLASS SIMT kernels run on CUDA cores whatever their element type"),
    _simt(r"fmha_cutlass[FB]_f32|AttentionKernel<float", "memory-efficient attention in fp32: CUDA cores"),
    # --- on Tensor Cores / matrix cores ---
    _tensor_core(
        r"16816|c1688|conv1x1|conv2d_c1_k1|dgrad_1x1_stride_2x2|direct_group|first_layer_wgrad_kernel|h1688|h884"
        r"|hmma|i16832|i8816|s884|s1688|xmma_gemm|xmma_implicit_gemm|xmma_sparse_conv|xmma_sparse_gemm"
        r"|xmma_warp_specialized_implicit_gemm",
        "XProf's Tensor Core list (kernel_stats_utils.cc)",
    ),
    _tensor_core(r"xmma|tf32|tfloat32", "xmma kernels and TF32 (which exists only on Tensor Cores)"),
    _tensor_core(
        r"(?<![a-z0-9])sm(?:90|100|101|103|110|120|121)[af]?_|wgmma|gmma|tcgen05|nvjet",
        "Hopper / Blackwell kernels (warpgroup MMA, tcgen05) and cuBLAS nvjet GEMMs",
    ),
    _tensor_core(r"tensorop|wmma", "CUTLASS tensorop / WMMA kernels"),
    _tensor_core(
        rf"^(?=.*cutlass)(?=.*(?:gemm|conv|fprop|dgrad|wgrad))(?=.*{_NARROW_TYPE})",
        "CUTLASS GEMM / conv on a 16-, 8- or 4-bit or TF32 type",
    ),
    _tensor_core(r"flash_fwd|flash_bwd|fmha", "FlashAttention / fused multi-head attention"),
    _tensor_core(
        rf"^(?=.*(?:AttentionKernel|attention_kernel_batched|AttentionBackwardKernel))(?=.*{_NARROW_TYPE})",
        "memory-efficient (xformers) attention on a 16-bit type",
    ),
    _tensor_core(r"mfma", "AMD MFMA matrix-core kernels"),
    _tensor_core(r"_MI\d+x\d+x\d+", "hipBLASLt / Tensile GEMM using MFMA instructions", case_sensitive=True),
    _tensor_core(
        r"^(?:bmm|gemm)_\w*(?:Mx|E\dm\d)|^(?:bmm|gemm)_\w+_sm1\d\d[af]?$",
        "TensorRT-LLM generated Blackwell GEMMs, e.g. MX-FP4 / MX-FP8 bmm_MxE4m3_...",
    ),
    _tensor_core(
        r"^(?=[^<(]*gemm)(?=[^<(]*(?:_f16|_bf16|_fp16|bf16_|f16_))",  # no overlap: either order, linear
        "cuBLAS / cuBLASLt GEMM whose own name (before template arguments) gives a 16-bit type",
    ),
    # --- eligible, on CUDA cores ---
    _cuda_cores(r"gemm", "GEMM without Tensor Core marks (sgemm, SIMT, cuDNN implicit / explicit GEMM conv)"),
    _cuda_cores(r"^Cijk_", "hipBLASLt / Tensile GEMM without MFMA", case_sensitive=True),
    _cuda_cores(r"[sdh]cudnn", "cuDNN SIMT convolution (scudnn = fp32)"),
    _cuda_cores(
        r"convolve|conv[23]d|3dconv|convolution|conv_?(?:fwd|bwd)|fprop|dgrad|wgrad|winograd",
        "convolution kernels (cuDNN direct / implicit GEMM / fused Winograd)",
    ),
    _cuda_cores(r"bmm|matmul", "batched GEMM / matmul kernels"),
    _cuda_cores(r"AttentionKernel|attention_kernel_batched|AttentionBackwardKernel", "memory-efficient attention"),
)

PRECISION_RULES: tuple[PrecisionRule, ...] = (
    PrecisionRule(
        r"e2m1|fp4|mxf4|nvf4", "fp4", "FP4 / MX-FP4 / NVFP4 operand (E2m1); narrowest wins over an fp8 partner"
    ),
    PrecisionRule(r"e3m2|e2m3|fp6|mxf6", "fp6", "FP6 / MX-FP6 operand (E3m2, E2m3)"),
    PrecisionRule(r"e4m3|e5m2|fp8|float8", "fp8", "FP8 operand"),
    PrecisionRule(
        r"(?<!u)int8|i8816|i16832|imma|i8i8|s8s8|(?:^|_)i8(?:_|x|$)", "int8", "8-bit integer MMA (imma, i8, int8)"
    ),
    PrecisionRule(r"tf32|tfloat32", "tf32", "TF32"),
    PrecisionRule(r"bf16|bfloat16|nvjet_(?:sm\d+_)?tst", "bf16", "bf16 (nvjet 'tst' = bf16 in / out, fp32 compute)"),
    PrecisionRule(r"Cijk_A[a-z]+_B[a-z]+_BB", "bf16", "Tensile type code BB (bf16)", case_sensitive=True),
    PrecisionRule(
        r"fp16|_f16|f16_|f16f16|half|h884|h1688|h16816|hmma|s884|nvjet_(?:sm\d+_)?hsh",
        "fp16",
        "fp16 (Volta s884 = fp16 inputs with fp32 accumulation)",
    ),
    PrecisionRule(r"Cijk_A[a-z]+_B[a-z]+_H[HSB]", "fp16", "Tensile type code H (fp16)", case_sensitive=True),
    PrecisionRule(r"s1688(?:gemm|fprop|dgrad|wgrad)", "tf32", "s1688 with fp32 data and no 16-bit type: TF32"),
    PrecisionRule(r"Cijk_A[a-z]+_B[a-z]+_SB?_", "fp32", "Tensile type code S (fp32), B = batched", case_sensitive=True),
    PrecisionRule(
        r"sgemm|scudnn|_simt_s|<float\b|fmha_cutlass[FB]_f32",
        "fp32",
        "single-precision SIMT kernels, float templates, fp32 memory-efficient attention",
    ),
)
# Matrix work in these precisions exists only on Tensor / matrix cores (FP8, FP6, FP4 and TF32 have no CUDA-core
# arithmetic; integer MMA is how GEMM libraries run INT8): a matrix kernel in one of them uses them, whatever
# else its name says (unless it is SIMT).
TENSOR_CORE_PRECISIONS = ("tf32", "fp8", "fp6", "fp4", "int8")

# --------------------------------------------------------------------------- the step model

# How TensorFlow's eager runtime runs one op (or a function): op work, though not named as a TF op.
EAGER_OP_RUN_PATTERN = r"KernelAndDevice(?:Op|Func)::Run"
# Eager ops that compute nothing: a variable read hands back its buffer, shape ops read metadata, reshapes alias
# the buffer. What such an op takes to run eagerly is the eager runtime's own per-op cost, which a graph does not
# pay per op (`step_model._eager_dispatch`).
EAGER_NO_COMPUTE_OPS = (
    "ReadVariableOp",
    "Identity",
    "Shape",
    "ShapeN",
    "Size",
    "Rank",
    "Reshape",
    "ExpandDims",
    "Squeeze",
    "StopGradient",
)
# Optimizer updates: per-step work that the parameter count sets, not the batch (TF scopes ``adam/``, ``SGD/``;
# PyTorch ``Optimizer.step#Adam.step`` and its fused ``_foreach_`` ops).
OPTIMIZER_UPDATE_PATTERN = (
    r"(?i)(?:^|/)(?:adam|adamw|sgd|rmsprop|adagrad|adadelta|adamax|nadam|ftrl|lamb|lion|optimizer)(?:_\d+)?/"
    r"|^Optimizer\.step|^aten::_foreach_|^aten::_fused_adam|ResourceApply"
)
# A host op whose own time is at least this computes at its size; a shorter one is dispatch or memory bound
# (a 2x512 @ 512x512 matmul takes ~25 us on a CPU core, at batch 64 ~90 us).
BATCH_WORK_MIN_NS = 50_000

# --------------------------------------------------------------------------- capture kinds (analysis/capture.py)

# One-time costs: work a run pays once, at its start, that no steady step repeats. Each (what, pattern) names a kind
# of cost for people; only events of at least ONE_TIME_MIN_NS count (a compile-cache lookup every step is no
# compilation).
ONE_TIME_COSTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        # torch 2.13's record_function ranges around Dynamo, AOTAutograd and Inductor (seen in
        # sample_traces/warmup/torch_compile_first_call: `dynamo` 9.9 s, `entire_backward_compile` 1.5 s); none
        # repeats in a steady step (`Torch-Compiled Region`, `TorchDynamo Cache Lookup` do, and are not here).
        "torch.compile compilation (Dynamo / AOTAutograd / Inductor)",
        re.compile(
            r"\(dynamo_timed\)$|^(?:dynamo|entire_frame_compile|entire_backward_compile|backend_compile"
            r"|inductor_compile|compile_file|create_aot_dispatcher_function)$"
            r"|^torch/_(?:dynamo|inductor|functorch)/(?:convert_frame|compile_fx|codecache|output_graph)\.py"
        ),
    ),
    ("Triton compilation and autotuning", re.compile(r"^triton/compiler/|benchmark_all_configs|autotune", re.I)),
    (
        # TF's tf.function tracing, JAX's jaxpr tracing and lowering, and XLA's compiler passes
        # (sample_traces/warmup/tf_jit_first_call: graph building 71 ms, `CpuCompiler::RunBackend` 156 ms;
        # jax_jit_first_call: `lower_sharding_computation` 15 ms, `backend_compile_and_load` 179 ms); GPU and TPU
        # compilers share the `*Compiler::` names.
        "tracing and XLA compilation (tf.function, jax.jit)",
        re.compile(
            r"^tf\.function-graph_building$|^HLO passes|Compiler::(?:RunBackend|RunHloPasses|Compile\w*)"
            r"|XlaCompile|xla::\w*Compile|CompileToLocalExecutable|BuildExecutable|"
            + first_then("PjRt", "Client::Compile")
            + r"|^(?:trace_to_jaxpr_dynamic|lower_sharding_computation|backend_compile_and_load)$"
        ),
    ),
    (
        "cuDNN autotuning (cudnn.benchmark)",
        re.compile(rf"cudnnFind|{first_then('Find', 'Algorithm')}|{first_then('cudnn', '[Bb]enchmark')}"),
    ),
    (
        "CUDA / HIP initialisation (context creation, module loading)",
        re.compile(r"^(?:cu|hip)(?:Init|DevicePrimaryCtxRetain|CtxCreate|ModuleLoad\w*)(?:_v\d+)?$"),
    ),
)
ONE_TIME_MIN_NS = 1_000_000
# The first call of an op that takes this long and this many times the median of its later calls is a one-time cost
# too: lazy initialisation (CUDA context creation inside the first tensor allocation, cuDNN and module set-up in the
# first convolution, an optimizer's state on its first step, DataLoader workers starting).
FIRST_CALL_MIN_NS = 100_000_000
FIRST_CALL_RATIO = 20.0
# A kernel launch call (`KERNEL_LAUNCH`) that takes FIRST_CALL_MIN_NS and FIRST_CALL_RATIO times the median launch is
# CUDA's lazy module loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) in a kernel's first launch: a
# one-time cost too, whichever launch of the run it is. Seen at 347-675 ms against medians of 6-9 us in three public
# A100 traces of two projects (tools/corpus: particle_transformer, SwitchTransformers); no launch of any trace in
# ../shared/traces or sample_traces comes near 100 ms.
# One-time costs covering this share of the window make it a warm-up capture (kind `warmup`); at least this many
# steps after them are a steady state, analyzed alone.
WARMUP_MIN_SHARE = 0.25
STEADY_MIN_STEPS = 2
# Training: backward ops (PyTorch autograd nodes ``AddmmBackward0`` and ``aten::*_backward`` ops, TF's gradient tape
# and gradient op types ``ReluGrad``, ``Conv2DBackpropFilter`` run eagerly, JAX's transposed jvp; not XLA's
# ``collective-pipeliner-backward`` pass) or an optimizer update (the optimizer's own
# step and fused updates; `aten::_foreach_copy_` alone, which servers call, is no update).
TRAINING_PATTERN = re.compile(
    r"[a-z0-9]Backward\d*\b|^aten::\w+_backward|^autograd::engine::evaluate_function|gradient_tape/|(?:^|/)gradients/"
    r"|transpose\(jvp\(|[a-z]Grad(?:V\d+)?\b|Backprop(?:Input|Filter)(?:V\d+)?\b"
    r"|^Optimizer\.step|^aten::_fused_(?:adam|adamw|sgd|adagrad)|^aten::_foreach_(?:addcdiv|addcmul|lerp|sqrt)_"
    r"|ResourceApply|(?i:(?:^|/)(?:adam|adamw|sgd|rmsprop|adagrad|adadelta|adamax|nadam|ftrl|lamb|lion)(?:_\d+)?/)"
)
# Serving frameworks, by their own Python frames, ops and annotations.
SERVERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("vLLM", re.compile(r"(?:^|/)vllm/|^vllm[:.]|^vllm::")),
    ("SGLang", re.compile(r"(?:^|/)sglang/|^sglang[:.]|^sglang::|^sgl_kernel")),
    ("TGI", re.compile(r"text_generation_server")),
    ("TensorRT-LLM", re.compile(r"tensorrt_llm|trtllm", re.I)),
)
# Inference without a server, on positive evidence only (a trace with no backward op may still be a training
# run's forward pass): PyTorch's grad-mode context entered with no backward op (`torch.no_grad` /
# `torch.inference_mode` / `set_grad_enabled(False)`: the `with_stack` frame `torch/autograd/grad_mode.py(80):
# __enter__`, seen in both Hugging Face inference traces of tracelens/h100), `torch.inference_mode`'s own C call,
# Hugging Face's generation loop (`transformers/generation/utils.py` frames, a `generate` frame) and ranges named
# for generation (`generate`, `prefill`, `decode`, `decode_step`).
INFERENCE_PATTERN = re.compile(
    r"^torch/autograd/grad_mode\.py\(\d+\): __enter__$|_enter_inference_mode|^transformers/generation/"
    r"|\.py\(\d+\): generate$|^(?:generate|prefill|decode)(?:_step)?$"
)
# A micro-benchmark: the outermost host ops are at most this many distinct framework ops (``aten::``, TF ops), each
# called at least this many times, with no training and no serving frames. Inference needs more distinct framework
# ops than that (a model's), else what ran cannot be told.
MICROBENCHMARK_MAX_OPS = 3
MICROBENCHMARK_MIN_CALLS = 10
# A model's own frames (PyTorch's ``with_modules`` / ``with_stack`` module ranges): a step of a model, never a
# micro-benchmark, however few distinct ops it runs.
MODEL_FRAME_PATTERN = re.compile(r"^nn\.Module: ")
# A trace with graph-capture calls is a capture pass unless graph replays after the capture carry this share of its
# kernel time (then the capture was a one-time cost before a steady state of replays).
REPLAYS_AFTER_CAPTURE_SHARE = 0.5

# --------------------------------------------------------------------------- device memory

# Device memory: peak reserved above this share of capacity is "at the limit" (the PyTorch TensorBoard plugin
# warned at 90 %); reserved above allocated by this share of the peak, and by at least SLACK_MIN_BYTES, is
# allocator slack; a bigger batch keeps this share of the free memory spare.
AT_LIMIT_FRACTION = 0.9
SLACK_FRACTION = 0.2
SLACK_MIN_BYTES = 1 << 30
BATCH_SPARE_FRACTION = 0.1

# --------------------------------------------------------------------------- what the run already does

# A setting "is the run's" when it holds for at least this share (of kernel time, of copies, of calls).
MOST = 0.5
# A fused MapAndBatch's py_function calls: overlapping for this share of their time means parallel calls;
# below the second share with at least MIN_SEQUENTIAL_CALLS calls, one at a time.
PARALLEL_OVERLAP_SHARE = 0.10
SEQUENTIAL_OVERLAP_SHARE = 0.01
MIN_SEQUENTIAL_CALLS = 8

TF_DATA_PREFIX = "Iterator::"
# tf.data stage types (an iterator name's parts, without the input index), by what the stage does.
STAGE_TYPES = {
    "prefetch": r"^(?:Legacy)?Prefetch(?:V\d+)?$",
    "cache": r"^(?:Memory|File)?Cache(?:Impl)?$",
    "map": r"^Map$",
    "parallel_map": r"^ParallelMap(?:V\d+)?$",
    "map_and_batch": r"^MapAndBatch$",
    "interleave": r"^Interleave$",
    "parallel_interleave": r"^(?:Legacy)?ParallelInterleave(?:V\d+)?$",
}


class NamePattern(msgspec.Struct, frozen=True):
    """A name rule: `pattern` (re.search) decides; every name it can match holds one of `literals`
    (lower-case; a leading newline: the name starts with the rest), which find the names worth trying."""

    pattern: re.Pattern[str]
    literals: tuple[str, ...]


TF_ITERATOR = NamePattern(re.compile("^" + re.escape(TF_DATA_PREFIX)), ("\n" + TF_DATA_PREFIX.lower(),))
# A tf.function ran: its call (tf.data's own __inference__next_func / Dataset_map functions aside) or its ops.
TF_FUNCTION_CALL = NamePattern(re.compile(r"__inference_(?!_(?:next|init|finalize)_func|Dataset_)"), ("__inference_",))
TF_FUNCTION_OP = NamePattern(re.compile(r"(?:^|/)(?:Stateful)?PartitionedCall(?:[/:_]|$)"), ("partitionedcall",))
# An op run eagerly; iterator, optional and constant ops run eagerly around tf.functions too, so they do not count.
TF_EAGER_OP = NamePattern(
    re.compile(
        r"^EagerLocalExecute: (?!__inference_|_EagerConst$|Optional|Iterator|AnonymousIterator|MakeIterator"
        r"|DeleteIterator|\w*Dataset)"
    ),
    ("\neagerlocalexecute: ",),
)
# tf.py_function / numpy_function ops (host_ops' rule: they hold the GIL).
PY_FUNCTION = NamePattern(GIL_PATTERN, ("pyfunc", "numpyfunction", "numpy_function", "py_func"))
TF_XLA = NamePattern(
    re.compile(r"XlaLaunch|_XlaRun|_XlaCompile|XlaMustCompile|(?:^|/)cluster_\d+(?:[/:_]|$)"), ("xla", "cluster_")
)
JAX_XLA = NamePattern(re.compile(r"^(?:jit|pmap)_\w"), ("\njit_", "\npmap_"))
TORCH_COMPILE = NamePattern(
    re.compile(
        r"^triton_(?:poi|red|per|tem|for)_|CompiledFunction|CompiledFxGraph|Torch-Compiled Region"
        r"|TorchDynamo Cache Lookup|torch/_inductor/"
    ),
    ("\ntriton_", "compiled", "torchdynamo cache lookup", "torch/_inductor/"),
)
TORCH_OP = NamePattern(re.compile(r"^aten::"), ("\naten::",))
# DDP's gradient reducer ran: `DistributedDataParallel.forward` (its record_function range) and the reducer's own ops
# (`torch.distributed.ddp.reducer::copy_bucket_to_grad`, `torch::distributed::reducer::copy_` / `mul_out`), seen in
# sample_traces/distributed/* (gloo) and ../shared/traces/hta/{nccl_parser_config,ns_resolution_trace,trace_diff}
# (NCCL). A bare `c10d::allreduce_` is no evidence: FSDP, tensor parallelism and hand-written all-reduces call it too.
DDP_REDUCER = NamePattern(
    re.compile(r"^DistributedDataParallel\.forward$|^torch(?:\.distributed\.ddp\.reducer|::distributed::reducer)::"),
    ("\ndistributeddataparallel.forward", "reducer::"),
)
MULTIPROCESS_LOADER = NamePattern(re.compile(r"_MultiProcessingDataLoaderIter"), ("_multiprocessingdataloaderiter",))
SINGLE_PROCESS_LOADER = NamePattern(re.compile(r"_SingleProcessDataLoaderIter"), ("_singleprocessdataloaderiter",))
GRAPH_LAUNCH = NamePattern(re.compile(r"^(?:cuda|cu|hip)GraphLaunch"), ("graphlaunch",))
KERNEL_LAUNCH = NamePattern(
    re.compile(r"^(?:cuda|cu|hip)(?:Ext)?(?:Module)?Launch(?:Cooperative)?Kernel"), ("\ncu", "\nhip")
)
# An asynchronous copy or memset put on a stream (``cudaMemcpyAsync``, ``cuMemcpyHtoDAsync_v2``, ``cudaMemsetAsync``,
# ``cuMemsetD32Async``, ``hipMemcpyWithStream``): with kernel and graph launches, the calls HTA counts into a stream's
# queue (`get_runtime_launch_events_mask` in hta/common/trace_symbol_table.py).
ASYNC_COPY_LAUNCH = NamePattern(
    re.compile(r"^(?:cuda|cu|hip)Mem(?:cpy|set)\w*Async|^hipMemcpyWithStream"), ("\ncu", "\nhip")
)
# Pending launches a stream holds before the next launch call blocks the host. CUDA does not document it; HTA takes
# 1024 (`CUDA_MAX_LAUNCH_QUEUE_PER_STREAM` in hta/common/constants.py: "1022 - 1024 cause blocking") and users
# measured about 1000 (forums.developer.nvidia.com/t/cuda-stream-are-blocked-when-luanch-lots-of-kernels-1000/68937).
LAUNCH_QUEUE_LIMIT = 1024
# A launch call that finds this many launches of its stream outstanding (queued or running) waits for the device to
# free a slot (HTA: "1022 - 1024 cause blocking"). hta/ns_resolution_trace: launches find up to 1023, and their calls
# take 200 us at p90 against 5 us at the median.
QUEUE_FULL_FOUND_DEPTH = LAUNCH_QUEUE_LIMIT - 2
# Queue depth's time series: at most this many points per stream (a chart's width; each the bin's deepest queue).
QUEUE_SERIES_POINTS = 500

# --------------------------------------------------------------------------- bottleneck rules (findings.py)

# Severity from the projected saving's share of the step: XProf's input thresholds, and 1 % for "low".
HIGH_SEVERITY = HIGH_INPUT_FRACTION  # XProf: >= 20 % of the step
MEDIUM_SEVERITY = MODERATE_INPUT_FRACTION  # XProf: >= 5 %
LOW_SEVERITY = 0.01
# Share of kernels below the small-kernel threshold that makes host-side gaps "launch-bound" rather than "host-bound".
SMALL_KERNEL_SHARE_FOR_LAUNCH_BOUND = 0.5
# A drained launch queue: kernels start this soon after their launch returns. Longer median delays mean the host
# is ahead of the device (a deep queue), which is not launch-bound whatever the kernel sizes.
DRAINED_QUEUE_LAUNCH_DELAY_NS = 50_000
# The same judged from the launch queue (`analysis/queue_depth.py`), where launches are joined to their device work:
# drained when the median launch finds at most this many launches queued or running on its stream (at most the one
# running: the device takes each launch as soon as it comes). The share of step time at depth 0 does not tell launch
# overhead from other host work (input-bound resnet50_num_workers_0 in ../shared/traces/kineto: 41 %; launch-bound
# hta/amd_trace: 26 %, corpus switchtransformers_a100_python_stacks: 7 %); the depth a launch finds does (0 on every
# launch-bound trace of ../shared/traces and the corpus; 14 and more on the others), so it is the test and the
# drained share is evidence.
DRAINED_QUEUE_FOUND_DEPTH = 1
# launch_bound names this many of the repeated small-kernel sequences (`analysis/kernel_sequences.py`) as evidence.
LISTED_SEQUENCES = 3
# Tensor Cores count as unused when they run less than this share of eligible kernel time.
TENSOR_CORE_UNUSED_SHARE = 0.1
# NVIDIA Ampere's compute capability: from here on Tensor Cores take bf16 and TF32 (A100 data sheet), so mixed
# precision advice names bf16 (no loss scaler) and TF32; below it, fp16 with a loss scaler.
AMPERE_CC = (8, 0)
# From this median device-busy share of the step on, efficiency estimates rank before stalls.
BUSY_SHARE_EFFICIENCY_FIRST = 0.9
# The headline applies at most this many fixes.
HEADLINE_FIXES = 3
# Each rule's fix as an edit of the critical path (`analysis/path_projection.py`): the path's parts
# (`analysis/critical_path.PARTS`) its saving comes out of, in order, while they last. A rule not here has no edit
# the path can make (a bigger batch changes every node; waits with no fix project nothing).
PATH_EDIT_OTHER_RANKS = "other_ranks"  # the path's stretches on ranks other than the step's: a straggler's work
_HOST_STRETCHES = ("launch", "host_gap", "cpu_op", "runtime")
PATH_EDITS: dict[str, tuple[str, ...]] = {
    "input_bound": ("input_wait",),  # the wait for input goes (or shrinks to the faster pipeline's)
    "launch_bound": _HOST_STRETCHES,  # launches at a graph replay's cost: the host's time between kernels
    "host_bound": _HOST_STRETCHES,  # the host's work between launches; on a CPU-only run, the time between ops
    "h2d_copy": ("copy",),  # exposed copies overlap compute
    "transfer_bound": ("copy",),
    "d2h_sync": ("sync", "copy", *_HOST_STRETCHES),  # the sync and the host's re-launch after it
    "low_occupancy": ("compute",),  # kernels on the path run faster by the fix's share of kernel time
    "fp32_compute": ("compute",),
    "low_compute_efficiency": ("compute",),
    "straggler": (PATH_EDIT_OTHER_RANKS, "rank_wait"),  # the slow rank at the median's pace
    "communication": ("collective_transfer",),  # the transfer overlaps compute
}
# The path's parts it would pass wherever their time lies: device work, a node of the graph with every edge, so a fix
# of kernels, copies or transfers none of which is on the path saves nothing there. Host stretches (input waits, CPU
# ops, launches) are seen only on the threads the walk passes, so an edit of them the path never met projects nothing
# (XSpace runs wait for input on a thread the walk does not enter while the executor's threads run).
PATH_SEEN_WHEREVER_THEY_ARE = ("compute", "copy", "collective_transfer")
# A path projection is made only where the path holds at least this share of its steps' time in stretches the trace
# holds (not `idle`): below it, most of what a fix could shorten is out of sight.
PATH_PROJECTION_MIN_KNOWN = 0.5
# Which projection the headline states, the step model's or the critical path's: the one closer to the measured step
# on the real before/after pairs (`python -m tools.projection_accuracy`, docs/methodology.md: within 10 % on 6 of
# 10 pairs both; the path's is never below the step model's, and every miss above is the step model's too).
HEADLINE_PROJECTION = "step_model"
# The two projections are said to agree within this share of the stated step after.
PATHS_AGREE_WITHIN = 0.01
# An input verdict gives `input_bound` this severity.
VERDICT_SEVERITY = {"high": "high", "moderate": "medium"}
# CPU-only runs: framework overhead and small ops are judged only where a step holds at least this many ops.
MIN_HOST_OPS_PER_STEP = 10
# CPU-only runs: with no framework overhead found, `host_bound` says the step is the CPU's own work (its ops, and
# the time between them where the loop is not traced) from this share of the step on, naming the op with the most
# self time. The corpus' independent labels name host_bound on such runs from 8 sources (TF1 and PyTorch, Kineto
# and the legacy profiler: ops 90-100 % of the step; PyTorch runs of many tiny ops, 19-47 % ops and the rest
# between them); XProf's overview calls a CPU-only run's op time its compute.
CPU_BOUND_MIN_SHARE = 0.5
# ... and only from this many host framework ops in the capture: the corpus' labels read nothing from 8 ops in a
# 0.15 ms window (a notebook's stray calls), while the smallest CPU workload they call host_bound holds 88.
CPU_BOUND_MIN_OPS = 20
# host_bound on an accelerator names the host op with the most time of its own while the device waited for the
# host's next launch (`Analysis.ops_in_launch_waits`) when that op holds at least this share of those waits. Below
# it, no op explains them: the host's time between ops (Python, the framework) does, which the trace names nowhere,
# and the gap list shows what ran. kernelforge's T4 steps: aten::normal_ (torch.randn on the CPU) 91 % of the waits,
# the corpus label's named cost; trace_diff/control (aten::mm), the resnet50 pair (aten::fill_, aten::empty) and
# TraceLens' H100 Qwen trace (aten::addmm): 15-20 %; nccl_parser_config's aten::empty 8 % and an XProf BERT
# replica's top op 3 % of the waits, among hundreds of ops: none named.
HOST_BOUND_CULPRIT_MIN_SHARE = 0.1
# small_batch: small kernels carry at least this share of kernel time; the batch grows this many times by default.
SMALL_BATCH_KERNEL_SHARE = 0.5
# CPU-only: the share of the step (less input wait) in per-step costs a batch does not grow (tiny ops, optimizer
# updates, the dispatch between ops) from which a bigger batch is advised.
SMALL_BATCH_FIXED_SHARE = 0.5
DEFAULT_BATCH_FACTOR = 4.0
# small_batch needs memory room for at least this factor; it never advises more than MAX_BATCH_FACTOR at once.
MIN_BATCH_FACTOR = 2.0
MAX_BATCH_FACTOR = 8
# How many times faster the first input fix makes the pipeline produce a batch. tf.data's AUTOTUNE caps a parallel
# map / interleave near the host's core count (2x on the 2-core hosts of our pairs, which is the smallest host
# the projection assumes); `num_workers=4` more DataLoader worker processes load 4x as fast (4.0-4.2x on our pairs).
# A cache removes the work instead: `step_ns_after_hidden` in the evidence is the step once input is fully hidden.
INPUT_FIX_PARALLELISM = {"DataLoader": 4.0, "DataPipe": 4.0}
DEFAULT_INPUT_FIX_PARALLELISM = 2.0
# input_bound names the slowest input function as its culprit when its time is at least this share of the input
# wait (a map function that is the wait, e.g. a py_function decode); below it the function is one part among
# several, and the stage the loop waits in (the iterator, `__next__`) is named instead.
INPUT_CULPRIT_FUNCTION_SHARE = MOST

# --------------------------------------------------------------------------- kernel classes (kernel_classes.py)

# What a device kernel computes, told by its name, for the FLOP / MFU / roofline breakdown. Each (class, pattern)
# is searched case-insensitively and the first match wins, so the order settles names that hold words of several
# classes: Inductor's kind prefix first (a `triton_poi_fused_addmm_0` is pointwise work), then collectives and
# copies run as kernels, attention before matmul and elementwise (FlashAttention names carry `cutlass`, a
# paged-attention pass is called `..._reduce_kernel`), convolutions before matmul (implicit-GEMM convs say `gemm`),
# elementwise last (a `..._gemm_relu` is a GEMM with its epilogue). Memcpy / memset rows are `copy` by their kind; a
# kernel no pattern matches is `other` (cat, index and gather kernels, KV-cache writes, MoE routing, sorting: data
# movement and bookkeeping).
# Inductor kernels by their kind prefix: pointwise, reduction, persistent reduction, foreach (TORCH_COMPILE's
# prefixes but `tem`, the GEMM / conv / attention templates, which the rules below tell apart by name).
_INDUCTOR_ELEMENTWISE = r"^triton_(?:poi|red|per|for)_"
# NCCL / RCCL and the rest of COMMUNICATION_PATTERN, XLA's collective HLO ops (hyphenated), vLLM / SGLang custom
# all-reduce.
_KERNEL_COMMUNICATION = (
    COMMUNICATION_PATTERN.pattern
    + r"|all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast|cross_device_reduce"
)
# Copies that run as kernels: HIP's blit kernels (ROCclr copyBuffer / fillBuffer) and XLA's copy ops (a TPU's
# host-offload `copy-start` / `copy-done`), matched on the op's own name, before the `=` of its HLO text.
_KERNEL_COPY = r"__amd_rocclr_(?:copy|fill)|^(?:copyBuffer|fillBuffer)|^%?copy(?:-start|-done)?(?:\.\d+)?(?:\s*=|$)"
# FlashAttention 2 / 3 (`flash_fwd`, `flash::`, `FlashAttnFwdSm90`), xformers / CUTLASS / TensorRT-LLM / CK fused
# MHA (`fmha`), PyTorch's memory-efficient `AttentionKernel`, cuDNN SDPA, vLLM paged and unified (Triton) attention
# with its `reduce_segments` pass, FlashInfer's prefill / decode, aiter MLA, the Triton tutorial's `_attn_fwd` and
# SGLang / vLLM Triton decode kernels (`_fwd_kernel_stage1`). Not `flash` alone: `reshape_and_cache_flash_kernel`
# writes a KV cache, `create_flashinfer_kv_indices_triton` builds indices.
_KERNEL_ATTENTION = (
    r"flash_(?:fwd|bwd|attn|fprop|bprop)|flash::|FlashAttn|fmha|attention|\bmha_|sdpa|^reduce_segments$"
    r"|flashinfer::\w*(?:Prefill|Decode)|(?:Batch|Single)(?:Prefill|Decode)With|\bmla_|_attn_fwd|_attn_bwd|^attn_fwd"
    r"|^_fwd_(?:grouped_)?kernel(?:_stage\d|_alibi)?$"
)
# Named after a GEMM but none: the MoE un-permute that gathers and sums the expert outputs of triton_kernels'
# `matmul_ogs` (`_finalize_matmul_scatter`): data movement, so `other`.
_KERNEL_NOT_MATMUL = r"_finalize_matmul"
# cuDNN (`scudnn`, `s884cudnn`, dgrad / wgrad engines, implicit / explicit `convolve_sgemm`, Winograd and the helper
# kernels of its algorithms: offsets, packed-tensor scaling, tile generation), CUTLASS / xmma conv (`fprop`,
# `ImplicitGemmConvolution`), MIOpen (`igemm_fwd_gtc`, `naive_conv`, `MIOpenConvUni`, `sp3AsmConv`), im2col, XLA's
# `convolution`; `conv` but not in `convert` / `TensorConversionOp`.
_KERNEL_CONV = (
    r"conv(?!ert|ers)|[sdhi]\d*cudnn|fprop|dgrad|wgrad|winograd|implicit_?gemm|igemm|im\d?d?2col|depthwise"
    r"|cask_cudnn|scalePackedTensor"
)
# cuBLAS / cuBLASLt (`gemm`, `gemv`, `sm90_xmma_gemm`, `nvjet`, split-K reductions, the GEMV reduction), CUTLASS
# GEMMs (not fbgemm's embedding kernels), hipBLASLt / Tensile (`Cijk_`, `_MI16x16x1`), CK (`DeviceGemm`,
# `gemm_xdl`), matmul-named kernels (triton_kernels' `matmul_ogs`, TensorRT-LLM's `bmm_`), Inductor GEMM templates,
# XLA's `dot` op.
_KERNEL_MATMUL = (
    r"(?<!fb)gemm|gemv|matmul|bmm|cublas|hipblas|rocblas|Tensile|nvjet|xmma|wgmma|tcgen05|"
    + first_then("cutlass", "_(?:tensorop|simt|wmma)")
    + r"|^Cijk_|_MI\d+x\d+x\d+|^triton_tem_|splitKreduce|ReduceSplitK|\bdot_kernel|^%?dot(?:\.\d+)?\s*="
)
# Memory-bound per-element work: PyTorch's TensorIterator and Eigen kernels, foreach (multi-tensor) updates,
# normalisations (batch / layer / RMS / group norm, cuDNN `bn_`, Transformer Engine `ln_`), softmax, reductions,
# activations (and vLLM / SGLang `act_and_mul`), rotary embeddings, dropout and random fills, casts and
# (de)quantisation, pooling, XLA loop / input (reduction) fusions and elementwise HLO ops.
_KERNEL_ELEMENTWISE = (
    r"elementwise|EigenMetaKernel|TensorCwise|multi_tensor_apply|foreach"
    r"|(?:batch|layer|rms|group|instance)_?norm|cudnn::bn_|\bbn_(?:fw|bw)|\bln_(?:fwd|bwd)|GammaBeta"
    r"|softmax|reduce_kernel|DeviceReduce|DeviceSegmentedReduce|reduce_1Block"
    r"|act_and_mul|silu|gelu|swiglu|relu|sigmoid|tanh|rotary|\brope|dropout|philox|random"
    r"|quantiz|_quant|cast_|_to_copy|typeConvert|pooling|(?:max|avg)_?pool|"
    + first_then("adaptive", "pool")  # adaptive, a run of word characters, _?pool
    + r"|kind=k(?:Loop|Input)\b|^(?:loop|input)_\w*fusion"
    r"|^%?(?:add|subtract|multiply|divide|maximum|minimum|exponential|log|negate|rsqrt|sqrt|select|compare|convert"
    r"|broadcast|reduce|transpose|iota)(?:\.\d+)?\s*="
)
# The kernel classes, in the order tables list them (`analysis/kernel_classes.py`; copy is memcpy / memset by kind).
KERNEL_CLASSES = ("matmul", "conv", "attention", "elementwise", "communication", "copy", "other")
# Each `folded`: searched in the lower-cased kernel name.
KERNEL_CLASS_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kernel_class, folded(pattern))
    for kernel_class, pattern in (
        ("elementwise", _INDUCTOR_ELEMENTWISE),
        ("communication", _KERNEL_COMMUNICATION),
        ("copy", _KERNEL_COPY),
        ("attention", _KERNEL_ATTENTION),
        ("other", _KERNEL_NOT_MATMUL),
        ("conv", _KERNEL_CONV),
        ("matmul", _KERNEL_MATMUL),
        ("elementwise", _KERNEL_ELEMENTWISE),
    )
)

# --------------------------------------------------------------------------- compute efficiency (analysis/compute.py)
# The kernel classes that carry a model's FLOPs: MFU's "matmul-class share of busy time" is their kernel time.
COMPUTE_CLASSES = ("matmul", "conv", "attention")
# A device is busy enough for its speed, not its idle time, to be what is left: step GPU-Util at least this.
EFFICIENCY_BUSY_MIN = 0.8
# `low_compute_efficiency` fires only below this MFU: above it the device does most of what its peak allows.
LOW_MFU_MAX = 0.5
# An estimate (`fp32_compute`, `low_occupancy`, `low_compute_efficiency`) projects only from evidence that covers
# at least this share of the time it judges (compute-class kernel time with counted FLOPs or a known precision,
# kernel time with launch shapes): under it, most of that time is unread, and what the rest shows cannot stand
# for it (a decode step whose quantised MoE GEMMs have no FLOPs counted is judged by its small dense GEMMs).
EVIDENCE_MIN_COVERAGE = 0.5
# MFU counts only the FLOPs the trace tells: under this FLOP coverage of the compute-class kernel time it is shown
# as a lower bound ("≥ 5.1 %"); from it on, the uncounted rest can move it by a tenth at most.
MFU_EXACT_COVERAGE = 0.9
# ... and only where copies and collectives (bound by a link, not by the device) hold less than this share of the
# kernel time: a device busy moving data is not slow at computing.
EFFICIENCY_MAX_TRANSFER_SHARE = 0.5
# `transfer_bound`: copies not hidden under kernels hold at least this share of the device's busy time in the steps
# (the ledger's copy parts over its busy parts): the device mostly moves data, so what it runs is not the question
# (the same bar as `EFFICIENCY_MAX_TRANSFER_SHARE`, past which compute efficiency is not judged).
TRANSFER_BOUND_SHARE = EFFICIENCY_MAX_TRANSFER_SHARE
# Advice: fuse elementwise and norm kernels when they hold at least this share of kernel time.
ELEMENTWISE_HEAVY_SHARE = 0.3
# Advice: larger or fused GEMMs when matmul kernels reach under this share of the roofline.
GEMM_LOW_EFFICIENCY = 0.6
# Ops shown as roofline points (JSON `compute.ops`, the HTML chart): the longest, by kernel time.
ROOFLINE_OPS = 40
# The op names of unfused attention: a batched matmul and a softmax in place of one SDPA / flash kernel.
UNFUSED_ATTENTION_OPS = ("aten::softmax", "aten::_softmax")
FUSED_ATTENTION_OPS = re.compile(r"scaled_dot_product|flash|efficient_attention", re.IGNORECASE)
# Kineto's `Input type` names and XLA's HLO result types -> the compute dtype (`analysis/hardware.DTYPES` names) and
# its bytes an element (Kineto; the HLO text holds the shape, not used).
KINETO_DTYPES: dict[str, tuple[str, float]] = {
    "double": ("fp64", 8),
    "float": ("fp32", 4),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "c10::Float4_e2m1fn_x2": ("fp4", 0.5),
}
# XLA's HLO text names its result type (`%fusion.3 = bf16[8,128]{1,0} fusion(...)`): the op's dtype on a TPU.
HLO_RESULT_TYPE = re.compile(r"=\s*\(?([a-z]+\d*)\[")
HLO_DTYPES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "s8": "int8", "u8": "int8", "f8e4m3fn": "fp8"}
# A TPU's matrix units multiply f32 in bf16 passes and publish no f32 peak: its work is measured against bf16.
TPU_MATMUL_DTYPE = "bf16"
# Share of an input's launches whose External id is their correlation id beyond which its External ids are taken
# as repeats (2022-era Kineto), and launches are given the op around them on their thread instead.
REPEATED_EXTERNAL_ID_SHARE = 0.5
# Where the trace records no FLOPs, what to do to get them, per framework.
FLOPS_HOW_TO = {
    "pytorch": "profile with `torch.profiler.profile(record_shapes=True)` (or `with_flops=True`)",
    "tensorflow": "TensorFlow GPU traces carry no op FLOPs; XLA on TPU records them",
    "jax": "JAX GPU traces carry no op FLOPs; XLA on TPU records them",
    # No framework's ops (an Nsight Systems export of a CUDA program, a home-grown tracer): no op shapes to count.
    "unknown": "the trace names no framework ops with shapes to count them from (a PyTorch run: profile with "
    "`record_shapes=True`)",
}

# --------------------------------------------------------------------------- collectives (analysis/collectives.py)
# Events that are collectives, by name: NCCL / RCCL kernels (device side; `ncclKernel_AllReduce_RING_LL_Sum_float`,
# `ncclDevKernel_AllGather_RING_LL`) and a process-group backend's own ranges on the host (`gloo:all_reduce` on a gloo
# worker thread, `nccl:all_reduce`, `mpi:`, `ucc:`), which span a rank's arrival to its completion. The c10d ops
# (`c10d::allreduce_`) and `record_param_comms` only enqueue the work: read for their args, never timed as instances.
COLLECTIVE_KERNEL_PATTERN = re.compile(r"^(?:void\s+)?(?:nccl|rccl)\w*(?:Kernel|_)|^multimem_all_reduce", re.IGNORECASE)
COLLECTIVE_HOST_PATTERN = re.compile(r"^(?:gloo|nccl|rccl|mpi|ucc|xccl):[a-z_]+$")
COLLECTIVE_ENQUEUE_PATTERN = re.compile(r"^c10d::|^record_param_comms$")
# Waits and barriers are synchronisation, not collectives with a payload of their own.
COLLECTIVE_EXCLUDED = re.compile(r"barrier|wait", re.IGNORECASE)
# Collectives that carry no `Seq`, process group or message size (gloo without `record_shapes`, older torch) are
# matched by order alone: the k-th call of a collective in step s on one rank with the k-th on every other. Two
# checks keep a wrong pairing out, each counted under its warning:
# * where the ranks record a different number of calls of a collective in a step, order cannot say which pairs with
#   which, so none of them is matched (`COLLECTIVES_COUNTS_DIFFER`);
# * the calls of one instance overlap in time, since a collective completes on a rank only once every rank has
#   arrived (each call ends after the latest call's start); a pairing whose latest start comes more than
#   `COLLECTIVE_OVERLAP_SLACK_NS` after its earliest end is no instance (`COLLECTIVES_NOT_OVERLAPPING`). The slack is
#   0: the ranks of one host share one clock (CLOCK_MONOTONIC for Kineto's host ranges), as the waits assume.
COLLECTIVES_COUNTS_DIFFER = "collectives_counts_differ"
COLLECTIVES_NOT_OVERLAPPING = "collectives_not_overlapping"
COLLECTIVE_OVERLAP_SLACK_NS = 0
# Collective kinds, by the first pattern that the name (or Kineto's `Collective name` arg) holds once lower-cased with
# everything but letters removed ("gloo:all_reduce", "ncclKernel_AllReduce", "allreduce" all read "allreduce").
COLLECTIVE_KINDS = (
    ("all_reduce", "allreduce"),
    ("reduce_scatter", "reducescatter"),
    ("all_gather", "allgather"),
    ("all_to_all", "alltoall"),
    ("broadcast", "broadcast"),
    ("send_recv", "sendrecv"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("send", "send"),
    ("recv", "recv"),
)
# NCCL's bus-bandwidth factors (nccl-tests doc/PERFORMANCE.md): busbw = algbw * factor(n), algbw = S / t with S the
# full message (all-gather: the output; reduce-scatter: the input), so busbw compares with the link's peak whatever
# the number of ranks. Collectives not listed (send / recv, broadcast and reduce: factor 1) are algbw.
BUS_BANDWIDTH_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}
# Bytes an element of Kineto's `dtype` arg (c10::toString: "Float", "BFloat16") and `Input type` ("float",
# "c10::Half"), lower-cased.
COLLECTIVE_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "c10::half": 2,
    "bfloat16": 2,
    "c10::bfloat16": 2,
    "long": 8,
    "long int": 8,
    "int64": 8,
    "int": 4,
    "int32": 4,
    "short": 2,
    "short int": 2,
    "byte": 1,
    "unsigned char": 1,
    "char": 1,
    "signed char": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
}
# A rank is the straggler when it arrives last at this share of the matched collectives at least ...
STRAGGLER_MIN_LAST_SHARE = 0.6
# ... and the others wait for it at least this share of the median step (or, without steps, of the median time
# between collectives) and at least STRAGGLER_MIN_LATE_NS a step: a rank last by a few µs is noise.
STRAGGLER_MIN_STEP_SHARE = 0.1
STRAGGLER_MIN_LATE_NS = 200_000
# The straggler's phases named with it: those where it spends at least this share of its lateness a step more than
# the median of the other ranks.
STRAGGLER_PHASE_MIN_SHARE = 0.2
# Step phases when the step thread holds no user ranges (`record_function`) of its own: the framework's ranges, by
# name, outermost first (a phase name is searched in each outermost range on the step's thread).
FRAMEWORK_PHASES = (
    (
        "forward",
        re.compile(r"^DistributedDataParallel\.forward|^## forward|^nn\.Module: |^FullyShardedDataParallel\.forward"),
    ),
    ("backward", re.compile(r"^autograd::engine::evaluate_function|^## backward|^torch/autograd")),
    ("optimizer", re.compile(r"^Optimizer\.(?:step|zero_grad)|^## optimizer")),
    ("data", re.compile(rf"^enumerate\(DataLoader\)|{first_then('DataLoader', '__next__', '.')}|^## data")),
)

# --------------------------------------------------------------------------- diff: noise and causes (diff.py)

# A figure's change counts only beyond this many standard errors of the difference of its per-step means,
# sqrt(var_base / n_base + var_new / n_new) over the steps of both runs (Welch's statistic). 2.5 is the two-sided
# 95 % critical value of Student's t at 5-6 degrees of freedom (2.57 at 5, 2.45 at 6): what Welch's test has for
# two captures of about 6 steps each, the usual profiler schedule (Kineto's `active` steps, the TensorBoard
# plugin's samples). With more steps it is stricter than 95 % (t falls to 1.96), which keeps a diff of ~40
# figures from showing one as red by chance.
NOISE_STANDARD_ERRORS = 2.5
# A figure without per-step values (kernel counts, bytes, device spans) takes the step time's noise, relative: its
# threshold over the larger mean step, applied to the figure's larger side (a share of the step: in points of the
# step, since a part of the step moves as much as the step does). With fewer than two steps on a side there is no
# spread to read, and the margin is asv's default for "changed" (`asv compare --factor 1.1`: 10 %).
FALLBACK_RELATIVE_NOISE = 0.10
# The evidence figure that is each finding's cause, per step (findings.py). `diff` scores BASE's projection of a
# finding against the step NEW measured only when this cause went away or fell beyond the noise: a projection of a
# cause nobody touched (fp32 kernels, when only the DataLoader changed) says nothing about the fix that was made.
# The first key a report has is read (host_bound of a CPU-only run: the overhead between ops). A finding not listed
# (or a saved report without this evidence) is judged by its cost a step.
FINDING_CAUSE_EVIDENCE: dict[str, tuple[str, ...]] = {
    "input_bound": ("input_wait_per_step_ns",),
    "launch_bound": ("host_launch_gap_per_step_ns",),
    "host_bound": ("host_launch_gap_per_step_ns", "overhead_per_step_ns"),
    "h2d_copy": ("exposed_per_step_ns",),
    "d2h_sync": ("sync_gap_per_step_ns",),
    "external_wait": ("wait_per_step_ns",),
    "fp32_compute": ("fp32_eligible_per_step_ns",),
    "low_compute_efficiency": ("above_roofline_per_step_ns",),
    "small_batch": ("batch_work_per_step_ns",),
    "straggler": ("late_per_step_ns",),
    "communication": ("exposed_per_step_ns",),
    "collective_wait": ("waiting_per_step_ns",),
    "idle_other": ("other_gap_per_step_ns",),
}
