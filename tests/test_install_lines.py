"""Every install line in the repository names the distribution, `traceinsight-report`.

Why: `pip install traceinsight` installs another project (HTA 0.6.1, republished under that name in 2026), so a
line that names the command instead of the distribution sends a user to the wrong tool ("does not provide the
extra 'tensorboard'", "traceinsight: command not found").
"""

from __future__ import annotations

import re
import shlex
import subprocess

from tests.conftest import REPO

DISTRIBUTION = "traceinsight-report"
# Files a user reads an install line from: docs, examples, error messages and docstrings, tools, CI.
_TEXT_SUFFIXES = (".md", ".py", ".yml", ".yaml", ".toml", ".txt", ".html", ".cfg", "")
_INSTALL = re.compile(r"pip\s+install\s+(?P<args>[^`\n]*)")
# This project given by where it is rather than by name: a path or a file:// URL of the checkout.
_CHECKOUT = re.compile(r"^(-e)?\.{1,2}(/|\[|$)|^file://|\$GITHUB_WORKSPACE|\$PWD")


def _tracked_text_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [
        name
        for name in listed.splitlines()
        if name.endswith(_TEXT_SUFFIXES)
        and not name.startswith(("sample_traces/", "corpus/"))
        and name != "tests/test_install_lines.py"
    ]


def _install_lines() -> list[tuple[str, int, str]]:
    found = []
    for name in _tracked_text_files():
        try:
            text = (REPO / name).read_text()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found.extend((f"{name}:{number}", number, m.group("args")) for m in _INSTALL.finditer(line))
    return found


def _requirements(args: str) -> list[str]:
    """The requirement words of one install command (options dropped, comments and shell joins cut)."""
    args = re.split(r"\s#|&&|;|\|\|", args)[0]
    try:
        words = shlex.split(args)
    except ValueError:  # a quote closed on a later line of a docstring
        words = args.replace("'", " ").replace('"', " ").split()
    return [w for w in words if not w.startswith("-") or w.startswith("-e.")]


def test_the_project_is_named_traceinsight_report():
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^name = "(.*)"$', pyproject, re.M).group(1) == DISTRIBUTION
    assert 'traceinsight = "traceinsight.cli:main"' in pyproject  # the command stays


def test_every_install_line_names_the_distribution():
    lines = _install_lines()
    assert len(lines) >= 5  # README install, tests, TensorBoard; docs/cli.md's Dask; the CI recipe; the Dask error
    ours = 0
    for where, _, args in lines:
        for word in _requirements(args):
            project = re.split(r"[\[<>=!~ @;]", word, maxsplit=1)[0]
            assert project != "traceinsight", f"{where}: installs 'traceinsight', another project on PyPI: {args!r}"
            if project == DISTRIBUTION or _CHECKOUT.search(word):
                ours += 1
                assert DISTRIBUTION in args or "traceinsight-report" in where, f"{where}: {args!r}"
    assert ours >= 5


def test_the_checker_catches_the_old_lines():
    """The lines this project used to print, which installed HTA, are caught."""
    for old in ("'traceinsight[tensorboard]'", "-r requirements.txt traceinsight", "'traceinsight[dask]'"):
        projects = [re.split(r"[\[<>=!~ @;]", w, maxsplit=1)[0] for w in _requirements(old)]
        assert "traceinsight" in projects


def test_the_readme_says_the_other_project_exists():
    readme = (REPO / "README.md").read_text()
    assert re.search(r"`pip install\s+traceinsight`\s+installs a different project", readme)
