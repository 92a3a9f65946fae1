"""The page's charts, drawn in processes of their own while this one analyses.

matplotlib takes about 0.3 s and 30 MB to import, and the four charts another
0.4 s to draw: on a trace of a few hundred MB, a fifth of the run if done after
the analyses. A `ChartPainter` forks a painting process at the start of a
command, while this one is still small. Once the traces are read, `warm_up` has
it import matplotlib on the core the analyses leave free; `paint` has it fork a
helper that inherits the import and draws half the charts while it draws the
other half. With one job it draws here.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from types import TracebackType
from typing import Any

from traceinsight.analysis import Analysis
from traceinsight.parallel import fork_context, quiet_worker, stop_pool, worker_pool

Charts = dict[str, str | None]
# The page's charts (`charts.draw`), the slowest first; the painter draws every other one, its helper the rest.
CHART_NAMES = ("steps", "timeline", "memory", "gaps", "kernels")


class ChartPainter:
    """Draws the `CHART_NAMES` charts in a forked painting process (and its helper) when `parallel`, else here."""

    def __init__(self, parallel: bool) -> None:
        self._pool = ProcessPoolExecutor(1, mp_context=fork_context(), initializer=quiet_worker) if parallel else None
        self._warm = False
        if self._pool is not None:
            self._pool.submit(int)  # fork now, while this process holds no trace

    def warm_up(self) -> None:
        """Start importing matplotlib in the painting process (call once the traces are read)."""
        if self._pool is not None and not self._warm:
            self._warm = True
            self._pool.submit(_import_charts)

    def paint(self, report: dict[str, Any], analysis: Analysis) -> Charts:
        """The charts of one report, as inline SVG (None for a chart the run has no data for)."""
        if self._pool is None:
            return _draw_all(report, analysis, helper=False)
        return self._pool.submit(_draw_all, report, analysis, True).result()

    def __enter__(self) -> ChartPainter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._pool is None:
            return
        if error is not None:  # interrupted, or failed: no waiting for a chart nobody will see
            stop_pool(self._pool)
        else:
            self._pool.shutdown(cancel_futures=True)


def _import_charts() -> None:
    import traceinsight.report.charts  # noqa: F401  # the import is the work


def _draw_all(report: dict[str, Any], analysis: Analysis, helper: bool) -> Charts:
    """Every chart; with a `helper`, a fork of this process (matplotlib already imported) draws every other one."""
    # matplotlib is imported only where a page is drawn: loading a big trace runs without its 30 MB.
    from traceinsight.report.charts import draw

    if not helper:
        return {name: draw(name, report, analysis) for name in CHART_NAMES}
    with worker_pool(1) as pool:
        theirs = {name: pool.submit(draw, name, report, analysis) for name in CHART_NAMES[1::2]}
        mine = {name: draw(name, report, analysis) for name in CHART_NAMES[::2]}
        drawn = {**mine, **{name: future.result() for name, future in theirs.items()}}
    return {name: drawn[name] for name in CHART_NAMES}
