"""The wheel ships the tab: its static files, the `tensorboard_plugins` entry point and the extra."""

from __future__ import annotations

import zipfile

from tests.test_packaging import wheel  # noqa: F401  # the wheel fixture (built once for this module)


def test_the_wheel_registers_and_ships_the_tab(wheel):  # noqa: F811
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    assert {"traceinsight/tensorboard/plugin.py", "traceinsight/tensorboard/static/index.js"} <= names
    entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "[tensorboard_plugins]\ntraceinsight = traceinsight.tensorboard.plugin:TraceInsightPlugin" in entry_points
    metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode().splitlines()
    extra = [line for line in metadata if line.startswith("Requires-Dist") and "extra == 'tensorboard'" in line]
    assert len(extra) == 1 and extra[0].startswith("Requires-Dist: tensorboard>=")  # TensorBoard, not TensorFlow
