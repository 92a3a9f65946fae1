"""What is wrong with an input: the error that refuses it (`TraceError`) and the warning that a file was cut short.

A module of its own, without pandas (`traceinsight.events`), so that the CLI and the renderers can use them before
pandas is imported: the report command forks its painting process first (`commands/report.py`).
"""


class TraceError(Exception):
    """A problem with an input file: the CLI prints ``path: reason`` and exits 2."""

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


TRUNCATED = "truncated"  # the first word of a truncation warning


def truncation_warning(path: object, used_bytes: int, total_bytes: int, what: str = "bytes") -> str:
    """The `TraceRead.warnings` key of a file cut short (a killed job): the report is made from the part read.

    One form for every reader, so `--strict` and the renderers find it by its first word. `total_bytes` is
    what the file holds before its cut (`what` says which bytes: a gzip file's are its inflated JSON) and
    `used_bytes` the part whose events were complete. No share of the run is given: how much the cut lost
    is unknowable, and the part read is always nearly all of what is there.
    """
    return (
        f"{TRUNCATED}: {path}: ends early after {total_bytes:,} {what}; the complete events in the first "
        f"{used_bytes:,} are read"
    )


def is_truncation_warning(key: str) -> bool:
    return key.startswith(f"{TRUNCATED}: ")
