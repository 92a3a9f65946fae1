"""What the run already does, as far as the trace shows it: input-pipeline and execution settings.

Advice such as "add prefetch" or "use mixed precision" is wrong, and costs the reader's trust, when
the run already does it. These detectors read the settings off event names (and, for a few, off
rows: copy memory, kernel time, overlapping calls), so advice can be worded for what is missing.
A setting the trace cannot show is *absent* from the result, never guessed: "no Prefetch stage"
is only said (``prefetch: False``) where tf.data stages were traced at all.

Names are matched once per distinct name (the ``name`` categories that some row has), never per
event: each rule's literal words are looked for once in all names joined, its regex runs only on
the names they hit, and rows are reached through the category codes where a detector needs them
(about 40 ms on a million-row table; 0.35 s with 200,000 distinct op names).

Input settings (`Seen.input`):

===================  ===================================================================================
key                  what in the trace sets it
===================  ===================================================================================
prefetch             tf.data iterator stages (``Iterator::Root::...``): True with a ``Prefetch`` stage,
                     False when stages were traced and none is one. tf.data injects a final prefetch
                     into many pipelines by default, so the trace, not the user's code, is what is
                     reported (tf_cpu/a_input_bound, ending in a fused ``MapAndBatch``, has none).
map_parallel         True with a ``ParallelMap``/``ParallelMapV2`` stage; False with a sequential
                     ``Map`` stage (any one of them: that map is the one to parallelise). A fused
                     ``MapAndBatch`` keeps its ``parallelism`` in an XSpace stat the event table does
                     not carry, so when it is the only map and no interleave could run calls side by
                     side, it decides through its calls: when its ``tf.py_function`` calls overlapped
                     in time (>= 10 % of their time) it ran in parallel (True); when 8 or more of them
                     never overlapped it ran one at a time (False); else absent.
interleave_parallel  True with ``ParallelInterleave`` (``V2``-``V4``, legacy) stages, False with a plain
                     ``Interleave`` stage; absent when the pipeline has no interleave.
cache                True with a ``Cache``/``MemoryCache``/``FileCache`` stage, False when stages were
                     traced and none is one. A warm cache hides every stage below it (they do not
                     run), so settings of those stages are then absent.
map_function_py      True when ``tf.py_function``/``numpy_function`` ops ran (``EagerPyFunc``,
                     ``PyFunc``): they hold the GIL, so parallel calls cannot speed them up much.
                     False when a map stage ran and no such op did.
dataloader           ``"multiprocess"`` with ``_MultiProcessingDataLoaderIter`` events (``num_workers``
                     > 0), ``"single_process"`` with ``_SingleProcessDataLoaderIter``; both: the one
                     the loop spent longer in.
pin_memory           True when host-to-device copies come from pinned memory and none from pageable,
                     False when any is pageable; absent without H2D copies of known source memory.
===================  ===================================================================================

Execution settings (`Seen.run`):

===================  ===================================================================================
key                  what in the trace sets it
===================  ===================================================================================
graph                TensorFlow: True when a ``tf.function`` ran (``__inference_`` functions other than
                     tf.data's own, ``(Stateful)PartitionedCall`` ops); False when only eager ops ran
                     (``EagerLocalExecute: <op>``, iterator and constant ops aside).
xla                  True with ``XlaLaunch``/``_XlaRun``/``_XlaCompile``, ``XlaMustCompile`` or
                     ``cluster_<n>`` names (TensorFlow), or ``jit_``/``pmap_`` modules (JAX). False for
                     TensorFlow when ``graph`` is known and no XLA name is there.
torch_compile        True with Inductor's Triton kernels (``triton_poi_``/``red_``/``per_``/``tem_``/
                     ``for_``), ``CompiledFunction``, ``CompiledFxGraph``, ``Torch-Compiled Region``,
                     ``TorchDynamo Cache Lookup`` or ``torch/_inductor`` frames; False when ``aten::``
                     ops ran without any of them.
cuda_graphs          True with ``cudaGraphLaunch``/``cuGraphLaunch``/``hipGraphLaunch``; False when
                     kernels were launched one by one (``cudaLaunchKernel`` and kin) and never so.
mixed_precision      True when 16-bit or narrower kernels (fp16, bf16, fp8, fp4, int8) carry most of
                     the eligible (matrix) kernel time, False when fp32/TF32 ones do; absent with no
                     eligible kernels or when the names do not tell the precision of most of it.
low_precision_share  That 16-bit-or-narrower share of all eligible kernel time (absent as above).
ddp                  True when DDP's gradient reducer ran (``DistributedDataParallel.forward``,
                     ``torch.distributed.ddp.reducer::*`` ops); absent otherwise (advice about DDP's
                     buckets and ``no_sync`` goes only where DDP is in the trace).
===================  ===================================================================================

Precision is read by `tensor_cores.classify_kernel_names`; `Seen.kernel_precision_ns` keeps the
eligible kernel time per precision (``"unknown"`` where the name does not tell). `Seen.evidence`
names, for each key, the event that set it, so advice can quote what it saw.

No key is an int yet (`Seen.input` allows one for a count a trace may show later). What no trace
here shows: DataLoader ``num_workers`` beyond "more than 0" (the workers are other processes), a
fused ``MapAndBatch``'s parallelism when its function is not a py_function, the settings of stages
below a warm cache, and TF32 being merely *allowed* (only TF32 kernels show).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec
import numpy as np
import pandas as pd
from msgspec import field

from traceinsight.analysis.tensor_cores import classify_kernel_names
from traceinsight.events import FRAMEWORKS, kind_mask
from traceinsight.intervals import union_of_rows
from traceinsight.rules import (
    DDP_REDUCER,
    GRAPH_LAUNCH,
    JAX_XLA,
    KERNEL_LAUNCH,
    MIN_SEQUENTIAL_CALLS,
    MOST,
    MULTIPROCESS_LOADER,
    PARALLEL_OVERLAP_SHARE,
    PY_FUNCTION,
    SEQUENTIAL_OVERLAP_SHARE,
    SINGLE_PROCESS_LOADER,
    STAGE_TYPES,
    TF_DATA_PREFIX,
    TF_EAGER_OP,
    TF_FUNCTION_CALL,
    TF_FUNCTION_OP,
    TF_ITERATOR,
    TF_XLA,
    TORCH_COMPILE,
    TORCH_OP,
    NamePattern,
)

# Precisions of 16 bits or fewer (the mixed-precision side) and the fp32 side (TF32 is fp32 data on Tensor Cores).
LOW_PRECISIONS = ("fp16", "bf16", "fp8", "fp6", "fp4", "int8")
FP32_PRECISIONS = ("fp32", "tf32")
_STAGE_INDEX = re.compile(r"\[\d+\]$")  # ForeverRepeat[0], ParallelInterleaveV4[2]: the input's index
_STAGE_PATTERNS = {kind: re.compile(pattern) for kind, pattern in STAGE_TYPES.items()}


class Seen(msgspec.Struct, frozen=True):
    """Settings the trace shows the run already uses; a key is absent where the trace cannot tell.

    `input`: input-pipeline settings, `run`: execution settings (keys in the module docstring).
    `evidence`: per key, the event name (or counted fact) that set it. `kernel_precision_ns`: eligible
    (matrix) kernel time per precision, ``"unknown"`` where the name does not say.
    """

    input: dict[str, bool | str | int] = field(default_factory=dict)
    run: dict[str, bool | str | float] = field(default_factory=dict)
    evidence: dict[str, str] = field(default_factory=dict)
    kernel_precision_ns: dict[str, int] = field(default_factory=dict)


def _distinct(ordered: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array (np.unique would sort it again)."""
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


