"""Re-make the report screenshots under docs/screenshots/ (headless Chromium), after a change to the page.

python -m tools.screenshots                 # all five, into docs/screenshots/
python -m tools.screenshots tpu cpu-only    # some of them
python -m tools.screenshots --heights       # each page's height in px at 1280 px wide, no screenshot

Each picture is the page's first screen (1280 x 900: the verdict, the contents, the top bottleneck), then the
sections that show what the page is for on that run (the folded devices, a chart's axes), cut out of one
full-page screenshot and stacked, a grey rule between. The page shows no script (its Content-Security-Policy
forbids one); where the sections lie is read from a copy of it that runs one, laid out the same. Needs
/usr/bin/chromium (or `chromium` on PATH) and ../shared/traces beside the checkout for the real traces.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
OUT = REPO / "docs" / "screenshots"
WIDTH, FIRST_SCREEN = 1280, 900
MAX_BYTES = 300_000  # a picture is made smaller (fewer colours, then narrower) until it fits


@dataclass(frozen=True)
class Shot:
    name: str  # the PNG's name, without .png
    trace: Path
    sections: tuple[tuple[str, int], ...]  # (section id, px of it to show) under the first screen


SHOTS = (
    Shot("jax-8gpu", SHARED / "tracelens/mi300/jax_conv_minimal_08", (("devices", 1040), ("memory", 420))),
    Shot("tpu", SHARED / "xprof/test_xplanes", (("devices", 640), ("memory", 300), ("steps", 560))),
    Shot("vllm-replay", SHARED / "inference/vllm_decode_full/graph_execution.json.gz", (("gaps", 620),)),
    Shot("multi-rank", REPO / "sample_traces/distributed/sleep_rank1", (("ranks", 640),)),
    Shot("cpu-only", REPO / "sample_traces/torch_cpu_dataloader", (("steps", 560),)),
)
_CSP = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>')
# Run in the measuring copy: the page's height and each section's top, written into the title --dump-dom shows.
_MEASURE = (
    "<script>document.title = JSON.stringify({height: document.documentElement.scrollHeight, sections: "
    "Object.fromEntries([...document.querySelectorAll('section[id]')].map(s => [s.id, s.offsetTop]))});</script>"
)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        sys.exit("headless Chromium is needed: apt-get install chromium")
    return found


def _browser(*args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    return subprocess.run([chromium(), *flags, *args], capture_output=True, text=True, timeout=180, check=True)


def report(trace: Path, html: Path) -> None:
    """`traceinsight report` of `trace` into `html`, by the checkout's own package."""
    command = [sys.executable, "-m", "traceinsight", "report", str(trace), "-o", str(html), "-q"]
    subprocess.run(command, cwd=REPO, check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def layout(html: Path) -> dict[str, object]:
    """The page's height and its sections' tops (px at `WIDTH`), from a copy that runs `_MEASURE`."""
    measured = html.with_suffix(".measure.html")
    measured.write_text(_CSP.sub("", html.read_text()).replace("</body>", _MEASURE + "</body>"))
    dom = _browser(f"--window-size={WIDTH},{FIRST_SCREEN}", "--dump-dom", measured.as_uri()).stdout
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title, "the measuring copy did not run"
    return json.loads(title.group(1).replace("&quot;", '"'))


def picture(shot: Shot, html: Path, where: dict[str, object]) -> Image.Image:
    """The first screen, then each of `shot.sections` present (up to its px, or the next section), from one
    full-page screenshot."""
    height = int(where["height"])  # type: ignore[call-overload]
    full = html.with_suffix(".png")
    _browser(f"--window-size={WIDTH},{height}", f"--screenshot={full}", html.as_uri())
    page = Image.open(full).convert("RGB")
    tops: dict[str, int] = where["sections"]  # type: ignore[assignment]
    parts = [page.crop((0, 0, WIDTH, FIRST_SCREEN))]
    for section, px in shot.sections:
        if section in tops:
            top = tops[section]
            after = [t for t in tops.values() if t > top]  # a part ends where the next section begins
            parts.append(page.crop((0, top, WIDTH, min([height, top + px, *after]))))
    rule = 6
    out = Image.new("RGB", (WIDTH, sum(p.height for p in parts) + rule * (len(parts) - 1)), "#9e9e9e")
    y = 0
    for part in parts:
        out.paste(part, (0, y))
        y += part.height + rule
    return out


def save_small(image: Image.Image, path: Path) -> int:
    """`image` as a PNG of at most `MAX_BYTES`: a palette of fewer colours first, then a narrower picture."""
    for width in (WIDTH, 1100, 960, 800):
        scaled = image if width == image.width else image.resize((width, image.height * width // image.width))
        for colours in (64, 32, 16):
            scaled.quantize(colours, dither=Image.Dither.NONE).save(path, optimize=True)
            if path.stat().st_size <= MAX_BYTES:
                return path.stat().st_size
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"some of: {', '.join(s.name for s in SHOTS)} (default: all)")
    parser.add_argument("--heights", action="store_true", help="print each page's height (px), take no screenshot")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the PNGs (default: docs/screenshots)")
    args = parser.parse_args(argv)
    chosen = [s for s in SHOTS if not args.names or s.name in args.names]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for shot in chosen:
            if not shot.trace.exists():
                print(f"{shot.name}: {shot.trace} not found, skipped", file=sys.stderr)
                continue
            html = Path(tmp) / f"{shot.name}.html"
            report(shot.trace, html)
            where = layout(html)
            if args.heights:
                print(f"{shot.name}: {where['height']} px")
                continue
            size = save_small(picture(shot, html, where), args.out / f"{shot.name}.png")
            print(f"{shot.name}: {args.out / f'{shot.name}.png'} ({size:,} bytes; page {where['height']} px)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
