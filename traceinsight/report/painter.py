"""The page's charts, drawn in a process of their own while this one analyses.

matplotlib takes about 0.3 s and 30 MB to import, and the four charts another
0.4 s to draw, all after the analyses: on a trace of a few hundred MB, a fifth of
the run. A `ChartPainter` forks a process at the start of a command, while this
one is still small; once the traces are read, `warm_up` has it import matplotlib
while this process analyses on the other core, and `paint` hands it the results
to draw. With one job (or where processes cannot be forked) it draws here.
"""

from __future__ import annotations

from concurrent.futures import Future, ProcessPoolExecutor
from types import TracebackType
from typing import Any

from traceinsight.analysis import Analysis
from traceinsight.parallel import fork_context

Charts = dict[str, str | None]


class ChartPainter:
    """Draws `charts.all_charts` in a forked process when `parallel`, else in this one."""

    def __init__(self, parallel: bool) -> None:
        self._pool = ProcessPoolExecutor(1, mp_context=fork_context()) if parallel else None
        self._warm: Future[None] | None = None
        if self._pool is not None:
            self._pool.submit(int)  # fork now, while this process holds no trace

    def warm_up(self) -> None:
        """Start importing matplotlib in the painting process (call once the traces are read)."""
        if self._pool is not None and self._warm is None:
            self._warm = self._pool.submit(_import_charts)

    def paint(self, report: dict[str, Any], analysis: Analysis) -> Charts:
        """The charts of one report, as inline SVG (None for a chart the run has no data for)."""
        if self._pool is None:
            return _paint(report, analysis)
        return self._pool.submit(_paint, report, analysis).result()

    def __enter__(self) -> ChartPainter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


def _import_charts() -> None:
    import traceinsight.report.charts  # noqa: F401  # the import is the work


def _paint(report: dict[str, Any], analysis: Analysis) -> Charts:
    # matplotlib is imported only where a page is drawn: loading a big trace runs without its 30 MB.
    from traceinsight.report.charts import all_charts

    return all_charts(report, analysis)
