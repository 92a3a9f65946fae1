"""`--scheduler` addresses that are no Dask scheduler are bad input: exit 2 and one line (issue 36, case 11).

An address Dask cannot parse (``bogus``: no port; an unknown scheme) is refused before any connection, and a
service on the port that does not speak Dask's protocol (a plain TCP server answering an HTTP error, whose bytes
Dask's reader took for a frame of 3 EiB) is refused after its reply: neither was ever an internal error (exit 3),
and neither waits for the connect timeout.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight.cli import main

pytest.importorskip("distributed")

RUN = SAMPLE_TRACES / "synthetic_gpu" / "healthy"


@pytest.fixture
def not_dask() -> Iterator[str]:
    """The address of a TCP server that answers every connection with an HTTP error and hangs up."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    server.close()


def _one_line(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, err
    return err


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("bogus", "missing port"),
        ("http://127.0.0.1:8786", "unknown address scheme"),
        ("tcp://127.0.0.1", "missing port"),
    ],
)
def test_an_address_dask_cannot_parse_is_bad_input(
    address: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert main(["report", str(RUN), "-o", str(tmp_path / "r.html"), "-q", "--scheduler", address]) == 2
    assert time.monotonic() - started < 5  # refused at once, no connection tried
    _one_line(capsys, f"{address}: not a Dask scheduler address", why)
    assert not (tmp_path / "r.html").exists()


def test_a_service_that_is_not_dask_is_bad_input(
    not_dask: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert main(["report", str(RUN), "-o", str(tmp_path / "r.html"), "-q", "--scheduler", not_dask]) == 2
    assert time.monotonic() - started < 5  # its reply ends it, not the connect timeout
    _one_line(capsys, f"{not_dask}: not a Dask scheduler: its reply is not Dask's protocol")
    assert not (tmp_path / "r.html").exists()