class _Names:
    """The names some row has, searched as one lower-case text, and the rows' name codes.

    Regexes with alternatives scan long kernel names slowly (about 0.1 s for 5,000 Eigen template
    names); a literal search over all names joined runs at memory speed. So each pattern's literals are
    looked for once in the whole text (when a detector first asks), and the pattern itself runs only
    on the names they hit.
    """

    def __init__(self, events: pd.DataFrame) -> None:
        names = events["name"]
        categories = names.cat.categories
        self.codes = names.cat.codes.to_numpy()
        self.count = len(categories)
        # A filtered table keeps every category: only the names some row has count.
        self.used = np.flatnonzero(np.bincount(self.codes[self.codes >= 0], minlength=self.count))
        self.present = categories[self.used].astype(str)
        lowered = [name.lower() for name in self.present.tolist()]  # one by one: lowering can change a length
        self.starts = np.cumsum([0] + [len(name) + 1 for name in lowered[:-1]])  # each name's leading "\n"
        self.text = "\n" + "\n".join(lowered)
        self._hits: dict[str, np.ndarray] = {}

    def _literal(self, literal: str) -> np.ndarray:
        """Positions (in `present`) of the names holding `literal`."""
        if literal not in self._hits:
            found, position = [], self.text.find(literal) if len(self.present) else -1
            while position >= 0:
                found.append(position)
                position = self.text.find(literal, position + 1)
            at = np.searchsorted(self.starts, np.asarray(found, dtype=np.int64), side="right") - 1
            self._hits[literal] = _distinct(at)  # positions come in order, so names do
        return self._hits[literal]

    def matching(self, rule: NamePattern) -> pd.Series:
        """The names `rule` matches (str, indexed by category code)."""
        at = _distinct(np.sort(np.concatenate([self._literal(literal) for literal in rule.literals])))
        tried = pd.Series(self.present[at], index=self.used[at], dtype=object)
        return tried[tried.str.contains(rule.pattern).to_numpy(bool)] if len(tried) else tried

    def rows(self, names: pd.Series) -> np.ndarray:
        """Mask of the rows named one of `names` (as `matching` returns them), through the codes."""
        lookup = np.zeros(self.count + 1, dtype=bool)  # the last entry is what code -1 (no name) reads
        lookup[names.index.to_numpy()] = True
        return lookup[self.codes]


