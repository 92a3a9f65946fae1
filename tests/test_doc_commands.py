"""Every command in the README and docs/ runs as written, from a clean copy of the repository.

A fenced ```sh, ```bash or ```console block is a shell command; a ```python block is a script. Each block runs in a
copy of its own of the repository's files (tracked, or new and not ignored: no build output, no cache), with ../shared
beside it when present, so a block stands alone. Nothing in a command is substituted. The environment only puts this
checkout's `traceinsight` and `python` first on PATH and points $TRACEINSIGHT_CACHE and $GITHUB_STEP_SUMMARY at
temporary paths.

A block that cannot run here says so on the line before it: `<!-- not run: REASON -->` (an install from the index, a
GPU, a framework CI does not have, a server that runs until stopped). A block meant to cross a gate says
`<!-- expect exit 1: REASON -->`. Blocks run side by side: each is one or two short commands on small inputs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED_TRACES, shared_trace
from traceinsight.cli import build_parser

DOCUMENTS = sorted(["README.md", "CONTRIBUTING.md", *(p.relative_to(REPO).as_posix() for p in REPO.glob("docs/*.md"))])
SHELL = ("sh", "bash", "console")
RUN = (*SHELL, "python")
# Languages of blocks that are shown, never run (outputs, usage lines, formulas, config).
SHOWN = ("text", "yaml", "json")
FENCE = re.compile(r"^\s*```(\w*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(not run|expect exit (\d+)):\s*(\S.*?)\s*-->\s*$")
SHARED_PATH = re.compile(r"\.\./shared/traces/([\w./-]+)")
BLOCK_TIMEOUT_S = 240


# Links to files another branch of issue 38 adds; remove each once it is in the tree.
@dataclass(frozen=True)
class Block:
    document: str
    line: int
    lang: str
    code: str
    not_run: str | None  # the reason it is not run
    exit_code: int

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def blocks(document: str) -> list[Block]:
    """The fenced blocks of one document, with the marker on the line before each (blank lines between allowed)."""
    lines = (REPO / document).read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if FENCE.match(lines[j]) and not FENCE.match(lines[j]).group(1))
        above = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mark = MARK.match(above)
        not_run = mark.group(3) if mark and mark.group(1) == "not run" else None
        exit_code = int(mark.group(2)) if mark and mark.group(2) else 0
        found.append(Block(document, i + 1, opening.group(1), "\n".join(lines[i + 1 : end]) + "\n", not_run, exit_code))
        i = end + 1
    return found


def console_commands(code: str) -> str:
    """The commands of a console block: lines after a `$ ` prompt, with their `\\` continuations."""
    commands, continued = [], False
    for line in code.splitlines():
        if line.startswith("$ ") or continued:
            commands.append(line.removeprefix("$ ") if not continued else line)
            continued = line.endswith("\\")
    return "\n".join(commands) + "\n"


@dataclass
class Outcome:
    block: Block
    returncode: int | None = None  # None: not run
    output: str = ""
    needs: tuple[str, ...] = ()  # ../shared/traces paths it needs and this machine lacks


def _copy_repository(target: Path) -> None:
    """The repository's own files as they are in the working tree: tracked, or new and not ignored."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True
    )
    if listing.returncode != 0:  # an unpacked sdist: no clean copy to make
        pytest.skip(f"not a git checkout: {listing.stderr.decode().strip()}")
    listed = listing.stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _environment(work: Path) -> dict[str, str]:
    """PATH with shims running this interpreter (so `traceinsight` and `python` are this checkout's, installed or
    not), the copy first on PYTHONPATH, and the cache and step summary in the work folder."""
    shims = work / "bin"
    shims.mkdir()
    for name, command in (("traceinsight", f'"{sys.executable}" -m traceinsight'), ("python", f'"{sys.executable}"')):
        (shims / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (shims / name).chmod(0o755)
    env = dict(os.environ)
    env.update(
        PATH=f"{shims}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(work / "repo"),
        TRACEINSIGHT_CACHE=str(work / "cache"),
        GITHUB_STEP_SUMMARY=str(work / "step-summary.md"),
        MPLBACKEND="Agg",
    )
    env.pop("TRACEINSIGHT_DEBUG", None)
    return env


def _run_block(block: Block, work: Path, pristine: Path) -> Outcome:
    """One block, in its own copy of the repository under `work`: links to the files of a `pristine` copy (outputs
    are written to new files and renamed, so no block changes another's files)."""
    outcome = Outcome(block)
    if block.lang not in RUN or block.not_run:
        return outcome
    outcome.needs = tuple(p for p in SHARED_PATH.findall(block.code) if not (SHARED_TRACES / p).exists())
    if outcome.needs:
        return outcome
    repo = work / "repo"
    shutil.copytree(pristine, repo, copy_function=os.link)
    if SHARED_TRACES.is_dir():
        (work / "shared").symlink_to(SHARED_TRACES.parent, target_is_directory=True)
    if block.lang == "python":
        command = [sys.executable, "-c", block.code]
    else:
        code = console_commands(block.code) if block.lang == "console" else block.code
        command = ["bash", "-e", "-o", "pipefail", "-c", code]
    try:
        done = subprocess.run(
            command,
            cwd=repo,
            env=_environment(work),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
        outcome.returncode, outcome.output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as timed_out:
        outcome.returncode, outcome.output = -1, f"timed out after {BLOCK_TIMEOUT_S} s: {timed_out.output!r}"
    return outcome


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Outcome]]:
    """Every block of every document run, side by side, in document order."""
    every = [block for document in DOCUMENTS for block in blocks(document)]
    works = [tmp_path_factory.mktemp("block") for _ in every]
    pristine = tmp_path_factory.mktemp("pristine")
    _copy_repository(pristine)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        done = list(pool.map(_run_block, every, works, [pristine] * len(every)))
    return {document: [o for o in done if o.block.document == document] for document in DOCUMENTS}


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_command_runs_as_written(outcomes: dict[str, list[Outcome]], document: str) -> None:
    failed = [
        f"{o.block.where}: exit {o.returncode}, expected {o.block.exit_code}\n{o.block.code}{o.output[-3000:]}"
        for o in outcomes[document]
        if o.returncode is not None and o.returncode != o.block.exit_code
    ]
    assert not failed, "\n\n".join(failed)
    for needed in sorted({p for o in outcomes[document] for p in o.needs}):
        shared_trace(needed)  # skips (fails under CI) for want of the trace


