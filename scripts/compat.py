"""The declared dependency range, tested: fresh environments at the floors and at the latest releases.

pyproject.toml declares every dependency as a floor (``name>=X``) without a cap. This script
checks that both ends of that range work:

* ``floor``: every floor of the core requirements and of the ``hf``, ``sklearn`` and ``dev``
  extras installed *together*, exactly (``name==X``, a constraints file generated from
  pyproject.toml); what those packages need in turn resolves to its newest release;
* ``latest``: the newest release of everything but torch;
* ``newest-torch``: the newest release of everything, torch included: the build the registry
  serves by default, which is what ``pip install torch`` gives users (on PyPI a CUDA build, also
  on machines without a GPU, several GB with its CUDA libraries).

Each environment is a fresh virtual environment (made with uv) and the checkout installed
editable, then three steps: ``mypy`` (the type check of the library against that environment's
transformers and torch), ``pytest tests/cauchylin tests/cauchylin_hf`` (the core and adapter
tests) and ``cauchylin-lm demo --quick``. ``floor`` and ``latest`` pin the torch build of the
interpreter that runs this script (default; ``--torch``) and refuse CUDA packages: on the
project's CPU machines that is the local CPU build, installed in seconds. ``newest-torch`` lets
torch resolve freely; uv's cache (``~/.cache/uv``, or ``UV_CACHE_DIR``) keeps its download, so
only the first run on a machine (or the first after a new torch release) downloads it (see
docs/installation.md, "Supported versions").

Commands::

    python scripts/compat.py                    # floor, latest and newest-torch (what
                                                # `run.sh test` runs)
    python scripts/compat.py --env newest-torch # the newest torch the registry serves
    python scripts/compat.py run --env floor --set peft==0.17.0   # one package moved
    python scripts/compat.py bisect accelerate  # the lowest release that passes with the
                                                # other floors (binary search over the releases)
    python scripts/compat.py floors             # the floors, as the constraints file
    python scripts/compat.py check-installed hf dev docs
        # exit 1 when this interpreter's cauchylin is not this checkout's (editable) or its
        # installed packages do not meet pyproject.toml's requirements (run.sh's set-up)

Exit status: 0 when every environment passed, 1 when one failed (the summary says which step),
2 for a usage error. Needs uv (the ``dev`` extra installs it); it reads pip's ``find-links``
setting so that uv finds the same local torch build that ``pip install torch==...`` finds.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the copy of tomli that pip vendors
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
except ModuleNotFoundError:  # a bare interpreter: pip's vendored copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
# The floors table of the docs, which must say what pyproject.toml says (checked by `run`).
DOCS = ROOT / "docs" / "installation.md"
DOCS_TABLE = ("<!-- compat-floors:start -->", "<!-- compat-floors:end -->")
# The extras installed in the compatibility environments, and whose floors the floor env pins.
EXTRAS = ("hf", "sklearn", "dev")
TEST_PATHS = ("tests/cauchylin", "tests/cauchylin_hf")
STEPS = ("mypy", "pytest", "demo")
ENVS = ("floor", "latest", "newest-torch")
# The environment in which torch itself resolves to the newest release (any build).
FREE_TORCH = "newest-torch"
# Printed for each environment besides the declared floors: what they pull in that matters most.
ALSO_SHOWN = ("huggingface-hub", "numpy")


# ------------------------------------------------------------------------------------------
# What pyproject.toml declares


def declared(extras: tuple[str, ...] | None = None) -> list[tuple[str | None, Requirement]]:
    """The requirements of pyproject.toml as (extra or None for the core, requirement)."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    out: list[tuple[str | None, Requirement]] = [
        (None, Requirement(r)) for r in project["dependencies"]
    ]
    optional = project.get("optional-dependencies", {})
    for extra in optional if extras is None else extras:
        if extra not in optional:
            raise SystemExit(f"pyproject.toml has no extra {extra!r}")
        out += [(extra, Requirement(r)) for r in optional[extra]]
    return out


def floors(extras: tuple[str, ...] = EXTRAS) -> dict[str, str]:
    """Canonical name -> the lowest version the requirements allow (``>=`` or ``==``)."""
    out: dict[str, str] = {}
    for _, req in declared(extras):
        low = [s.version for s in req.specifier if s.operator in (">=", "==")]
        if not low:
            raise SystemExit(f"pyproject.toml: {req} declares no floor (>= or ==)")
        name = canonicalize_name(req.name)
        version = max(low, key=Version)
        if name not in out or Version(version) > Version(out[name]):
            out[name] = version
    return out


