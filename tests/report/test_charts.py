"""Charts: inline SVG, and long runs drawn as areas rather than hundreds of bars."""

from traceinsight.report import charts


def _steps(n: int) -> dict:
    items = [{"id": i, "breakdown": {c: (j + 1) * 1_000_000 for j, c in enumerate(charts.BREAKDOWN)}} for i in range(n)]
    return {"steps": {"items": items}}


def test_step_chart_bars_then_areas():
    few = charts.step_breakdown(_steps(10))
    many = charts.step_breakdown(_steps(200))
    assert few.startswith("<svg") and many.startswith("<svg")
    assert few.count('<g id="patch_') >= 10 * len(charts.BREAKDOWN)  # one rectangle per step and part
    assert many.count('<g id="patch_') < 200  # a few areas, not 1,200 rectangles
    assert charts.step_breakdown({"steps": {"items": []}}) is None
