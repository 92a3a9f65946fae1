"""The HTML report in a real browser (headless Chromium): it renders, and it fetches nothing.

Chromium's own net log records every request the browser makes. Chromium itself talks
to Google services in the background, so those hosts are ignored; a control page with
one remote image proves the check sees page requests.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES, shared_trace
from traceinsight.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_BACKGROUND_HOSTS = re.compile(r"^https?://([\w.-]+\.)?(google\.com|googleapis\.com|gstatic\.com|gvt1\.com)/")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")


def open_in_chromium(page: Path, tmp: Path) -> tuple[str, set[str]]:
    """The DOM after load and the URLs the browser requested while loading `page`."""
    netlog = tmp / f"{page.stem}.netlog.json"
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp / ('profile-' + page.stem)}",
            f"--log-net-log={netlog}",
            "--virtual-time-budget=3000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    urls = set(re.findall(r'"url":"([^"]+)"', netlog.read_text()))
    return result.stdout, {u for u in urls if not u.startswith("file:") and not BROWSER_BACKGROUND_HOSTS.match(u)}


@pytest.mark.parametrize(
    "trace", ["sample:synthetic_gpu/input_bound", "shared:kineto/resnet50_num_workers_0"], ids=lambda t: t.split(":")[1]
)
def test_report_renders_and_fetches_nothing(tmp_path, trace):
    where, relative = trace.split(":")
    path = SAMPLE_TRACES / relative if where == "sample" else shared_trace(relative)
    html = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(html), "-q"]) == 0
    dom, requests = open_in_chromium(html, tmp_path)
    assert requests == set()
    assert 'id="verdict"' in dom and re.findall(r'id="bottleneck-(\w+)"', dom)[0] == "input_bound"
    assert "num_workers" in dom
    assert dom.count("<svg") >= 3


def test_the_network_check_sees_a_remote_fetch(tmp_path):
    control = tmp_path / "control.html"
    control.write_text('<html><body><p>x</p><img src="http://example.invalid/pixel.png"></body></html>')
    _, requests = open_in_chromium(control, tmp_path)
    assert "http://example.invalid/pixel.png" in requests
