"""The first screen names the cause: each top bottleneck's culprit (`Bottleneck.culprit`), the call, op or stage
of its evidence that costs most, with its time, checked against hand-built traces and raw events."""

import gzip
import json
from decimal import Decimal

import pytest

from tests.analysis.builders import host, kernel, launch, profile
from tests.conftest import shared_trace
from tests.test_findings import FIRES, _marked
from traceinsight.analysis import analyze
from traceinsight.events import Profile
from traceinsight.findings import find_bottlenecks
from traceinsight.render.html import render_html
from traceinsight.render.markdown import render_markdown
from traceinsight.render.terminal import render_terminal
from traceinsight.render.wording import critical_path_sentence, verdict_sentence
from traceinsight.workflow import analyze_path

SGLANG = "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"


def _found(p: Profile) -> dict:
    return {b.id: b for b in find_bottlenecks(analyze(p))}


def test_a_wait_outside_the_trace_names_its_call_and_time():
    # The builder's hipMemcpyWithStream lasts 2,000 us: the culprit is that call, 2 ms, once.
    c = _found(FIRES["external_wait"]())["external_wait"].culprit
    assert (c.what, c.name, c.ns, c.count) == ("call", "hipMemcpyWithStream", 2_000_000, 1)


def _two_kinds_of_sync() -> Profile:
    """Three 3 ms steps, each a kernel the host waits on and 300 us of Python: step 0 waits 1.6 ms in
    cudaStreamSynchronize, steps 1 and 2 1.2 ms each in aten::item (2.4 ms in all: the biggest by total, though
    not the longest single wait)."""
    rows = []
    for i, (name, wait) in enumerate([("cudaStreamSynchronize", 1_600), ("aten::item", 1_200), ("aten::item", 1_200)]):
        t = i * 3_000
        kind = "sync" if name.startswith("cuda") else "cpu_op"
        rows += [_marked(i, t, 3_000), launch(t, 5, i + 1), kernel(t + 10, wait - 10, corr=i + 1)]
        rows += [host(kind, t + 10, wait, name), host("python", t + wait + 10, 300, "train.py(20): log")]
        rows += [launch(t + wait + 310, 5, 50 + i), kernel(t + wait + 320, 100, corr=50 + i)]
    return profile(rows)


def test_a_sync_names_the_call_that_waits_longest_in_all():
    c = _found(_two_kinds_of_sync())["d2h_sync"].culprit
    assert (c.what, c.name, c.ns, c.count) == ("call", "aten::item", 2_400_000, 2)


def test_an_input_wait_names_the_stage_the_loop_waits_in():
    # Two 500 us DataLoader waits and no input function: the stage, 1 ms over the capture, 2 calls.
    c = _found(FIRES["input_bound"]())["input_bound"].culprit
    name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert (c.what, c.name, c.ns, c.count) == ("input stage", name, 1_000_000, 2)


def test_low_compute_efficiency_names_the_op_furthest_above_its_roofline():
    c = _found(FIRES["low_compute_efficiency"]())["low_compute_efficiency"].culprit
    assert (c.what, c.name, c.ns, c.count) == ("op", "aten::mm", 1_900_000, 2)


def test_idle_time_without_a_cause_names_no_culprit():
    assert _found(FIRES["idle_other"]())["idle_other"].culprit is None


def _raw_events(relative: str) -> list[dict]:
    with gzip.open(shared_trace(relative)) as f:
        return json.load(f, parse_float=Decimal)["traceEvents"]


