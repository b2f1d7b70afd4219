#!/usr/bin/env python3
"""Lay out the one carry the measurement kit needs on a GPU machine without network (docs/gpu.md):

    python3 scripts/fetch_gpu_kit.py                  # wheels/kit-carry/ for CPython 3.12, manylinux x86_64
    python3 scripts/fetch_gpu_kit.py --sizes          # fetch nothing: lay out and measure what is downloaded
    python3 scripts/fetch_gpu_kit.py --python-version 3.11 --other-python   # another interpreter (rehearsal)

Reads the `# --- carried` section of requirements/gpu-kit.txt (exactly what that machine lacks, at
requirements/gpu.lock's versions), downloads each wheel with pip (--only-binary :all: --no-deps, the target's
platform and Python) into wheels/kit-download-cpXY/ (git-ignored), then writes wheels/kit-carry/: each wheel
trimmed to what the kit imports (Unsloth without its studio/ and unsloth_cli/; bitsandbytes with its CUDA 13 and
CPU libraries only), and a requirements.txt naming them. It prints the carry's size, and with the repository
(what travels: tracked and untracked-not-ignored files) against the call's limit; exit 2 when it does not fit.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIST = REPO / "requirements" / "gpu-kit.txt"
WHEELS = REPO / "wheels"
CARRY = "kit-carry"
MIB = 1 << 20
LIMIT_MIB = 64.0
TARGET_MIB = 24.0  # the carry with the repository: what one call should cost, well inside the limit
MARGIN_MIB = 1.0  # what the call itself adds beside the files (its own bookkeeping)
TARGET_PYTHON = "3.12"  # the GPU machine's interpreter
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + ["manylinux2014_x86_64", "any"]
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)\s*$")
NAME = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*$")
SECTION = re.compile(r"^#\s*---\s*(?P<section>carried|on the machine|left out)\b")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_list(path: Path = LIST) -> dict[str, list]:
    """{"carried": [(name, version)], "on the machine": [name], "left out": [name]} in file order."""
    sections: dict[str, list] = {"carried": [], "on the machine": [], "left out": []}
    current = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        section = SECTION.match(line)
        if section:
            current = section["section"]
            continue
        if not line or line.startswith("#"):
            continue
        if current == "carried":
            pin = PIN.match(line)
            if pin:
                sections[current].append((pin["name"], pin["version"]))
                continue
        elif current is not None and NAME.match(line):
            sections[current].append(line)
            continue
        raise SystemExit(
            f"{path}:{number}: {line!r} is not a name==version pin under `# --- carried`, nor a name under "
            "`# --- on the machine` or `# --- left out`"
        )
    return sections


def keep_member(package: str, member: str, cuda: str) -> bool:
    """Whether a file of `package`'s wheel travels: Unsloth's studio and command line, and bitsandbytes'
    libraries for other CUDA versions, ROCm and XPU, never load on the kit's path."""
    package = normalise(package)
    if package == "unsloth":
        return not member.startswith(("studio/", "unsloth_cli/"))
    if package == "bitsandbytes":
        library = re.match(r"bitsandbytes/libbitsandbytes_([a-z0-9]+)\.(so|dll|dylib)$", member)
        if library:
            return library.group(1) in (f"cuda{cuda}", "cpu")
    return True


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def trim_wheel(source: Path, target: Path, package: str, cuda: str) -> tuple[int, list[str]]:
    """Copy the wheel `source` to `target` without the files keep_member refuses, its RECORD rewritten to list
    what is left; (bytes left out, names left out). Unchanged wheels are linked or copied whole."""
    with zipfile.ZipFile(source) as wheel:
        dropped = [i for i in wheel.infolist() if not keep_member(package, i.filename, cuda)]
        if not dropped:
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
            return 0, []
        gone = {i.filename for i in dropped}
        staging = target.with_name(target.name + ".writing")
        with zipfile.ZipFile(staging, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for info in wheel.infolist():
                if info.filename in gone:
                    continue
                data = wheel.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    rows = [r for r in data.decode("utf-8").splitlines() if r.split(",")[0] not in gone]
                    data = ("\n".join(rows) + "\n").encode("utf-8")
                out.writestr(info, data)
        staging.replace(target)
    return sum(i.compress_size for i in dropped), sorted(gone)


def travelling_bytes(repo: Path = REPO) -> int:
    """The bytes of the repository that travel with a call: tracked files and untracked files git does not
    ignore (the carry itself is ignored)."""
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
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    argv += ["--dest", str(folder), "--python-version", python_version, "--implementation", "cp"]
    argv += ["--abi", abi, "--abi", "none", "--abi", "abi3"]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    subprocess.run([*argv, *missing], check=True)


def lay_out(pins: list[tuple[str, str]], downloads: Path, dest: Path, cuda: str) -> dict:
    """dest/kit-carry/: the trimmed wheels and requirements.txt; what was laid out and left out."""
    folder = dest / CARRY
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    wheels, trimmed = [], {}
    for name, version in pins:
        source = wheel_for(downloads, name, version)
        if source is None:
            raise SystemExit(f"{name}=={version}: no wheel in {downloads} (fix: run without --sizes to fetch it)")
        target = folder / source.name
        saved, gone = trim_wheel(source, target, name, cuda)
        wheels.append({"name": name, "version": version, "file": target.name, "bytes": target.stat().st_size})
        if gone:
            folders = sorted({g.split("/")[0] if not g.endswith(".so") else g for g in gone})
            trimmed[name] = {"bytes_left_out": saved, "left_out": folders[:20], "files_left_out": len(gone)}
    (folder / "requirements.txt").write_text(
        "# the one carry of requirements/gpu-kit.txt: install with scripts/gpu-kit.sh\n"
        + "".join(f"{name}=={version}\n" for name, version in pins),
        encoding="utf-8",
    )
    return {"folder": str(folder), "wheels": wheels, "trimmed": trimmed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default=TARGET_PYTHON, help="the target interpreter (default %(default)s)")
    parser.add_argument(
        "--other-python",
        action="store_true",
        help=f"allow a --python-version other than the GPU machine's {TARGET_PYTHON} (a rehearsal elsewhere)",
    )
    parser.add_argument("--cuda", default="130", help="bitsandbytes' CUDA library kept (default %(default)s)")
    parser.add_argument("--dest", type=Path, default=WHEELS, help="where kit-carry/ goes (default wheels/)")
    parser.add_argument(
        "--limit-mib",
        type=float,
        default=LIMIT_MIB,
        help="what one call carries, the repository included (default %(default)g)",
    )
    parser.add_argument("--sizes", action="store_true", help="fetch nothing: lay out and measure what is here")
    parser.add_argument("--json", action="store_true", help="print what was laid out and its sizes as JSON")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d{1,2}", args.python_version):
        print(f"error: --python-version {args.python_version!r}: give MAJOR.MINOR, e.g. 3.12", file=sys.stderr)
        return 2
    if args.python_version != TARGET_PYTHON and not args.other_python:
        print(
            f"error: --python-version {args.python_version}: the GPU machine runs Python {TARGET_PYTHON}, and wheels "
            f"for another interpreter do not install there (fix: leave it out, or add --other-python to lay out "
            "for a rehearsal elsewhere)",
            file=sys.stderr,
        )
        return 2
    if not re.fullmatch(r"\d{3}", args.cuda):
        print(f"error: --cuda {args.cuda!r}: give bitsandbytes' spelling, e.g. 130 for CUDA 13.0", file=sys.stderr)
        return 2
    if not 1 <= args.limit_mib <= 4096:
        print(f"error: --limit-mib {args.limit_mib:g}: give a size from 1 to 4096 MiB", file=sys.stderr)
        return 2
    pins = read_list()["carried"]
    downloads = args.dest / f"kit-download-cp{args.python_version.replace('.', '')}"
    if not args.sizes:
        download(pins, downloads, args.python_version)
    laid = lay_out(pins, downloads, args.dest, args.cuda)
    repo_bytes = travelling_bytes()
    carry_bytes = sum(w["bytes"] for w in laid["wheels"])
    room = (args.limit_mib - MARGIN_MIB) * MIB
    sizes = {
        "python": args.python_version,
        "carry_mib": round(carry_bytes / MIB, 2),
        "repository_mib": round(repo_bytes / MIB, 2),
        "with_repository_mib": round((carry_bytes + repo_bytes) / MIB, 2),
        "limit_mib": args.limit_mib,
        "fits": carry_bytes + repo_bytes <= room,
    }
    if args.json:
        print(json.dumps({**laid, **sizes}, indent=2))
    else:
        for name, cut in laid["trimmed"].items():
            print(
                f"trimmed {name}: {cut['files_left_out']} file(s), {cut['bytes_left_out'] / MIB:.1f} MiB left out "
                f"({', '.join(cut['left_out'][:6])})"
            )
        print(
            f"{laid['folder']}: {len(laid['wheels'])} wheels, {sizes['carry_mib']:.2f} MiB; with the repository "
            f"({sizes['repository_mib']:.2f} MiB) {sizes['with_repository_mib']:.2f} of {args.limit_mib:g} MiB "
            f"{'(fits)' if sizes['fits'] else '(TOO LARGE)'}"
        )
    if not sizes["fits"]:
        print(
            f"error: the carry does not fit one call (fix: leave out what the kit does not import, in "
            f"{LIST.relative_to(REPO)} or keep_member)",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