class _Found:
    """Collects settings and the evidence for each."""

    def __init__(self) -> None:
        self.input: dict[str, bool | str | int] = {}
        self.run: dict[str, bool | str | float] = {}
        self.evidence: dict[str, str] = {}

    def set_input(self, key: str, value: bool | str | int, why: str) -> None:
        self.input[key] = value
        self.evidence[key] = why

    def set_run(self, key: str, value: bool | str | float, why: str) -> None:
        self.run[key] = value
        self.evidence[key] = why


def _first(names: pd.Series) -> str:
    """The name to quote as evidence (the shortest: the least nested stage, the plainest op)."""
    return str(min(names, key=len))


def _tf_data_stages(names: _Names) -> pd.Series:
    """Stage type (``Prefetch``, ``ParallelMapV2``) -> one iterator name holding it, for every stage traced."""
    iterators = names.matching(TF_ITERATOR)
    if iterators.empty:
        return pd.Series(dtype=object)
    parts = iterators.str.slice(len(TF_DATA_PREFIX)).str.split("::").explode()
    stages = pd.Series(parts.str.replace(_STAGE_INDEX, "", regex=True).to_numpy(), index=iterators.loc[parts.index])
    by_length = stages.index.str.len().to_numpy().argsort(kind="stable")  # keep the shortest name per type
    stages = stages.iloc[by_length].drop_duplicates()
    return pd.Series(stages.index.to_numpy(), index=stages.to_numpy(), dtype=object)


def _stage(stages: pd.Series, kind: str) -> str | None:
    """An iterator name holding a stage of `kind` (a key of `STAGE_TYPES`), None without one."""
    hits = stages[stages.index.str.contains(_STAGE_PATTERNS[kind])]
    return _first(hits) if len(hits) else None


def _overlap_share(events: pd.DataFrame, rows: np.ndarray) -> float:
    """Share of the rows' summed time during which another of them also ran (0: strictly one at a time)."""
    durations = events["dur_ns"].to_numpy()
    total = int(durations[rows].sum())
    if total <= 0:
        return 0.0
    return 1.0 - union_of_rows(events["ts_ns"].to_numpy(), durations, rows).total / total


def _fused_map_parallel(events: pd.DataFrame, names: _Names, fused: str, found: _Found) -> None:
    """`map_parallel` of a MapAndBatch, from whether its py_function calls overlapped (see the docstring)."""
    py_calls = names.rows(names.matching(PY_FUNCTION))
    calls = int(py_calls.sum())
    if not calls:
        return
    share = _overlap_share(events, py_calls)
    if share >= PARALLEL_OVERLAP_SHARE:
        found.set_input("map_parallel", True, f"{fused}: its {calls} py_function calls overlapped ({share:.0%})")
    elif share < SEQUENTIAL_OVERLAP_SHARE and calls >= MIN_SEQUENTIAL_CALLS:
        found.set_input("map_parallel", False, f"{fused}: its {calls} py_function calls ran one at a time")


