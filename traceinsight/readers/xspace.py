"""Read TensorFlow / JAX / XLA profiler output (XSpace ``.xplane.pb``) into the event table.

How the bytes are read is `xspace_wire`'s: plane by plane, a batch of lines at a time,
every event's fields decoded with numpy (never a Python object per event), so a
gigabyte file needs memory for its table, not for its bytes. Each batch becomes rows
(`xspace_lines`), and the rows of all batches one table once the file's clock is known
(`xspace_table`). A run of lines read in one piece (a unit) is read by any process: a
large file's units go to worker processes as well (`_unit_rows`, here), which send back
numpy columns, their names coded in the order they met them; `Table` recodes them as one
process reading the units in file order would have, so the table does not depend on who
read what. What the whole file says (devices, clock) is `xspace_file`'s; the stats read,
`xspace_stats`'; allocator events, `xspace_memory`'s; device ops' costs, `xspace_ops`'.

Mapping (events.py has the columns and kinds; which lines and stats are read, and the
rules an event's name decides, are `xspace_classify`'s, the name rules themselves
`_classify`'s, shared with the Kineto and XProf-JSON readers):

* ``/device:GPU:N`` (NVIDIA and ROCm): ``Stream #...`` lines are device activity:
  ``Memcpy{H2D,D2H,D2D,P2P,Other}`` -> memcpy, ``Memset*`` -> memset, CUPTI's
  bookkeeping records (``MemoryAlloc``, ``MemoryFree``, ...) -> other, the rest ->
  kernel; stream = line id, correlation = ``correlation_id``. Copies get bytes and the
  host-side memory kind from ``memcpy_details``, memsets bytes from ``Memset_details``,
  kernels occupancy (``theoretical_occupancy_pct`` stat, else ``occ_pct`` of
  ``kernel_details``) and blocks per SM (``grid`` / the plane's ``core_count``), and
  every stream event the op type its ``level 0`` annotation names.
  The converter-derived ``Steps`` line -> step rows (step id = event name). Other
  derived lines (``TensorFlow Ops``, ``XLA Ops``, ``_counters_``, ...) repeat or
  summarise the stream events and are not read.
* ``/device:TPU:N``: ``XLA Ops`` -> kernel, ``XLA Modules`` -> annotation, ``Steps``
  -> step, other lines -> other, all with the device set.
* Device kernels with a cost stat (``flops``, ``bytes_accessed``, ``model_flops``: TPU
  ``XLA Ops`` have them on their metadata) also make the op table, their time the
  device's own (``device_duration_ps``) where they have it.
* ``/host:*`` except ``/host:metadata`` (thread = line id): an event with a
  ``correlation_id`` stat is a CUDA/HIP API call -> runtime (``*Synchronize`` ->
  sync); ``train*`` / ``test*`` / ``TraceContext*`` without ``/`` (xprof's explicit
  step markers) or ``Profiled batch`` (Keras) with a ``step_num`` stat -> step;
  names starting ``$`` (the Python tracer) -> python; TF ops ``<node>:<OpType>`` ->
  cpu_op; the rest -> other (`make_event_table` turns tf.data waits into input_wait).
  Allocator events (``MemoryAllocation`` / ``MemoryDeallocation``) also make the
  memory table.
* Time: start = line.timestamp_ns + offset_ps // 1000 (the exact integer form of
  (ns * 1000 + ps) // 1000), plus ``Task Environment``'s ``profile_start_time`` when
  the lines are relative to it (saved files are), giving epoch ns; dur =
  duration_ps // 1000. Events with ``num_occurrences`` instead of an offset are
  aggregates without a time: skipped and counted in the warnings.
* Damage (`_repair`; each kind counted once in the warnings): an event whose bytes
  are not protobuf is skipped, a field of the wrong wire type ignored (as protobuf
  does), a stat that is not protobuf ignored; events with an impossible time, a
  duration over 7 days, far outside the profiling window, or repeating another
  exactly are skipped; device properties of the wrong type are left unknown. Only
  a file whose every event is corrupt, or skipped so, is refused (naming why).
* A file cut short (a job killed mid-write) is read up to its last whole plane, with
  one `truncation_warning`; one with no event before the cut is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traceinsight.errors import TraceError
from traceinsight.events import TraceRead
from traceinsight.limits import MemoryLimit
from traceinsight.parallel import (
    Claims,
    Parcel,
    SharedFile,
    forks_workers,
    give,
    given,
    idle_cores,
    inherit,
    inherited,
    start_context,
    worker_pool,
)
from traceinsight.readers import xplane_schema
from traceinsight.readers.xspace_file import SpaceFile, Unit
from traceinsight.readers.xspace_lines import Rows, read_unit
from traceinsight.readers.xspace_table import Table
from traceinsight.readers.xspace_wire import Source, raw_events_pool, walk_space
from traceinsight.rules import PARALLEL_MIN_BYTES

__all__ = ["PARALLEL_MIN_BYTES", "idle_cores", "read_xspace"]


def _space_class() -> Any:
    """The XSpace message class with ``XLine.events`` declared ``repeated bytes``: how tests reach the
    events' raw bytes to damage them."""
    pool, package = raw_events_pool()
    return xplane_schema.get_message_class(pool.FindMessageTypeByName(f"{package}.XSpace"))


