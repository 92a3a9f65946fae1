"""XProf's own roofline figures for an XSpace, written down for tests to check ours against.

XProf's roofline tool (``roofline_model``) computes per-op FLOP rates and memory bandwidths from the same
``flops`` / ``bytes_accessed`` stats the XSpace reader puts in the op table. This runs its C++ converter,
``xprof.convert.raw_to_tool_data.xspace_to_tool_data([file], "roofline_model", {"use_saved_result": False})``,
on a copy of the file in a folder of its own (it writes cache files next to its input), in XProf's own
virtual environment (``--xprof-python``; by default `bench_xprof`'s, made in the system's temporary folder:
no TensorFlow needed), and keeps the whole-profile rows (step ``Total``, infeed and outfeed included) of its
per-op table, without the source-code column (HTML), as JSON.

XProf's definitions (xprof/convert/op_metrics_to_record.h, xplane_to_op_metrics_db.cc): an op is an HLO op
(its event metadata's display name) summed over every occurrence on every TPU core of the file's ``XLA Ops``
lines; its time is the device's own (``device_duration_ps`` where the event has it); the FLOP rate
(``measured_flop_rate``, GFLOP/s) is flops x occurrences / total time, not self time, since an op's flops
include its nested ops'; ``measured_memory_bw`` (GiB/s) is bytes_accessed x occurrences / total time.

Run from the repository root: ``python -m benchmarks.xprof_roofline [--xprof-python PY] [--file FILE]
[--out OUT]``; the defaults write tests/readers/data/xprof_roofline_tpu_inference_2.json from
../shared/traces/xprof/test_xplanes/tpu_inference_2.xplane.pb.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_xprof import DEFAULT_XPROF_VENV, xprof_python

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILE = REPO.parent / "shared" / "traces" / "xprof" / "test_xplanes" / "tpu_inference_2.xplane.pb"
DEFAULT_OUT = REPO / "tests" / "readers" / "data" / "xprof_roofline_tpu_inference_2.json"
TOOL = "roofline_model"
CONVERT = f"""
import json, os, sys
from importlib.metadata import version
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # no INFO lines from the C++ side
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "{TOOL}", {{"use_saved_result": False}})
assert data, "xprof produced no roofline model"
print(json.dumps({{"version": version("xprof"), "tables": json.loads(data)}}))
"""
# Columns left out: which rows (all kept rows are step "Total", infeed/outfeed included) and HTML.
_DROPPED = ("step", "include_infeed_outfeed", "source_info")
UNITS = {
    "occurrences": "executions on all TPU cores of the file",
    "total_time, avg_time, total_self_time, avg_self_time, total_time_per_core": "us",
    "measured_flop_rate, model_flop_rate, optimal_flop_rate": "GFLOP/s (1e9 FLOP/s)",
    "measured_memory_bw, hbm_bw, cmem_*_bw, vmem_*_bw": "GiB/s (2**30 bytes/s)",
    "*_operational_intensity": "FLOP/byte",
    "*_percent, total_time_in_percentage, roofline_efficiency, ...": "fractions (0..1)",
}


def xprof_tables(path: Path, python: Path) -> tuple[str, list[dict[str, Any]]]:
    """XProf's version and its roofline DataTables for the XSpace at `path`, read from a copy."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        out = subprocess.run([str(python), "-c", CONVERT, str(copy)], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    return result["version"], result["tables"]


def op_rows(tables: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The roofline table's properties (the device's peaks), its program row and its per-op rows, whole profile
    (step ``Total``), infeed and outfeed included."""
    table = tables[0]
    ids = [column["id"] for column in table["cols"]]
    rows = []
    for row in table["rows"]:
        values = dict(zip(ids, (cell.get("v") if cell else None for cell in row["c"]), strict=True))
        if values["step"] == "Total" and values["include_infeed_outfeed"]:
            rows.append({key: value for key, value in values.items() if key not in _DROPPED})
    program = next(row for row in rows if row["operation"] == "Program")
    return table.get("p", {}), program, [row for row in rows if row["operation"] != "Program"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="the XSpace (.xplane.pb)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON to write")
    parser.add_argument("--xprof-python", type=Path, help="a Python with xprof installed (default: made here)")
    args = parser.parse_args()
    python = args.xprof_python or xprof_python(DEFAULT_XPROF_VENV)
    version, tables = xprof_tables(args.file, python)
    properties, program, ops = op_rows(tables)
    figures = {
        "about": "XProf's own per-op roofline figures (a peer's, for tests/readers/test_xspace_ops.py); "
        "regenerate with the command below",
        "xprof_version": version,
        "command": "python -m benchmarks.xprof_roofline",
        "converter": f'xprof.convert.raw_to_tool_data.xspace_to_tool_data([file], "{TOOL}", '
        '{"use_saved_result": False})',
        "rows": 'step "Total", include_infeed_outfeed true; every column as XProf names it except '
        + ", ".join(_DROPPED),
        "input": args.file.name,
        "input_sha256": hashlib.sha256(args.file.read_bytes()).hexdigest(),
        "units": UNITS,
        "device": properties,
        "program": program,
        "ops": ops,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"{len(ops)} ops from xprof {version} -> {args.out}")


if __name__ == "__main__":
    main()
