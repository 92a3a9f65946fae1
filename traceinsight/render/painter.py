"""The page's charts, drawn in processes of their own while this one reads and analyses.

matplotlib takes 0.2-0.3 s to import and the charts 0.25-0.45 s to draw: most of a report of an everyday trace
if done after the analyses. A `Painter` starts a painting process at the start of the report command
(`parallel.Child`), before numpy and pandas are imported here (`commands/report.py`): it imports numpy and
matplotlib at once, on the other core, and never imports pandas: `paint` sends it the run as plain data
(`chart_data.ChartRun`). With a fork to start it, a second painting process imports matplotlib once the first has
(while this process still analyses, so the two imports never run beside this one's), and the two draw the charts
side by side, each taking the next chart not yet taken, the costliest first (`DRAW_ORDER`): this process only
waits for them, so they have both cores. With one job the charts are drawn here.

One big file read by worker processes (`parallel.Reading.ONE_FILE`) keeps both cores busy while it is read: a
painter importing matplotlib at the start took CPU from this process's imports and the readers. There the one painter
imports when told (`import_charts`), once the file is read and this process analyses it alone
(`rules.ONE_FILE_SHARE`).
"""

from __future__ import annotations

import os
import pickle
from types import TracebackType
from typing import TYPE_CHECKING, Any

from traceinsight.parallel import Child, start_context
from traceinsight.result import RunReport

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis
    from traceinsight.render.chart_data import ChartRun

Charts = dict[str, str | None]
# The page's charts (`charts.draw`).
CHART_NAMES = ("steps", "timeline", "memory", "gaps", "kernels", "mfu", "roofline", "ranks", "critical_path")
# Those drawn with matplotlib, in the order the painting processes take them: the costliest first (the roofline's
# log axes, a TPU's memory steps), so that the last one taken is short and neither process waits long for the other.
# The others are bars, written as SVG directly in the report's process (`svg_charts.DIRECT_CHARTS`).
DRAW_ORDER = ("roofline", "memory", "timeline", "ranks")
PAINTERS = 2  # painting processes at most, where they can be forked (this process waits while they draw)

# Shared by the painting processes (inherited at their fork): the report being drawn and the next chart of it not
# yet taken. None in a process that draws alone.
_NEXT: Any = None


class Painter:
    """Draws the matplotlib charts (`DRAW_ORDER`) in painting processes, started when made; they import matplotlib
    at once, unless `import_later`: then the one painter imports on `import_charts` (or, never told, when it first
    draws)."""

    def __init__(self, processes: int = PAINTERS, import_later: bool = False) -> None:
        global _NEXT
        context = start_context()
        count = 1 if import_later or context.get_start_method() != "fork" else max(processes, 1)
        _NEXT = context.Array("q", 2) if count > 1 else None  # [report number, next chart]
        self._painted = 0
        # The first painter's word to the others that it has imported (a pipe inherited at their fork).
        imported, may_import = os.pipe() if count > 1 else (-1, -1)
        self._children: list[Child] = []
        try:
            for i in range(count):
                self._children.append(Child("painter" if i == 0 else f"painter {i + 1}", context))
        except BaseException as failed:  # interrupted as they started: none left behind
            self.__exit__(type(failed), failed, None)
            raise
        finally:  # this process's ends of the pipe: the painters hold their own
            for end in (imported, may_import):
                if end >= 0:
                    os.close(end)
        first, *others = self._children
        self._import_pending = import_later
        if not import_later:
            first.submit(_import_charts, may_import)
        for child in others:
            child.submit(_import_charts_after, imported, may_import)

    def import_charts(self) -> None:
        """Have the painter import matplotlib now, where it was made to import later (else nothing)."""
        if self._import_pending:
            self._import_pending = False
            self._children[0].submit(_import_charts, -1)

    def paint(self, report: RunReport, analysis: Analysis) -> None:
        """Start drawing the charts of one report; `charts` collects them."""
        from traceinsight.render.chart_data import chart_run  # numpy: imported by each process after the fork

        self._painted += 1
        if _NEXT is not None:
            with _NEXT.get_lock():
                _NEXT[0], _NEXT[1] = self._painted, 0
        run = pickle.dumps((report, chart_run(analysis)), protocol=pickle.HIGHEST_PROTOCOL)  # pickled once
        for child in self._children:
            child.submit(draw_share, self._painted, run)

    def charts(self) -> Charts:
        """The charts `paint` started, as inline SVG (None for a chart the run has no data for). A painter still
        importing when the others had drawn them all is not waited for."""
        first, *others = self._children
        drawn: Charts = first.latest()
        for child in others:
            if len(drawn) == len(DRAW_ORDER):
                break
            drawn.update(child.latest())
        return drawn

    def __enter__(self) -> Painter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for child in self._children[1:]:  # it holds nothing: not waited for (it may still be importing)
            child.abandon()
        if self._children:
            self._children[0].__exit__(kind, error, trace)


def _import_charts(tell: int) -> None:
    """Import matplotlib and the charts (the work), then tell the other painters (`tell`: a pipe's end; -1: none)."""
    import traceinsight.render.charts  # noqa: F401

    if tell >= 0:
        os.write(tell, b"go")
        os.close(tell)


def _import_charts_after(wait: int, inherited: int) -> None:
    """Import the charts once the first painter has: its word on the pipe `wait`, or its end (it died)."""
    os.close(inherited)  # the first painter's end, which this process holds too: its close must end the wait
    os.read(wait, 1)
    os.close(wait)
    import traceinsight.render.charts  # noqa: F401


def _take(report: int) -> str | None:
    """The next chart of report number `report` not yet taken by a painter (None: none left, or a later report is
    being drawn)."""
    with _NEXT.get_lock():
        if _NEXT[0] != report or _NEXT[1] >= len(DRAW_ORDER):
            return None
        _NEXT[1] += 1
        return DRAW_ORDER[_NEXT[1] - 1]


def draw_share(report_number: int, run: bytes) -> Charts:
    """The matplotlib charts of the pickled (report, `ChartRun`) this painter takes (all of them when it draws
    alone)."""
    from traceinsight.render.charts import draw

    report, chart_data = pickle.loads(run)
    if _NEXT is None:
        return {name: draw(name, report, chart_data) for name in DRAW_ORDER}
    drawn: Charts = {}
    while (name := _take(report_number)) is not None:
        drawn[name] = draw(name, report, chart_data)
    return drawn


def draw_charts(report: RunReport, run: ChartRun) -> Charts:
    """Every chart of the page, as inline SVG (None for a chart the run has no data for)."""
    # matplotlib is imported only where a page is drawn: loading a big trace runs without its 30 MB.
    from traceinsight.render.charts import draw

    return {name: draw(name, report, run) for name in CHART_NAMES}
