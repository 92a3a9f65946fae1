"""traceinsight: why is the GPU not busy, and what to change.

    import traceinsight as ti

    r = ti.analyze("runs/profile")  # a trace file, a profile run folder or a TensorBoard logdir
    r.bottlenecks  # DataFrames: .bottlenecks .devices .gaps .kernels .steps .host_ops
    r  # in a notebook: the headline, the bottleneck cards and the timeline

`load`, `analyze` and `Report` live in `traceinsight.api` and are imported on first use, so
``import traceinsight`` stays cheap (the CLI starts without pandas until it needs it).
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False  # `typing` alone costs more to import than this package: type checkers know the name
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"
__all__ = ["load", "analyze", "runs", "Report", "Profile", "TraceError", "__version__"]

if TYPE_CHECKING:  # imported on first use (`__getattr__`)
    from traceinsight.api import Report, analyze, load, runs
    from traceinsight.errors import TraceError
    from traceinsight.events import Profile

_LAZY = {"load": "api", "analyze": "api", "runs": "api", "Report": "api", "Profile": "events", "TraceError": "errors"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traceinsight' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"traceinsight.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The package: `traceinsight.load` stays the API's function. Python binds a submodule to its package's
    attribute once it is imported, and the reader the API is built on is the submodule `traceinsight.load`
    (``from traceinsight.load import load_run`` still finds it)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