def ranged(extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """The dependencies declared with a floor (``>=``), as opposed to the pinned tools (``==``)."""
    names = [
        canonicalize_name(req.name)
        for _, req in declared(extras)
        if any(s.operator == ">=" for s in req.specifier)
    ]
    return list(dict.fromkeys(names))


def docs_mismatches() -> list[str]:
    """How the floors table of docs/installation.md differs from pyproject.toml's floors."""
    text = DOCS.read_text(encoding="utf-8")
    start, end = (text.find(mark) for mark in DOCS_TABLE)
    if start < 0 or end < start:
        return [f"{DOCS.relative_to(ROOT)} has no table between {' and '.join(DOCS_TABLE)}"]
    rows = [
        [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        for line in text[start:end].splitlines()
        if line.startswith("|") and not line.startswith("|--") and not line.startswith("|:-")
    ]
    column = rows[0].index("floor") if rows and "floor" in rows[0] else None
    if column is None:
        return [f"{DOCS.relative_to(ROOT)}: the floors table has no 'floor' column"]
    documented = {canonicalize_name(r[0]): r[column] for r in rows[1:] if len(r) > column}
    want = {name: version for name, version in floors().items() if name in ranged()}
    problems = [
        f"{name}: pyproject.toml says >={version}, the docs say {documented.get(name, 'nothing')}"
        for name, version in want.items()
        if documented.get(name) != version
    ]
    problems += [
        f"{name}: in the docs, not a floor in pyproject.toml"
        for name in documented.keys() - want.keys()
    ]
    return problems


# ------------------------------------------------------------------------------------------
# check-installed: run.sh's set-up asks whether to reinstall


def check_installed(extras: tuple[str, ...]) -> list[str]:
    """What is wrong with this interpreter's installation of the checkout (empty: nothing)."""
    problems = []
    for name in ("cauchylin", "cauchylin_hf"):
        try:
            module = __import__(name)
        except Exception as exc:  # any import failure means: reinstall
            problems.append(f"import {name} fails ({type(exc).__name__}: {exc})")
            continue
        where = Path(module.__file__ or "").resolve()
        if ROOT not in where.parents:
            problems.append(f"{name} is imported from {where}, not from this checkout")
    try:
        installed = metadata.requires("cauchylin") or []
    except metadata.PackageNotFoundError:
        return [*problems, "cauchylin is not installed"]
    # The installed metadata must be this pyproject's (a floor raised since the last install).
    want = {_key(req, extra) for extra, req in declared()}
    have = {_key(Requirement(r)) for r in installed}
    if want != have:
        changed = sorted(f"{n}{s}" for n, s, _ in want ^ have)
        problems.append(f"the installed requirements differ from pyproject.toml: {changed[:6]}")
    for extra, req in declared(extras):
        if req.marker is not None and not req.marker.evaluate({"extra": extra or ""}):
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{req} is not installed")
            continue
        if not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req} is not met (installed {version})")
    return problems


def _key(req: Requirement, extra: str | None = None) -> tuple[str, str, str]:
    """A requirement as (name with extras, specifier, the extra it belongs to), comparable."""
    if extra is None and req.marker is not None:
        match = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", str(req.marker))
        extra = match.group(1) if match else None
    name = canonicalize_name(req.name) + (f"[{','.join(sorted(req.extras))}]" if req.extras else "")
    spec = ",".join(sorted(str(s) for s in req.specifier))
    return name, spec, extra or ""


# ------------------------------------------------------------------------------------------
# Building and testing one environment


@dataclass
class Env:
    """One environment to build: a name and the exact versions it pins."""

    name: str
    pins: dict[str, str] = field(default_factory=dict)
    free_torch: bool = False  # torch not pinned: the newest release the registry serves


@dataclass
class Result:
    """What happened to one environment."""

    env: str
    versions: dict[str, str] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)  # the steps that failed
    summary: dict[str, str] = field(default_factory=dict)  # a step's last line of output

    @property
    def passed(self) -> bool:
        return not self.failed


def say(env: str, text: str) -> None:
    print(f"[compat {env}] {text}", flush=True)


def uv_command() -> list[str]:
    """uv: the module of this interpreter (the dev extra), else the one on PATH."""
    try:
        metadata.version("uv")
        return [sys.executable, "-m", "uv"]
    except metadata.PackageNotFoundError:
        found = shutil.which("uv")
        if found:
            return [found]
    raise SystemExit('uv is not installed: pip install uv (or pip install -e ".[dev]")')


