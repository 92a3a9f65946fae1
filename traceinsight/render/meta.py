"""The report's `meta`: where a CI artifact came from (when, by which command, from what capture).

`capture_date` and `trace_versions` are what the traces themselves say (the capture date on their own clock,
versions the profiler wrote down); `add_run_info` adds the versions a `run_info.json`
beside the run lists and `add_runs` every run found under the PATH and why the one
reported on was chosen (every report of a PATH has them); `add_invocation` adds what only
the command knows: the time it ran, its command line and options, the PATH it was given.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from traceinsight import __version__
from traceinsight.discover import RUN_INFO
from traceinsight.result import DeviceInfo, Meta, RunListed, RunReport

if TYPE_CHECKING:
    from traceinsight.discover import RunChoice

# Epoch timestamps of 2000-01-01 and 2100-01-01 in ns: a window start between them is wall-clock time
# (Kineto, XSpace with a Task Environment); smaller ones count from some boot or profiler start.
_EPOCH_RANGE_NS = (946_684_800 * 10**9, 4_102_444_800 * 10**9)
_MAX_RUN_INFO_BYTES = 1 << 20
_VERSION = re.compile(r"^v?\d+(?:\.\d+)+(?:[-+._]?[0-9A-Za-z.+-]*)?$")
_MAX_VERSIONS = 24
# Kineto's top-level numbers (CUDA writes 12090 for 12.9) and what they are called in `versions`.
_CUDA_NUMBERS = {"cuda_runtime_version": "cuda_runtime", "cuda_driver_version": "cuda_driver"}
# Framework names as `RunReport.framework` has them, and the package names run_info files use for them.
_FRAMEWORK_PACKAGES = {"pytorch": ("pytorch", "torch"), "tensorflow": ("tensorflow",), "jax": ("jax", "jaxlib")}
# The summaries' runs line names this many other runs at most (`meta.runs` has them all).
_OTHER_RUNS_NAMED = 5


def iso_utc(epoch_ns: int, seconds: bool = False) -> str:
    """'2021-06-08T08:57:03.460072Z' (to the second when `seconds` or the microseconds are zero)."""
    moment = datetime.fromtimestamp(epoch_ns // 1000 / 1e6, UTC)
    timespec = "seconds" if seconds or not moment.microsecond else "microseconds"
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def capture_date(window_start_ns: int | None) -> str | None:
    """The capture's start on the trace's own clock, when that clock is the epoch (told by magnitude), else None."""
    if window_start_ns is None or not _EPOCH_RANGE_NS[0] <= window_start_ns < _EPOCH_RANGE_NS[1]:
        return None
    return iso_utc(window_start_ns)


def _cuda_version(number: object) -> str | None:
    """12090 -> '12.9', 11040 -> '11.4' (CUDA's major * 1000 + minor * 10)."""
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        return None
    return f"{number // 1000}.{number % 1000 // 10}"


def _device_versions(device_info: Sequence[DeviceInfo]) -> list[str]:
    """Each kind of device once: 'Tesla V100-DGXS-32GB (compute capability 7.0)'."""
    kinds = []
    for d in device_info:
        cc = f"compute capability {d.compute_capability}" if d.compute_capability else None
        name = d.name or d.vendor
        text = f"{name} ({cc})" if name and cc else name or cc
        if text and text not in kinds:
            kinds.append(str(text))
    return kinds


def trace_versions(metadata: Mapping[str, Any], device_info: Sequence[DeviceInfo]) -> dict[str, Any]:
    """traceinsight's version and what the traces' own metadata (`Profile.metadata`, one entry per input)
    says of CUDA, CUPTI, NCCL and the devices."""
    versions: dict[str, Any] = {"traceinsight": __version__}
    for meta in metadata.values():
        if not isinstance(meta, Mapping):
            continue
        for key, name in _CUDA_NUMBERS.items():
            if (text := _cuda_version(meta.get(key))) is not None:
                versions.setdefault(name, text)
        if isinstance(meta.get("cupti_version"), int):
            versions.setdefault("cupti", str(meta["cupti_version"]))
        info = meta.get("distributedInfo")
        if isinstance(info, Mapping) and isinstance(info.get("nccl_version"), str):
            versions.setdefault("nccl", info["nccl_version"])
    if devices := _device_versions(device_info):
        versions["devices"] = devices
    return versions


def generated_at() -> str:
    """Now in UTC, or `SOURCE_DATE_EPOCH` when set (reproducible artifacts)."""
    fixed = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if fixed.isdigit():
        return iso_utc(int(fixed) * 10**9, seconds=True)
    return iso_utc(int(datetime.now(UTC).timestamp()) * 10**9, seconds=True)


def _run_info_files(path: Path, run_root: Path | None) -> list[Path]:
    """`run_info.json` files in the run's folder and each folder above it up to the PATH given (nearest first)."""
    base = (path if path.is_dir() else path.parent).absolute()
    folders = []
    if run_root is not None:
        folder = run_root.absolute()
        while True:
            folders.append(folder)
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    if base not in folders:
        folders.append(base)
    return [f / RUN_INFO for f in folders if (f / RUN_INFO).is_file()]


def run_info_versions(files: Sequence[Path], framework: str) -> dict[str, str]:
    """Versions a `run_info.json` lists: its top-level (or `versions`) entries that are version strings,
    the framework's package also under 'framework'. Unreadable files say nothing."""
    found: dict[str, str] = {}
    for file in files:
        try:
            if file.stat().st_size > _MAX_RUN_INFO_BYTES:
                continue
            doc = orjson.loads(file.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if not isinstance(doc, dict):
            continue
        nested = doc.get("versions")
        for source in (nested if isinstance(nested, dict) else {}, doc):
            for key, value in source.items():
                if isinstance(value, str) and len(value) <= 64 and _VERSION.match(value) and len(found) < _MAX_VERSIONS:
                    found.setdefault(str(key)[:64], value)
    for package in _FRAMEWORK_PACKAGES.get(framework, ()):
        if package in found:
            found.setdefault("framework", f"{framework} {found[package]}")
            break
    return found


def add_run_info(report: RunReport, path: Path, run_root: Path | None) -> None:
    """`report.meta.versions` completed with the versions a `run_info.json` beside the run lists (the trace's own
    figures win); `path` is the PATH the run was found under."""
    from_file = run_info_versions(_run_info_files(path, run_root), report.framework)
    versions = {"traceinsight": __version__, **{k: from_file[k] for k in ("framework",) if k in from_file}}
    versions.update({**from_file, **report.meta.versions})
    report.meta.versions = versions


def _size(files: Sequence[Path]) -> int:
    """Bytes on disk of `files` (one deleted since the walk counts nothing)."""
    total = 0
    for f in files:
        try:
            total += f.stat().st_size
        except OSError:
            continue
    return total


def add_runs(report: RunReport, choice: RunChoice) -> None:
    """`report.meta` completed with every run found under the PATH given (newest first: its `--run` name,
    files, bytes, whether it is the one reported on, whether it is a graph capture pass, null when not looked
    at, when it was captured and why its files are one run) and why that one was chosen and its files grouped
    (`run_choice`), so a report of the wrong run says so. A grouping that could not be told for certain is a
    warning."""
    report.meta.runs = [
        RunListed(
            name=run.name,
            files=len(run.files),
            bytes=_size(run.files),
            selected=run == choice.run,
            capture_pass=capture,
            captured=None if run.started_ns is None else iso_utc(run.started_ns),
            grouping=run.grouping,
        )
        for run, capture in zip(choice.runs, choice.capture_pass, strict=True)
    ]
    grouping = choice.run.grouping
    report.meta.run_choice = f"{choice.reason}; {grouping}" if grouping else choice.reason
    if choice.run.doubt:  # how the folder's files were grouped could not be told for certain
        report.warnings[f"runs: {choice.run.doubt}"] = len(choice.run.files)


def runs_line(report: RunReport, code: Callable[[str], str] = str) -> str | None:
    """'run 1 of 2 (why); others: --run NAME' when the PATH held several runs (None otherwise), for the summaries;
    `code` marks up each `--run NAME` (shell-quoted)."""
    runs = report.meta.runs or []
    if len(runs) < 2:
        return None
    at = next(i for i, run in enumerate(runs) if run.selected)
    others = [code(f"--run {shlex.quote(run.name)}") for run in runs if not run.selected]
    named = ", ".join(others[:_OTHER_RUNS_NAMED])
    if len(others) > _OTHER_RUNS_NAMED:
        named += f" and {len(others) - _OTHER_RUNS_NAMED} more (the JSON's meta.runs lists them)"
    return f"run {at + 1} of {len(runs)} ({report.meta.run_choice}); others: {named}"


def add_invocation(report: RunReport, command: Sequence[str], options: Mapping[str, Any], path: Path | None) -> Meta:
    """`report.meta` completed with the run of the command: time, command line, options and input."""
    meta = report.meta
    meta.generated_at = generated_at()
    meta.command = list(command)
    meta.options = dict(options)
    meta.input = None if path is None else str(path)
    return meta