def _tf_data(events: pd.DataFrame, names: _Names, found: _Found) -> None:
    """tf.data settings from the iterator stages and py_function ops."""
    stages = _tf_data_stages(names)
    py_functions = names.matching(PY_FUNCTION)
    if stages.empty:  # py_function ops outside tf.data (or whose stages were not traced); only in a TF run
        tf_ops = [names.matching(p) for p in (TF_FUNCTION_CALL, TF_FUNCTION_OP, TF_EAGER_OP)]
        if len(py_functions) and any(len(ops) for ops in tf_ops):
            found.set_input("map_function_py", True, _first(py_functions))
        return
    traced = f"{len(stages)} tf.data stage types traced"
    for key in ("prefetch", "cache"):
        name = _stage(stages, key)
        found.set_input(key, name is not None, name or f"{traced}, none of them one")
    sequential, parallel, fused = (_stage(stages, kind) for kind in ("map", "parallel_map", "map_and_batch"))
    interleave, parallel_interleave = _stage(stages, "interleave"), _stage(stages, "parallel_interleave")
    if sequential or parallel:
        found.set_input("map_parallel", sequential is None, sequential or str(parallel))
    elif fused and not (interleave or parallel_interleave):  # an interleave could run the calls in parallel
        _fused_map_parallel(events, names, fused, found)
    if interleave or parallel_interleave:
        found.set_input("interleave_parallel", interleave is None, interleave or str(parallel_interleave))
    if len(py_functions):
        found.set_input("map_function_py", True, _first(py_functions))
    elif sequential or parallel or fused:
        found.set_input("map_function_py", False, f"{sequential or parallel or fused} ran, no py_function op did")


def _tf_run(names: _Names, found: _Found) -> None:
    """tf.function and XLA use in a TensorFlow run."""
    calls, ops, eager = names.matching(TF_FUNCTION_CALL), names.matching(TF_FUNCTION_OP), names.matching(TF_EAGER_OP)
    if len(calls) or len(ops):
        found.set_run("graph", True, _first(calls if len(calls) else ops))  # the call names the function
    elif len(eager):
        found.set_run("graph", False, f"only eager ops, e.g. {_first(eager)}")
    xla = names.matching(TF_XLA)
    if len(xla):
        found.set_run("xla", True, _first(xla))
    elif "graph" in found.run:
        found.set_run("xla", False, "TensorFlow ops ran, no XLA launch or cluster did")


def _jax(events: pd.DataFrame, names: _Names, found: _Found) -> None:
    """XLA modules of a JAX run (every jitted computation is one)."""
    modules = names.matching(JAX_XLA)
    if len(modules):
        found.set_run("xla", True, _first(modules))


def _torch(events: pd.DataFrame, names: _Names, found: _Found) -> None:
    """DataLoader kind, torch.compile and DDP in a PyTorch run."""
    loaders = {
        "multiprocess": names.matching(MULTIPROCESS_LOADER),
        "single_process": names.matching(SINGLE_PROCESS_LOADER),
    }
    seen = {kind: hits for kind, hits in loaders.items() if len(hits)}
    if seen:
        durations = events["dur_ns"].to_numpy()
        time = {kind: int(durations[names.rows(hits)].sum()) for kind, hits in seen.items()}
        kind = max(seen, key=lambda k: (time[k], k == "multiprocess"))
        found.set_input("dataloader", kind, _first(seen[kind]))
    compiled, ops = names.matching(TORCH_COMPILE), names.matching(TORCH_OP)
    if len(compiled):
        found.set_run("torch_compile", True, _first(compiled))
    elif len(ops):
        found.set_run("torch_compile", False, f"{len(ops)} aten ops ran, no compiled region or Inductor kernel did")
    reducer = names.matching(DDP_REDUCER)
    if len(reducer):  # absent otherwise: a trace cannot show that a run does not use DDP
        found.set_run("ddp", True, _first(reducer))


def _cuda_graphs(names: _Names, found: _Found) -> None:
    graphs, launches = names.matching(GRAPH_LAUNCH), names.matching(KERNEL_LAUNCH)
    if len(graphs):
        found.set_run("cuda_graphs", True, _first(graphs))
    elif len(launches):
        found.set_run("cuda_graphs", False, f"kernels launched one by one ({_first(launches)}), no graph launch")


