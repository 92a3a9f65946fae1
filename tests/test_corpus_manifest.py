"""The labelled corpus' manifest is well-formed, and every data file present matches its pinned sha256.

The data files are not committed (see corpus/README.md); those re-created with `python -m tools.corpus` are
checked, the others skipped.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tools.corpus import load_manifest, target_name

ROOT = Path(__file__).resolve().parent.parent
ENTRIES = load_manifest()
LABELS = json.loads((ROOT / "corpus" / "labels.json").read_text())
FORMATS = {"kineto", "chrome", "xspace", "tf1_timeline", "nsys"}
LIMITERS = {
    "input",
    "host_launch_overhead",
    "host_python_or_cpu_work",
    "blocking_sync",
    "copies_transfers",
    "communication_or_collective_wait",
    "busy_compute",
    "warmup_or_capture",
    "cpu_only_framework",
    "unknown",
}
FINDINGS = {
    "input_bound",
    "launch_bound",
    "host_bound",
    "transfer_bound",
    "h2d_copy",
    "d2h_sync",
    "external_wait",
    "low_occupancy",
    "fp32_compute",
    "low_compute_efficiency",
    "straggler",
    "communication",
    "collective_wait",
    "small_batch",
    "idle_other",
    "warmup_in_window",
}


def test_manifest_entries_are_well_formed():
    assert len(ENTRIES) >= 20
    for entry in ENTRIES:
        assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]), entry["id"]
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), entry["id"]
        assert re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", entry["repo"]), entry["id"]
        assert entry["format"] in FORMATS, entry["id"]
        assert isinstance(entry["bytes"], int) and entry["bytes"] > 0, entry["id"]
        assert isinstance(entry["committed"], bool) and entry["licence"], entry["id"]
        # Nsight Systems exports are read as SQLite by their suffix (tools/corpus.py keeps it in the data file name).
        assert (entry["format"] == "nsys") == entry["path"].endswith(".sqlite"), entry["id"]
    assert len({e["id"] for e in ENTRIES}) == len(ENTRIES)
    assert len({e["sha256"] for e in ENTRIES}) == len(ENTRIES), "the same bytes are listed twice"
    assert len({e["repo"] for e in ENTRIES}) >= 6


def test_every_trace_is_labelled_with_known_vocabulary():
    assert set(LABELS) == {e["id"] for e in ENTRIES}
    for trace_id, label in LABELS.items():
        assert label["main_limiter"] in LIMITERS, trace_id
        assert set(label["acceptable_top"]) <= FINDINGS, trace_id
        assert label["workload"] in {"training", "inference", "unknown"}, trace_id
        assert isinstance(label["has_shapes"], bool), trace_id
        for share in (
            "device_busy_share_in_steps",
            "kernel_busy_share_in_steps",
            "copy_share_of_device_busy",
            "collective_share_of_device_busy",
            "input_wait_share",
            "blocking_sync_share",
        ):
            assert label[share] is None or 0.0 <= label[share] <= 1.0, (trace_id, share)
        assert label["notes"] and label["honest_limits"] is not None, trace_id


def test_committed_data_stays_small():
    committed = [e for e in ENTRIES if e["committed"]]
    assert all(e["bytes"] <= 1_000_000 for e in committed)
    assert sum(e["bytes"] for e in committed) <= 12_000_000


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_data_file_matches_its_pinned_sha256(entry):
    path = ROOT / "corpus" / "data" / target_name(entry)
    if not path.exists():
        pytest.skip(f"{path.name} not present (python -m tools.corpus --dest corpus/data re-creates it)")
    data = path.read_bytes()
    assert len(data) == entry["bytes"]
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]


CRITICAL_PATH_GROUPS = {"cpu", "launch", "gpu_compute", "copy", "collective", "rank_wait", "input", "idle"}


def test_critical_path_labels_use_the_group_vocabulary():
    """Every critical-path label (corpus and shared traces) names known groups, never one both ways, with a reason."""
    shared = json.loads((ROOT / "corpus" / "labels_shared_paths.json").read_text())["traces"]
    labelled = {k: v for k, v in LABELS.items() if "critical_path_acceptable" in v} | shared
    assert len(labelled) >= 30
    for key, label in labelled.items():
        acceptable, must_not = set(label["critical_path_acceptable"]), set(label["critical_path_must_not"])
        assert acceptable <= CRITICAL_PATH_GROUPS and must_not <= CRITICAL_PATH_GROUPS, key
        assert not acceptable & must_not, key
        assert label["critical_path_reason"] and label["critical_path_figures"], key
