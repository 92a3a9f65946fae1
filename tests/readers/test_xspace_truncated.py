"""An XSpace cut short (a job killed mid-write): the planes wholly before the cut are read, with one warning.

What the cut keeps is counted independently: the original is parsed with the protobuf
classes, each plane's place in the file follows from its serialized size (planes come
first, in order, as writers put them), and the events of the planes that end before
the cut are counted with the rule `test_table_contract_and_event_count` checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_trace
from traceinsight.errors import TraceError, is_truncation_warning, truncation_warning
from traceinsight.readers.xplane_schema import XSpace
from traceinsight.readers.xspace import read_xspace

GPU_MULTI_WORKER = "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
TPU = "xprof/test_xplanes/tpu_inference_2.xplane.pb"
MI300 = "tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb"


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _planes(data: bytes) -> tuple[Any, list[int]]:
    """The parsed XSpace and where each of its planes ends in `data`."""
    space = XSpace()
    space.ParseFromString(data)
    ends, at = [], 0
    for plane in space.planes:
        size = plane.ByteSize()
        at += 1 + _varint_size(size) + size  # tag, length, plane
        ends.append(at)
    rest = XSpace()
    rest.CopyFrom(space)
    rest.ClearField("planes")
    assert data[at:] == rest.SerializeToString()  # planes first, then the rest: as protobuf writes it
    return space, ends


def _rows(plane: Any) -> int:
    """Events of `plane` that become rows: a GPU's stream and Steps lines, a TPU's and a host's lines."""
    if plane.name.startswith("/device:GPU:"):
        return sum(len(line.events) for line in plane.lines if line.name.startswith("Stream #") or line.name == "Steps")
    if plane.name.startswith(("/device:TPU:", "/host:")) and plane.name != "/host:metadata":
        return sum(len(line.events) for line in plane.lines)
    return 0


def _metadata_start(plane: Any) -> int:
    """Bytes of a plane's fields before its metadata (id, name, lines)."""
    head = type(plane)()
    head.id, head.name = plane.id, plane.name
    head.lines.extend(plane.lines)
    return head.ByteSize()


@pytest.mark.parametrize(
    ("relative", "share"),
    [(TPU, 30), (TPU, 60), (TPU, 90), (MI300, 60), (MI300, 90), (GPU_MULTI_WORKER, 80), (GPU_MULTI_WORKER, 90)],
)
def test_cut_at_a_share_keeps_the_whole_planes(tmp_path: Path, relative: str, share: int) -> None:
    data = shared_trace(relative).read_bytes()
    _check_cut(tmp_path, relative, data, len(data) * share // 100)


@pytest.mark.parametrize("relative", [TPU, MI300, GPU_MULTI_WORKER])
def test_cut_in_a_planes_metadata_leaves_that_plane_out(tmp_path: Path, relative: str) -> None:
    """A plane's lines come before its metadata: cut in the metadata, none of its events can be named."""
    data = shared_trace(relative).read_bytes()
    space, ends = _planes(data)
    i = max((p for p in range(1, len(ends)) if _rows(space.planes[p])), key=lambda p: ends[p] - ends[p - 1])
    size = space.planes[i].ByteSize()
    metadata = ends[i - 1] + 1 + _varint_size(size) + _metadata_start(space.planes[i])
    assert metadata < ends[i]
    _check_cut(tmp_path, relative, data, (metadata + ends[i]) // 2)


def _check_cut(tmp_path: Path, relative: str, data: bytes, cut: int) -> None:
    space, ends = _planes(data)
    whole = [plane for plane, end in zip(space.planes, ends, strict=True) if end <= cut]
    expected = sum(_rows(plane) for plane in whole)
    path = tmp_path / Path(relative).name
    path.write_bytes(data[:cut])
    read = read_xspace(path)
    assert 0 < len(read.events) < sum(_rows(plane) for plane in space.planes)
    assert len(read.events) == expected
    assert read.metadata["planes"] == [plane.name for plane in whole]
    used = max((end for end in ends if end <= cut), default=0)
    assert [key for key in read.warnings if is_truncation_warning(key)] == [truncation_warning(path, used, cut)]
    assert read.warnings[truncation_warning(path, used, cut)] == 1


def test_cut_before_any_whole_plane_is_refused(tmp_path: Path) -> None:
    """The 8xV100 file's first plane is its host plane, 73 % of it: cut at 30 %, nothing is whole."""
    data = shared_trace(GPU_MULTI_WORKER).read_bytes()
    _, ends = _planes(data)
    cut = len(data) * 30 // 100
    assert ends[0] > cut
    path = tmp_path / "cut.xplane.pb"
    path.write_bytes(data[:cut])
    with pytest.raises(TraceError, match="not an XSpace protobuf"):
        read_xspace(path)


def test_cut_after_the_planes_loses_only_the_host_names(tmp_path: Path) -> None:
    """Writers put the host names after the planes: a cut there keeps every event."""
    data = shared_trace(GPU_MULTI_WORKER).read_bytes()
    space, ends = _planes(data)
    assert ends[-1] < len(data) and list(space.hostnames)
    path = tmp_path / "34.83.195.179_6003.xplane.pb"
    path.write_bytes(data[:-3])
    read = read_xspace(path)
    assert len(read.events) == sum(_rows(plane) for plane in space.planes)
    assert read.metadata["hostnames"] == [] and read.input.host == "34.83.195.179_6003"
    assert read.warnings[truncation_warning(path, ends[-1], len(data) - 3)] == 1
