"""The page's matplotlib charts, drawn in a process of its own while this one reads and analyses.

matplotlib takes 0.3-0.4 s to import, and a chart 30-150 ms to draw however little it shows: most of a report of an
everyday trace if done after the analyses. A `Painter` starts a painting process at the start of the report command
(`parallel.Child`), before numpy and pandas are imported here (`commands/report.py`): it imports numpy and matplotlib
at once, on the other core, and never imports pandas: `paint` sends it the run as plain data (`chart_data.ChartRun`),
and it draws `DRAW_ORDER` while this process writes the bar charts (`svg_charts`) and compiles the templates. With one
job the charts are drawn here.

One big file read by worker processes (`parallel.one_big_file`) keeps both cores busy while it is read: a
painter importing matplotlib at the start took CPU from this process's imports and the readers. There the painter
imports when told (`import_charts`), once the file is read and this process analyses it alone
(`rules.ONE_FILE_SHARE`).

A second painting process, importing matplotlib once the first had and taking every other chart, was dropped once
the bar charts were written directly: with four charts left it cost 0.2-0.4 s of CPU time a report and made the 26
small traces of ../shared/traces slower, not faster (benchmarks/README.md).
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING

from traceinsight.parallel import Child
from traceinsight.result import RunReport

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis
    from traceinsight.render.chart_data import ChartRun

Charts = dict[str, str | None]
# The page's charts (`charts.draw`).
CHART_NAMES = ("steps", "timeline", "memory", "gaps", "kernels", "mfu", "roofline", "ranks", "critical_path")
# Those drawn with matplotlib, by the painter; the others (bars, the ranks, the roofline) are written as SVG directly
# in the report's process (`svg_charts.DIRECT_CHARTS`).
DRAW_ORDER = ("memory", "timeline")


class Painter(Child):
    """Draws the matplotlib charts (`DRAW_ORDER`) in a painting process, started when made; it imports matplotlib at
    once, unless `import_later`: then on `import_charts` (or, never told, when it first draws)."""

    def __init__(self, import_later: bool = False) -> None:
        super().__init__("painter")
        self._import_pending = import_later
        if not import_later:
            self.submit(_import_charts)

    def import_charts(self) -> None:
        """Have the painter import matplotlib now, where it was made to import later (else nothing)."""
        if self._import_pending:
            self._import_pending = False
            self.submit(_import_charts)

    def paint(self, report: RunReport, analysis: Analysis) -> None:
        """Start drawing the charts of one report; `charts` collects them."""
        from traceinsight.render.chart_data import chart_run  # numpy: imported by each process after the fork

        self.submit(draw_painted, pickle.dumps((report, chart_run(analysis)), protocol=pickle.HIGHEST_PROTOCOL))

    def charts(self) -> Charts:
        """The charts `paint` started, as inline SVG (None for a chart the run has no data for)."""
        drawn: Charts = self.latest()
        return drawn

    def __enter__(self) -> Painter:
        return self


def _import_charts() -> None:
    """Import matplotlib and the charts: the work the painter does first."""
    import traceinsight.render.charts  # noqa: F401


def draw_painted(run: bytes) -> Charts:
    """The matplotlib charts of the pickled (report, `ChartRun`)."""
    from traceinsight.render.charts import draw

    report, chart_data = pickle.loads(run)
    return {name: draw(name, report, chart_data) for name in DRAW_ORDER}


def draw_charts(report: RunReport, run: ChartRun) -> Charts:
    """Every chart of the page, as inline SVG (None for a chart the run has no data for)."""
    # matplotlib is imported only where a page is drawn: loading a big trace runs without its 30 MB.
    from traceinsight.render.charts import draw

    return {name: draw(name, report, run) for name in CHART_NAMES}
