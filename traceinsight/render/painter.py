"""The page's charts, drawn in a process of their own while this one reads and analyses.

matplotlib takes 0.4-0.6 s to import and the charts 0.3-0.45 s to draw: most of a report of an everyday trace
if done after the analyses. A `Painter` starts a painting process at the start of the report command
(`parallel.Child`), before numpy and pandas are imported here (`commands/report.py`): it imports numpy and
matplotlib at once, on the other core, and never imports pandas: `paint` sends it the run as plain data
(`chart_data.ChartRun`), and it draws the charts while this process compiles the page's templates; `charts`
collects them. With one job they are drawn here. (A helper forked from the painter to draw half the charts
did not pay for its fork: benchmarks/README.md.)
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from traceinsight.parallel import Child
from traceinsight.result import RunReport

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis
    from traceinsight.render.chart_data import ChartRun

Charts = dict[str, str | None]
# The page's charts (`charts.draw`).
CHART_NAMES = ("steps", "timeline", "memory", "gaps", "kernels", "mfu", "roofline", "ranks", "critical_path")


class Painter:
    """Draws the `CHART_NAMES` charts in a painting process, started (and importing matplotlib) when made."""

    def __init__(self) -> None:
        self._child = Child("painter")
        self._child.submit(_import_charts)

    def paint(self, report: RunReport, analysis: Analysis) -> None:
        """Start drawing the charts of one report; `charts` collects them."""
        from traceinsight.render.chart_data import chart_run  # numpy: imported by each process after the fork

        self._child.submit(draw_charts, report, chart_run(analysis))

    def charts(self) -> Charts:
        """The charts `paint` started, as inline SVG (None for a chart the run has no data for)."""
        return self._child.latest()  # type: ignore[no-any-return]

    def __enter__(self) -> Painter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._child.__exit__(kind, error, trace)


def _import_charts() -> None:
    import traceinsight.render.charts  # noqa: F401  # the import is the work


def draw_charts(report: RunReport, run: ChartRun) -> Charts:
    """Every chart of the page, as inline SVG (None for a chart the run has no data for)."""
    # matplotlib is imported only where a page is drawn: loading a big trace runs without its 30 MB.
    from traceinsight.render.charts import draw

    return {name: draw(name, report, run) for name in CHART_NAMES}