def read_xspace(
    path: Path, data: bytes | None = None, jobs: int | None = None, limit: MemoryLimit | None = None
) -> TraceRead:
    """Read one ``.xplane.pb`` (or its bytes, when the caller already has them) into a `TraceRead`.

    `jobs`: processes reading its runs of lines. By default, for a large file (`PARALLEL_MIN_BYTES` of lines)
    read from disk by a process that forks its workers and is not itself a worker (`forks_workers`: its pool
    uses the cores already), the cores the machine leaves idle (`idle_cores`); else one: a worker started
    otherwise would import and walk it all anew. `limit`: a TraceError as soon as its planes, lines and metadata
    would not fit (`xspace_wire.walk_space`).
    """
    path = Path(path)
    with Source(path, data) as source:
        if not source.size:
            raise TraceError(path, "not an XSpace protobuf (empty file)")
        layout = walk_space(source, limit)
        if not layout.planes and layout.used_bytes == source.size:
            raise TraceError(path, "not an XSpace protobuf (no planes)")
        file = SpaceFile(path, layout)
        units = file.units()
        if jobs is None:
            line_bytes = sum(size for unit in units for _, size in unit.lines)
            jobs = idle_cores() if forks_workers() and line_bytes >= PARALLEL_MIN_BYTES else 1
        table = Table(file)
        for rows in _unit_rows(source, file, units, jobs if data is None else 1):
            table.add(rows)
    return table.result(source.size)


def _unit_rows(source: Source, file: SpaceFile, units: list[Unit], jobs: int) -> list[Rows]:
    """The rows of every unit, in file order. With `jobs` > 1, ``jobs - 1`` worker processes read units too,
    each unit claimed by whichever process is free, largest first (`Claims`: one long line is a unit of its
    own), and only their rows' numpy columns come back, each worker's once it finds none left: sent unit by
    unit, a worker waited (0.1-0.15 s a unit) for this process, busy reading, to take them in. Forked workers
    inherit the file's layout (`inherit`, by its path) and send their rows back through a `SharedFile`."""
    if jobs <= 1 or len(units) < 2:
        return [read_unit(source, file, unit) for unit in units]
    key = str(file.path)
    context = start_context()
    claims = Claims(units, [sum(size for _, size in unit.lines) for unit in units], context)
    shared = SharedFile(context)
    rows: dict[int, Rows] = {}
    try:
        with inherit(key, file), worker_pool(jobs - 1, context, give, (key, claims, shared)) as pool:
            theirs = [pool.submit(_read_claimed_units, key) for _ in range(jobs - 1)]
            while (i := claims.next()) is not None:
                rows[i] = read_unit(source, file, units[i])
            for future in theirs:
                outcome = future.result()
                if isinstance(outcome, str):
                    raise TraceError(file.path, outcome)
                rows.update(outcome.open(shared))
    finally:
        shared.close()
    return [rows[i] for i in range(len(units))]


def _read_claimed_units(key: str) -> Parcel | str:
    """In a worker: the rows of every unit it claims of the file at `key`, by unit, until none is left; a
    `TraceError` comes back as its reason (it does not pickle)."""
    claims, shared = given(key)
    try:
        with Source(Path(key)) as source:
            # A worker not forked from the reader (spawned, from a fork server) walks the file again here.
            file = inherited(key, lambda: SpaceFile(Path(key), walk_space(source)))
            rows: dict[int, Rows] = {}
            while (i := claims.next()) is not None:
                rows[i] = read_unit(source, file, claims.units[i])
            return shared.pack(rows)
    except TraceError as error:
        return error.reason