def _code(column: pd.Series, value: str) -> int:
    """The category code of `value` in a categorical column (-2, which no row has, when it is not a category)."""
    categories = column.cat.categories
    return int(categories.get_loc(value)) if value in categories else -2


def _pin_memory(events: pd.DataFrame, found: _Found) -> None:
    """Pinned or pageable source memory of the host-to-device copies."""
    h2d = kind_mask(events, "memcpy")
    if not h2d.any():
        return
    h2d &= events["copy_kind"].cat.codes.to_numpy() == _code(events["copy_kind"], "h2d")
    memory = events["src_memory"].cat.codes.to_numpy()[h2d]
    pageable = int((memory == _code(events["src_memory"], "pageable")).sum())
    pinned = int((memory == _code(events["src_memory"], "pinned")).sum())
    if pageable:
        found.set_input("pin_memory", False, f"{pageable} of {len(memory)} host-to-device copies from pageable memory")
    elif pinned:
        found.set_input("pin_memory", True, f"{pinned} of {len(memory)} host-to-device copies from pinned memory")


def _precision(events: pd.DataFrame, found: _Found) -> dict[str, int]:
    """Eligible kernel time per precision, and the mixed-precision keys from it."""
    kernels = kind_mask(events, "kernel")
    if not kernels.any():
        return {}
    codes = events["name"].cat.codes.to_numpy()[kernels]
    durations = events["dur_ns"].to_numpy()[kernels]
    named = codes >= 0
    categories = events["name"].cat.categories
    time = np.bincount(codes[named], weights=durations[named], minlength=len(categories))
    ran = np.flatnonzero(time > 0)
    classes = classify_kernel_names(pd.Index(categories[ran].astype(str)))
    eligible = classes["eligible"].to_numpy()
    if not eligible.any():
        return {}
    per_kernel = pd.DataFrame(
        {
            "precision": classes["precision"].fillna("unknown").to_numpy()[eligible],
            "ns": time[ran][eligible].astype(np.int64),
            "name": categories[ran][eligible].astype(str),
        }
    )
    by_precision = per_kernel.groupby("precision")["ns"].sum().sort_values(ascending=False)
    total = int(by_precision.sum())
    low = int(by_precision.reindex(LOW_PRECISIONS).fillna(0).sum())
    wide = int(by_precision.reindex(FP32_PRECISIONS).fillna(0).sum())
    top = per_kernel.sort_values("ns", ascending=False).drop_duplicates("precision").set_index("precision")["name"]
    if total > 0 and max(low, wide) > MOST * total:
        side = LOW_PRECISIONS if low > wide else FP32_PRECISIONS
        main = str(by_precision[by_precision.index.isin(side)].index[0])  # the largest precision of the larger side
        why = f"{main} on {by_precision[main] / total:.0%} of eligible kernel time, e.g. {top[main]}"
        found.set_run("mixed_precision", low > wide, why)
        found.set_run("low_precision_share", low / total, why)
    return {str(k): int(v) for k, v in by_precision.items()}


_Detector = Callable[[pd.DataFrame, _Names, _Found], None]


def _tf(events: pd.DataFrame, names: _Names, found: _Found) -> None:
    """The input pipeline and the execution mode of a TensorFlow run."""
    _tf_data(events, names, found)
    _tf_run(names, found)


# Each framework's detectors; an unknown framework gets them all (each needs its own names to say anything).
_DETECTORS: dict[str, tuple[_Detector, ...]] = {
    "tensorflow": (_tf,),
    "jax": (_jax,),
    "pytorch": (_torch,),
    "unknown": (_tf, _jax, _torch),
}


def settings_seen(events: pd.DataFrame, framework: str) -> Seen:
    """The input and execution settings the trace shows the run uses (keys in the module docstring).

    `framework` (one of `model.FRAMEWORKS`) picks the framework's detectors; GPU detectors (CUDA graphs,
    copy memory, kernel precision) run for every framework.
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, not {framework!r}")
    if events.empty:
        return Seen()
    found = _Found()
    names = _Names(events)
    for detect in _DETECTORS[framework]:
        detect(events, names, found)
    _cuda_graphs(names, found)
    _pin_memory(events, found)
    precision_ns = _precision(events, found)
    return Seen(input=found.input, run=found.run, evidence=found.evidence, kernel_precision_ns=precision_ns)