def pip_find_links() -> list[str]:
    """The find-links locations pip is configured with (uv does not read pip's configuration)."""
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith("find-links"):
            links += value.strip().strip("'\"").split()
    return list(dict.fromkeys(links))


def torch_pin() -> str:
    """The installed torch build (local version label included, e.g. ``2.13.0+cpu``)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return floors(())["torch"]


def run_step(
    env: str, name: str, cmd: list[str], cwd: Path, environ: dict[str, str], log: Path
) -> tuple[bool, float, str]:
    """Run one step with its output in ``log``; (passed, seconds, its last line of output)."""
    say(env, f"{name}: {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cmd))}")
    start = time.perf_counter()
    with log.open("w") as f:
        code = subprocess.run(
            cmd, cwd=cwd, env=environ, stdout=f, stderr=subprocess.STDOUT
        ).returncode
    seconds = time.perf_counter() - start
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = lines[-1].strip(" =") if lines else ""
    if code != 0:
        print(f"---- {name} failed (exit {code}); its last 150 lines:", flush=True)
        print("\n".join(lines[-150:]), flush=True)
        print(f"---- end of {name}", flush=True)
        say(env, f"{name}: FAIL in {seconds:.0f} s")
    else:
        say(env, f"{name}: pass in {seconds:.0f} s ({last})")
    return code == 0, seconds, last


def build_and_test(
    env: Env,
    workdir: Path,
    torch: str,
    steps: tuple[str, ...],
    pytest_args: list[str],
    workers: str,
) -> Result:
    """Make the venv, install the checkout with ``env``'s pins, run ``steps``."""
    result = Result(env.name)
    home = workdir / env.name
    venv = home / "venv"
    home.mkdir(parents=True)
    python = venv / "bin" / "python"
    constraints = home / "constraints.txt"
    pins = dict(env.pins) if env.free_torch else {"torch": torch, **env.pins}
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
    uv = uv_command()
    # (uv's cache is left on: it keeps the newest-torch environment's multi-GB download)
    environ = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "PYTHONNOUSERSITE": "1"}
    environ.pop("PYTHONPATH", None)
    install = [
        *uv,
        "pip",
        "install",
        "--python",
        str(python),
        "--prerelease",
        "disallow",  # what pip resolves too
        "--constraint",
        str(constraints),
        "--editable",
        f"{ROOT}[{','.join(EXTRAS)}]",
    ]
    for link in pip_find_links():
        install += ["--find-links", link]
    start = time.perf_counter()
    say(env.name, f"uv venv + uv pip install -e .[{','.join(EXTRAS)}] with {len(pins)} pins")
    log = home / "install.log"
    with log.open("w") as f:
        code = subprocess.run(
            [*uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
            env=environ,
            stdout=f,
            stderr=subprocess.STDOUT,
        ).returncode
        if code == 0:
            code = subprocess.run(
                install, env=environ, stdout=f, stderr=subprocess.STDOUT
            ).returncode
    result.times["install"] = time.perf_counter() - start
    if code != 0:
        print(log.read_text(errors="replace")[-6000:], flush=True)
        say(env.name, f"install: FAIL in {result.times['install']:.0f} s")
        result.failed.append("install")
        return result
    result.versions = installed_versions(python)
    say(env.name, f"install: done in {result.times['install']:.0f} s")
    say(env.name, "versions: " + ", ".join(f"{n} {v}" for n, v in result.versions.items()))
    result.versions["torch build"] = torch_build(python)
    say(env.name, f"torch build: {result.versions['torch build']}")
    cuda = [n for n in installed_names(python) if n.startswith("nvidia-")]
    if cuda and not env.free_torch:  # floor, latest: no CUDA libraries on a CPU machine
        say(env.name, f"install: FAIL: CUDA packages were pulled in: {cuda[:4]}")
        result.failed.append("install")
        return result

    run_env = {
        **environ,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "CI": os.environ.get("CI", "true"),
    }
    demo_dir = home / "demo"
    commands = {
        "mypy": ([str(python), "-m", "mypy", "--cache-dir", str(home / "mypy_cache")], ROOT),
        "pytest": (
            [
                str(python),
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "-n",
                workers,
                "--dist",
                "loadfile",
                *pytest_args,
            ],
            ROOT,
        ),
        "demo": (
            [
                str(venv / "bin" / "cauchylin-lm"),
                "demo",
                "--quick",
                "--no-progress",
                "--output-dir",
                str(demo_dir),
            ],
            home,
        ),
    }
    for step in steps:
        cmd, cwd = commands[step]
        ok, seconds, last = run_step(env.name, step, cmd, cwd, run_env, home / f"{step}.log")
        result.times[step] = seconds
        result.summary[step] = last
        if not ok:
            result.failed.append(step)
    return result


def installed_names(python: Path) -> list[str]:
    code = "from importlib import metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return [canonicalize_name(n) for n in out.stdout.split()]


def torch_build(python: Path) -> str:
    """The environment's torch: its version, CUDA build or not, and whether a GPU is usable."""
    code = (
        "import torch\n"
        "cuda = torch.version.cuda\n"
        "kind = f'CUDA {cuda} build' if cuda else 'CPU build'\n"
        "gpu = ', a GPU available' if torch.cuda.is_available() else ', no GPU' if cuda else ''\n"
        "print(f'{torch.__version__} ({kind}{gpu})')\n"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "torch does not import"


def installed_versions(python: Path) -> dict[str, str]:
    code = (
        "import sys\nfrom importlib import metadata as m\n"
        "for n in sys.argv[1:]:\n"
        "    try: print(n, m.version(n))\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    out = subprocess.run(
        [str(python), "-c", code, *ranged(), *ALSO_SHOWN],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


# ------------------------------------------------------------------------------------------
# Commands


def parse_sets(sets: list[str]) -> dict[str, str]:
    out = {}
    for item in sets:
        name, sep, version = item.partition("==")
        if not sep or not version:
            raise SystemExit(f"--set takes NAME==VERSION, not {item!r}")
        out[canonicalize_name(name)] = version
    return out


def make_env(name: str, sets: dict[str, str]) -> Env:
    if name == "floor":
        pins = {n: v for n, v in floors().items() if n != "torch"}
    else:
        pins = {}
    return Env(name, {**pins, **sets}, free_torch=name == FREE_TORCH and "torch" not in sets)


def print_summary(results: list[Result], torch: str, total: float) -> None:
    print(
        f"== compat summary (python {sys.version.split()[0]}, torch {torch} where pinned, "
        f"{total / 60:.1f} min)"
    )
    header = ["env", "result", "install", *STEPS, "total"]
    rows = []
    for r in results:
        result = "pass" if r.passed else f"FAIL ({', '.join(r.failed)})"
        cells = [f"{r.times[s]:.0f} s" if s in r.times else "-" for s in ("install", *STEPS)]
        rows.append([r.env, result, *cells, f"{sum(r.times.values()) / 60:.1f} min"])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for row in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
    for r in results:
        print(f"{r.env}: " + ", ".join(f"{n} {v}" for n, v in r.versions.items()))
        if "pytest" in r.summary:
            print(f"{r.env}: pytest: {r.summary['pytest']}")
    bad = [r.env for r in results if not r.passed]
    print("== compat: " + ("every environment passed" if not bad else "FAILED: " + ", ".join(bad)))


def cmd_run(args: argparse.Namespace) -> int:
    sets = parse_sets(args.set)
    torch = args.torch or torch_pin()
    steps = tuple(args.steps.split(",")) if args.steps else STEPS
    unknown = set(steps) - set(STEPS)
    if unknown:
        raise SystemExit(f"--steps: unknown {sorted(unknown)}; choose from {', '.join(STEPS)}")
    pytest_args = shlex.split(args.pytest)
    # The declared range (no package moved): the docs must state the same floors.
    stale = [] if sets else docs_mismatches()
    if stale:
        print("[compat] the floors table of docs/installation.md is not pyproject.toml's:")
        print("\n".join(f"[compat]   {line}" for line in stale))
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="cauchylin-compat-", dir=args.workdir))
    start = time.perf_counter()
    results = []
    try:
        for name in args.env or list(ENVS):
            env = make_env(name, sets)
            pinned = ", ".join(f"{n}=={v}" for n, v in env.pins.items())
            what = pinned or "the latest releases"
            print(
                f"== compat env {name}: {what}, torch "
                + ("unpinned (the newest release)" if env.free_torch else f"=={torch}"),
                flush=True,
            )
            results.append(build_and_test(env, workdir, torch, steps, pytest_args, args.workers))
    finally:
        if args.keep:
            print(f"[compat] environments kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_summary(results, torch, time.perf_counter() - start)
    return 0 if all(r.passed for r in results) else 1


def releases(name: str) -> list[str]:
    """The releases of ``name`` on the index pip is configured with, oldest first (no pre-releases)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"Available versions:\s*(.+)", done.stdout)
    if not match:
        raise SystemExit(f"pip index versions {name} found nothing:\n{done.stderr}")
    out = []
    for text in match.group(1).split(","):
        try:
            v = Version(text.strip())
        except InvalidVersion:
            continue
        if not v.is_prerelease and not v.is_devrelease:
            out.append(v)
    return [str(v) for v in sorted(set(out))]


def cmd_bisect(args: argparse.Namespace) -> int:
    name = canonicalize_name(args.name)
    low = args.start or floors().get(name)
    if low is None:
        raise SystemExit(f"{name} is not a declared dependency; pass --from VERSION")
    candidates = [v for v in releases(name) if Version(v) >= Version(low)]
    if args.upto:
        candidates = [v for v in candidates if Version(v) <= Version(args.upto)]
    print(f"[bisect] {name}: {len(candidates)} releases from {candidates[0]} to {candidates[-1]}")
    tried: dict[str, bool] = {}

    def passes(version: str) -> bool:
        run_args = argparse.Namespace(
            **{**vars(args), "env": [args.env], "set": [*args.set, f"{name}=={version}"]}
        )
        tried[version] = cmd_run(run_args) == 0
        print(f"[bisect] {name}=={version}: {'pass' if tried[version] else 'FAIL'}", flush=True)
        return tried[version]

    # The newest must pass; then the lowest passing release by binary search (assumes that a
    # release passes when an older one does, which each answer's neighbours can confirm).
    if not passes(candidates[-1]):
        print(f"[bisect] {name}: even {candidates[-1]} fails in the {args.env} environment")
        return 1
    lo, hi = 0, len(candidates) - 1  # candidates[hi] passes
    if passes(candidates[lo]):
        hi = lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if passes(candidates[mid]):
            hi = mid
        else:
            lo = mid
    print(
        "[bisect] tried: "
        + ", ".join(
            f"{v} {'pass' if ok else 'fail'}"
            for v, ok in sorted(tried.items(), key=lambda kv: Version(kv[0]))
        )
    )
    print(f"[bisect] the lowest release of {name} that passes: {candidates[hi]}")
    return 0


def cmd_floors(_: argparse.Namespace) -> int:
    for name, version in floors().items():
        print(f"{name}=={version}")
    return 0


def cmd_check_installed(args: argparse.Namespace) -> int:
    problems = check_installed(tuple(args.extras))
    for p in problems:
        print(f"[setup] {p}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")

    def env_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="NAME==VERSION",
            help="pin a package (repeatable), over the env's own pins",
        )
        p.add_argument(
            "--torch",
            help="the torch version floor and latest pin (default: the installed build, e.g. "
            "2.13.0+cpu); newest-torch takes the newest release unless --set torch==X",
        )
        p.add_argument("--steps", help=f"comma-separated steps to run (default: {','.join(STEPS)})")
        p.add_argument("--workers", default="2", help="pytest-xdist workers (default 2)")
        p.add_argument(
            "--workdir", help="where the environments are made (default: the temp folder)"
        )
        p.add_argument("--keep", action="store_true", help="keep the environments and their logs")
        p.add_argument(
            "--pytest",
            default=" ".join(TEST_PATHS),
            metavar="ARGS",
            help=f"what pytest runs, one string (default: {' '.join(TEST_PATHS)})",
        )

    run = sub.add_parser("run", help="build and test environments (the default command)")
    run.add_argument(
        "--env",
        action="append",
        choices=ENVS,
        help=f"{', '.join(ENVS)} (repeatable; default all three)",
    )
    env_options(run)
    run.set_defaults(func=cmd_run)

    bisect = sub.add_parser("bisect", help="the lowest release of NAME that passes")
    bisect.add_argument("name")
    bisect.add_argument(
        "--env",
        default="floor",
        choices=("floor", "latest"),
        help="the other packages' versions (default: floor)",
    )
    bisect.add_argument(
        "--from", dest="start", help="the lowest release to try (default: the declared floor)"
    )
    bisect.add_argument("--upto", help="the highest release to try (default: the newest)")
    env_options(bisect)
    bisect.set_defaults(func=cmd_bisect)

    sub.add_parser("floors", help="print the floors as constraints").set_defaults(func=cmd_floors)

    check = sub.add_parser(
        "check-installed", help="exit 1 when the installation is not this checkout's"
    )
    check.add_argument("extras", nargs="*", help="the extras that must be installed too")
    check.set_defaults(func=cmd_check_installed)

    argv = sys.argv[1:] if argv is None else argv
    if not argv or (argv[0] not in sub.choices and argv[0] not in ("-h", "--help")):
        argv = ["run", *argv]  # `compat.py --env floor` means `compat.py run --env floor`
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