def test_every_block_is_run_or_says_why(outcomes: dict[str, list[Outcome]]) -> None:
    """Every fence names its language, so no command hides in a block that is never run; most commands do run."""
    every = [o for listed in outcomes.values() for o in listed]
    unnamed = [o.block.where for o in every if o.block.lang not in (*RUN, *SHOWN)]
    assert not unnamed, f"fences without a known language (one of {RUN + SHOWN}): {unnamed}"
    commands = [o for o in every if o.block.lang in RUN]
    ran = [o for o in commands if o.returncode is not None]
    not_run = [o for o in commands if o.block.not_run]
    assert len(ran) + len(not_run) + sum(bool(o.needs) for o in commands) == len(commands)
    assert len(ran) >= 15, f"only {len(ran)} blocks ran; not run: {[o.block.where for o in not_run]}"


def test_the_tests_line_is_the_ci_command() -> None:
    """.ci/run runs the README's test command verbatim; CONTRIBUTING.md shows the same line."""
    ci_line = (REPO / ".ci" / "run").read_text().rstrip("\n").splitlines()[-1]
    assert ci_line.startswith("pip install -e ")
    for document in ("README.md", "CONTRIBUTING.md"):
        assert ci_line in (REPO / document).read_text().splitlines(), document


def test_the_readme_fits_on_a_few_screens() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)(#[^)]*)?\)")


@pytest.mark.parametrize("document", DOCUMENTS)
def test_relative_links_point_at_files(document: str) -> None:
    base = (REPO / document).parent
    targets = [(base / target).resolve() for target, _ in LINK.findall((REPO / document).read_text())]
    missing = [str(t) for t in targets if not t.exists()]
    assert not missing, missing


def test_the_marker_parser() -> None:
    """The markers and console prompts are read as the module docstring says."""
    assert MARK.match("<!-- not run: needs a GPU -->").group(3) == "needs a GPU"
    assert MARK.match("<!-- expect exit 1: the gate is crossed -->").group(2) == "1"
    assert not MARK.match("<!-- not run -->")  # a reason is required
    assert console_commands("$ a \\\n  b\nout\n$ c\n") == "a \\\n  b\nc\n"


def _cli_section(name: str) -> str:
    """The `## name` section of docs/cli.md."""
    text = (REPO / "docs" / "cli.md").read_text()
    found = re.search(rf"^## {name}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert found, f"docs/cli.md has no '## {name}' section"
    return found.group(1)


def test_every_command_and_option_is_in_the_cli_doc() -> None:
    """Each command's section of docs/cli.md names every option `traceinsight COMMAND --help` lists."""
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) >= {"report", "runs", "diff", "trend"}
    for name, parser in commands.choices.items():
        section = _cli_section(name)
        options = [s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"]
        missing = [option for option in options if f"`{option}" not in section]
        assert not missing, f"docs/cli.md, '## {name}': {missing}"


def test_a_failing_command_is_caught(tmp_path: Path) -> None:
    """A command's exit status is what the check compares; a marked block is not run; a script's error is caught."""
    pristine = tmp_path / "pristine"
    (pristine / "sample_traces").mkdir(parents=True)

    def run(lang: str, code: str, not_run: str | None = None) -> Outcome:
        work = tmp_path / f"work{len(list(tmp_path.iterdir()))}"
        work.mkdir()
        return _run_block(Block("x.md", 1, lang, code, not_run, 0), work, pristine)

    assert run("sh", "true\nfalse\ntrue\n").returncode == 1  # -e: a block stops at its first failure
    assert run("bash", "false | true\n").returncode == 1  # pipefail
    assert run("console", "$ exit 3\n3\n").returncode == 3
    assert run("python", "raise SystemExit(4)\n").returncode == 4
    assert run("sh", "ls sample_traces && traceinsight --version\n").returncode == 0  # in the copy, our command
    assert run("sh", "false\n", not_run="a reason").returncode is None