def test_sglang_first_screen_names_the_blocking_copy():
    """The replay's host blocks in one hipMemcpyWithStream (the raw trace's longest runtime call): the headline,
    the terminal's bottleneck lines, the Markdown table and the first card name it with its 463 ms."""
    raw = _raw_events(SGLANG)
    longest = max((e for e in raw if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"), key=lambda e: e["dur"])
    analyzed = analyze_path(shared_trace(SGLANG))
    report = analyzed.report
    top = report.bottlenecks[0]
    assert (top.culprit.name, top.culprit.ns) == (longest["name"], int(longest["dur"] * 1000))
    assert longest["name"] == "hipMemcpyWithStream"
    assert "hipMemcpyWithStream: 1 call, 463 ms in all" in verdict_sentence(report)
    terminal = render_terminal(report).split("Bottlenecks:")[1].splitlines()[1:3]
    assert "wait outside the trace" in terminal[0] and "hipMemcpyWithStream: 1 call, 463 ms in all" in terminal[1]
    table = render_markdown(report, None).split("\n| 1 | ")[1].splitlines()[0]
    assert "hipMemcpyWithStream: 1 call, 463 ms in all" in table
    page = render_html(report, analyzed.analysis)
    card = page.split('id="bottleneck-external_wait"')[1][:1500]
    assert "hipMemcpyWithStream: 1 call, 463 ms in all" in card
    # The critical path names the same wait by the same name.
    assert "(wait outside the trace): 463 ms a step" in critical_path_sentence(report)


@pytest.mark.parametrize(
    ("relative", "stage"),
    [("kineto/resnet50_num_workers_0", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")],
)
def test_resnet_input_wait_names_the_dataloader_stage(relative, stage):
    """num_workers=0: the loop waits in `__next__` (63-73 ms a step); its slowest function, aten::to, is a small
    part of that wait, so the stage is named, with the sum of its raw events' durations."""
    path = shared_trace(relative)
    raw = _raw_events(str(next(path.glob("*.json.gz")).relative_to(path.parent.parent)))
    spans = [e["dur"] for e in raw if e.get("ph") == "X" and e.get("name") == stage]
    c = analyze_path(path).report.bottlenecks[0].culprit
    assert (c.name, c.ns, c.count) == (stage, int(sum(spans) * 1000), len(spans))


def test_a_cpu_run_names_an_op_of_its_steps_not_the_range_around_them():
    """A legacy trace records `record_function("model_inference")` around the whole loop as an op. With the loop's
    Python between ops untraced, the range has the most self time: 6 gaps of 400 µs, 2.4 ms, against aten::mm's 6 x
    300 µs, 1.8 ms. It names no work of a step (one call of 6 ms over six 1 ms steps), so aten::mm is named."""
    rows = [host("cpu_op", 0, 6_000, "model_inference")]
    for i in range(6):
        at = 1_000 * i
        rows += [host("annotation", at, 1_000, f"ProfilerStep#{i + 1}"), host("cpu_op", at, 600, "aten::linear")]
        rows += [host("cpu_op", at + 100, 300, "aten::mm")] + [
            host("cpu_op", at + 400 + 10 * k, 10, "aten::view") for k in range(4)
        ]
    top = find_bottlenecks(analyze(profile(rows)))[0]
    assert top.id == "host_bound" and top.culprit is not None
    assert (top.culprit.name, top.culprit.count, top.culprit.ns) == ("aten::mm", 6, 6 * 300_000)


def _launch_waits(cpu_us: int) -> Profile:
    """Four 1 ms steps: the host runs 600 µs before each launch, `cpu_us` of it in aten::normal_ (torch.randn on
    the CPU) and the rest in Python, then a 300 µs kernel runs. The device waits for the launch from each kernel's
    end (950 µs into a step) to the next one's start (650 µs into the next)."""
    rows = []
    for i in range(4):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), host("cpu_op", t, cpu_us, "aten::normal_")]
        rows += [host("python", t + cpu_us, 600 - cpu_us, "train.py(12): step")]
        rows += [launch(t + 600, 50, i + 1), kernel(t + 650, 300, corr=i + 1)]
    return profile(rows)


def test_host_bound_names_the_op_the_device_waited_on():
    """The device waits between kernels, so in steps 1-3 from their start to 650 µs: aten::normal_ holds 400 µs of
    each (step 0's runs before the first kernel, when the device has not begun). Its time is said to be counted
    while the device waited, as the op table beside holds its time over the capture."""
    top = _found(_launch_waits(400))["host_bound"]
    c = top.culprit
    assert (c.what, c.name, c.ns, c.count) == ("op", "aten::normal_", 3 * 400_000, 3)
    assert c.within == "while the device waited for the host's next launch"


def test_host_bound_names_no_op_that_holds_a_sliver_of_the_waits():
    """aten::normal_ at 40 µs of each 700 µs wait (6 %) is no cause of it: the Python around it is, which no op
    names, so no op is named."""
    assert _found(_launch_waits(40))["host_bound"].culprit is None
