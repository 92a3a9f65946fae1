"""Re-create the labelled trace corpus (corpus/manifest.json) at its pinned commits.

    python -m tools.corpus --dest corpus/data [--mirror-root /work/.mirror]

For each manifest entry: keep the file at dest when its sha256 already matches; else read it from a local bare
mirror (<mirror-root>/<owner>+<name>/...) when one is given and holds the commit, else download
https://raw.githubusercontent.com/{repo}/{commit}/{path}. Every file is checked against its sha256 before it is
written. Standard library only, so it runs before the project is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

MANIFEST = Path(__file__).resolve().parent.parent / "corpus" / "manifest.json"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def load_manifest(path: Path = MANIFEST) -> list[dict]:
    return json.loads(path.read_text())["traces"]


def target_name(entry: dict) -> str:
    """<id>.<ext>, keeping a .gz suffix so readers can tell a compressed file."""
    suffix = ".json.gz" if entry["path"].endswith(".gz") else Path(entry["path"]).suffix or ".bin"
    if entry["path"].endswith(".xplane.pb"):
        suffix = ".xplane.pb"
    return entry["id"] + suffix


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_dirs(mirror_root: Path, repo: str) -> list[Path]:
    """Candidate git directories of a fetched mirror (bare, or a checkout's .git)."""
    base = mirror_root / repo.replace("/", "+")
    return [d for d in (base / "repo", base / "repo" / ".git", base) if (d / "objects").is_dir()]


def from_mirror(mirror_root: Path, entry: dict) -> bytes | None:
    for git_dir in git_dirs(mirror_root, entry["repo"]):
        shown = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{entry['commit']}:{entry['path']}"],
            capture_output=True,
            check=False,
        )
        if shown.returncode == 0 and shown.stdout:
            return shown.stdout
    return None


def from_github(entry: dict, timeout: float = 120.0) -> bytes:
    url = RAW_URL.format(repo=entry["repo"], commit=entry["commit"], path=entry["path"])
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - fixed https URL
        return response.read()


def fetch_one(entry: dict, dest: Path, mirror_root: Path | None) -> str:
    """Make dest/<id>.<ext> hold the pinned bytes; return one status word."""
    target = dest / target_name(entry)
    if target.exists() and sha256(target.read_bytes()) == entry["sha256"]:
        return "ok"
    data = from_mirror(mirror_root, entry) if mirror_root else None
    source = "mirror"
    if data is None:
        data, source = from_github(entry), "downloaded"
    if sha256(data) != entry["sha256"]:
        raise ValueError(f"{entry['id']}: sha256 mismatch for {entry['repo']}@{entry['commit'][:10]}:{entry['path']}")
    target.write_bytes(data)
    return source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=Path("corpus/data"))
    parser.add_argument("--mirror-root", type=Path, help="folder of bare git mirrors named owner+name")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    args = parser.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    failures = 0
    for entry in load_manifest(args.manifest):
        try:
            status = fetch_one(entry, args.dest, args.mirror_root)
        except (OSError, ValueError) as error:
            status, failures = f"FAILED ({error})", failures + 1
        print(f"{entry['id']:45s} {entry['bytes']:>9d} B  {entry['repo']}@{entry['commit'][:10]}  {status}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
