"""The wheel: it ships the templates, and an installed copy finds them (not the checkout's)."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE_TRACES


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("traceinsight_report-*.whl")
    return path


def test_wheel_contents(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {p.name for p in (REPO / "templates").glob("*.html")}
    assert templates and {f"traceinsight/templates/{t}" for t in templates} <= names
    assert "traceinsight/readers/xspace.py" in names
    assert not any(n.startswith(("tests/", "sample_traces/", "tools/")) for n in names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [
        ln for ln in zipfile.ZipFile(wheel).read(metadata).decode().splitlines() if ln.startswith("Requires-Dist")
    ]
    runtime = [r for r in requires if "extra ==" not in r]
    assert not any("tensorflow" in r or "torch" in r or "tensorboard" in r for r in runtime)


def test_installed_wheel_reports_from_another_folder(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = (
        "import sys, traceinsight.render.html as h, traceinsight.cli as c;"
        "print(h.templates_dir());"
        f"sys.exit(c.main(['report', {str(SAMPLE_TRACES / 'synthetic_gpu' / 'healthy')!r}, '-o', 'r.html', '-q']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=elsewhere,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(target))
    assert "<svg" in (elsewhere / "r.html").read_text()
