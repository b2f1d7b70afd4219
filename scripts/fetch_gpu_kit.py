#!/usr/bin/env python3
"""Fetch what the measurement kit needs on a GPU machine without network, split into carries that each travel
with the repository in one call of at most 64 MiB (docs/gpu.md):

    python3 scripts/fetch_gpu_kit.py                        # CPython 3.12 manylinux x86_64 wheels
    python3 scripts/fetch_gpu_kit.py --python-version 3.11  # for another interpreter (the CPU rehearsal)
    python3 scripts/fetch_gpu_kit.py --sizes                # only measure the carries already fetched

Reads requirements/gpu-kit.txt (its `# --- carry N` sections), downloads each wheel with pip (--only-binary
:all: --no-deps, the target's platform and Python; bitsandbytes ships only a manylinux_2_24 wheel, so every
manylinux_2_N from 2_17 to 2_39 is offered) into wheels/kit-download-<python>/ (git-ignored), then lays out
wheels/kit-carry-N/ with its wheels and a requirements.txt naming them, and checks that each carry plus the
repository (what travels: tracked and untracked-not-ignored files) stays within the limit. Exit 2 when one
does not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIST = REPO / "requirements" / "gpu-kit.txt"
WHEELS = REPO / "wheels"
MIB = 1 << 20
LIMIT_MIB = 64.0
# what the call itself adds beside the files (its own bookkeeping); kept free under the limit
MARGIN_MIB = 1.0
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + ["manylinux2014_x86_64", "any"]
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)\s*$")
SECTION = re.compile(r"^#\s*---\s*carry\s+(?P<number>\d+)\b")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_carries(path: Path = LIST) -> dict[int, list[tuple[str, str]]]:
    """carry number -> [(name, version)] in file order."""
    carries: dict[int, list[tuple[str, str]]] = {}
    current = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        section = SECTION.match(line)
        if section:
            current = int(section["number"])
            carries.setdefault(current, [])
            continue
        if not line or line.startswith("#"):
            continue
        pin = PIN.match(line)
        if pin is None or current is None:
            raise SystemExit(f"{path}:{number}: {line!r} is not a name==version pin inside a `# --- carry N` section")
        carries[current].append((pin["name"], pin["version"]))
    return carries


def travelling_bytes(repo: Path = REPO) -> int:
    """The bytes of the repository that travel with a call: tracked files and untracked files git does not
    ignore (the carries themselves are ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = repo / os.fsdecode(name)
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def wheel_for(folder: Path, name: str, version: str) -> Path | None:
    """The wheel of name==version in `folder` (wheel file names spell the name with underscores)."""
    wanted = normalise(name)
    for path in sorted(folder.glob("*.whl")):
        parts = path.name.split("-")
        if len(parts) >= 2 and normalise(parts[0]) == wanted and parts[1] == version:
            return path
    return None


def download(pins: list[tuple[str, str]], folder: Path, python_version: str) -> None:
    missing = [f"{n}=={v}" for n, v in pins if wheel_for(folder, n, v) is None]
    if not missing:
        return
    folder.mkdir(parents=True, exist_ok=True)
    abi = "cp" + python_version.replace(".", "")
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(folder),
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--abi",
        abi,
        "--abi",
        "none",
        "--abi",
        "abi3",
    ]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    subprocess.run([*argv, *missing], check=True)


def plan_sizes(carries: dict[int, list[int]], repo_bytes: int, limit_mib: float = LIMIT_MIB) -> list[dict]:
    """Per carry: its bytes, with the repository, and whether that stays within the limit less the margin."""
    room = (limit_mib - MARGIN_MIB) * MIB
    rows = []
    for number, sizes in sorted(carries.items()):
        carried = sum(sizes)
        rows.append(
            {
                "carry": number,
                "files": len(sizes),
                "carry_mib": round(carried / MIB, 2),
                "with_repository_mib": round((carried + repo_bytes) / MIB, 2),
                "limit_mib": limit_mib,
                "fits": carried + repo_bytes <= room,
            }
        )
    return rows


def lay_out(carries: dict[int, list[tuple[str, str]]], downloads: Path, dest: Path) -> dict[int, list[Path]]:
    """wheels/kit-carry-N/: the carry's wheels (hard links where the file system allows) and requirements.txt."""
    laid = {}
    for number, pins in carries.items():
        folder = dest / f"kit-carry-{number}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        files = []
        for name, version in pins:
            source = wheel_for(downloads, name, version)
            if source is None:
                raise SystemExit(f"{name}=={version}: no wheel in {downloads} (run without --sizes to fetch it)")
            target = folder / source.name
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
            files.append(target)
        (folder / "requirements.txt").write_text(
            f"# carry {number} of requirements/gpu-kit.txt: install with scripts/gpu-kit.sh {number}\n"
            + "".join(f"{name}=={version}\n" for name, version in pins),
            encoding="utf-8",
        )
        laid[number] = files
    return laid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default="3.12", help="the target interpreter (default %(default)s)")
    parser.add_argument("--dest", type=Path, default=WHEELS, help="where the carries go (default wheels/)")
    parser.add_argument(
        "--limit-mib",
        type=float,
        default=LIMIT_MIB,
        help="what one call carries, the repository included (default %(default)g)",
    )
    parser.add_argument("--sizes", action="store_true", help="fetch nothing: lay out and measure what is here")
    parser.add_argument("--json", action="store_true", help="print the sizes as JSON")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d{1,2}", args.python_version):
        print(f"error: --python-version {args.python_version!r}: give MAJOR.MINOR, e.g. 3.12", file=sys.stderr)
        return 2
    if not 1 <= args.limit_mib <= 4096:
        print(f"error: --limit-mib {args.limit_mib:g}: give a size from 1 to 4096 MiB", file=sys.stderr)
        return 2
    carries = read_carries()
    downloads = args.dest / f"kit-download-cp{args.python_version.replace('.', '')}"
    if not args.sizes:
        download([pin for pins in carries.values() for pin in pins], downloads, args.python_version)
    laid = lay_out(carries, downloads, args.dest)
    repo_bytes = travelling_bytes()
    rows = plan_sizes({n: [p.stat().st_size for p in files] for n, files in laid.items()}, repo_bytes, args.limit_mib)
    if args.json:
        print(
            json.dumps(
                {"python": args.python_version, "repository_mib": round(repo_bytes / MIB, 2), "carries": rows}, indent=2
            )
        )
    else:
        print(f"repository (what travels with each call): {repo_bytes / MIB:.2f} MiB")
        for row in rows:
            print(
                f"{args.dest / ('kit-carry-' + str(row['carry']))}: {row['files']} wheels, {row['carry_mib']:.2f} "
                f"MiB; with the repository {row['with_repository_mib']:.2f} of {row['limit_mib']:g} MiB "
                f"{'(fits)' if row['fits'] else '(TOO LARGE)'}"
            )
    too_large = [row["carry"] for row in rows if not row["fits"]]
    if too_large:
        print(
            f"error: carry {', '.join(map(str, too_large))} does not fit one call (fix: move a package to "
            f"another `# --- carry N` section of {LIST.relative_to(REPO)})",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
