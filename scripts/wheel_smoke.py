"""Smoke test of an installed cauchylin wheel (run by scripts/check_wheel.sh inside a fresh venv).

Checks, in this order, and exits non-zero at the first failure:

1. ``cauchylin`` and ``cauchylin_hf`` import from this venv's site-packages, from the files the
   wheel installed (its RECORD), whose metadata is the one found first (not a checkout, not an
   editable install in the environment whose packages the venv borrows), at the wheel's version;
2. the wheel's declared requirements (with the ``hf`` extra) are installed at versions that
   satisfy them;
3. a ``CauchyVector`` round trip: a linear map's exact marginals against the closed form
   ``loc = W loc_U + b``, ``scale = |W| scale_U``, and ``P(S > c)`` against
   ``1/2 + atan((loc - c) / scale) / pi``;
4. ``cauchylin-lm --help`` (the console script of this environment) lists every command;
5. ``cauchylin-lm train --from-config qwen2-tiny`` for 20 steps on a small CSV table, then
   ``cauchylin-lm predict`` on it: finite medians inside their intervals.

Usage: ``python scripts/wheel_smoke.py --version 0.1.0.dev0`` (from a folder outside the
checkout, so that the checkout cannot shadow the installed packages).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from importlib import metadata
from pathlib import Path


def step(name: str) -> None:
    print(f"[wheel] {name}", flush=True)


def check_installed(version: str) -> None:
    import cauchylin_hf

    import cauchylin

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    # The distribution metadata found first must be the wheel's, in this venv (not an editable
    # install of the checkout in the environment whose packages this venv borrows), and the
    # imported modules must be files that the wheel's RECORD lists.
    dist = metadata.distribution("cauchylin")
    where = Path(str(dist.locate_file(""))).resolve()
    if where != site:
        sys.exit(f"the cauchylin metadata found first is in {where}, not in this venv's {site}")
    recorded = {Path(str(dist.locate_file(f))).resolve() for f in dist.files or []}
    for module in (cauchylin, cauchylin_hf):
        where = Path(module.__file__ or "").resolve()
        if site not in where.parents or where not in recorded:
            sys.exit(f"{module.__name__} comes from {where}, not from the wheel in {site}")
    if cauchylin.__version__ != version or dist.version != version:
        sys.exit(
            f"cauchylin.__version__ is {cauchylin.__version__} and its metadata says "
            f"{dist.version}; the wheel is {version}"
        )
    import torch
    import transformers

    borrowed = ", ".join(
        f"{m.__name__} {m.__version__} from {Path(m.__file__ or '').resolve().parents[1]}"
        for m in (torch, transformers)
    )
    step(f"cauchylin {cauchylin.__version__} and cauchylin_hf import from the wheel in {site}")
    step(f"dependencies from the running environment: {borrowed}")


def check_requirements() -> None:
    from packaging.requirements import Requirement

    missing = []
    for text in metadata.requires("cauchylin") or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": "hf"}):
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(f"{req} (not installed)")
            continue
        if not req.specifier.contains(have, prereleases=True):
            missing.append(f"{req} (installed {have})")
    if missing:
        sys.exit("requirements of cauchylin[hf] not met: " + "; ".join(missing))
    step("the requirements of cauchylin[hf] are met")


def check_algebra() -> None:
    import torch

    from cauchylin import CauchyVector

    loc_u = torch.tensor([0.5, -1.0, 2.0])
    scale_u = torch.tensor([1.0, 0.5, 2.0])
    W = torch.tensor([[1.0, -1.0, 0.0], [0.5, 0.5, 0.5]])
    b = torch.tensor([0.0, 1.0])
    s = CauchyVector(loc_u, scale_u).linear(W, b)
    loc, scale = W @ loc_u + b, W.abs() @ scale_u
    if not (torch.allclose(s.loc, loc) and torch.allclose(s.scale, scale)):
        sys.exit(f"linear map: got {s.loc}, {s.scale}; closed form {loc}, {scale}")
    p = s.ovr_prob(threshold=0.25)
    ref = 0.5 + torch.atan((loc - 0.25) / scale) / math.pi
    if not torch.allclose(p, ref, atol=1e-6):
        sys.exit(f"ovr_prob {p} differs from 1/2 + atan(...)/pi = {ref}")
    step("CauchyVector: exact marginals and OvR probabilities match the closed form")


def run(cli: str, *args: str) -> str:
    done = subprocess.run([cli, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(['cauchylin-lm', *args])} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def check_cli(workdir: Path) -> None:
    cli = shutil.which("cauchylin-lm")
    here = Path(sys.executable).parent
    if cli is None or Path(cli).parent.resolve() != here.resolve():
        sys.exit(f"cauchylin-lm is {cli}, not this venv's {here}/cauchylin-lm")
    out = run(cli, "--help")
    commands = ("demo", "train", "evaluate", "predict", "generate", "verify")
    if not all(c in out for c in commands):
        sys.exit(f"cauchylin-lm --help does not list every command:\n{out}")
    step("cauchylin-lm --help lists " + ", ".join(commands))

    table = workdir / "table.csv"
    r = random.Random(0)
    with table.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x", "s1", "target"])
        for _ in range(40):
            x = r.randint(1, 50)
            w.writerow([x, f"{r.uniform(-1, 1):.2f}", 2 * x])
    start = time.perf_counter()
    model = workdir / "model"
    run(
        cli,
        "train",
        "--from-config",
        "qwen2-tiny",
        "--data",
        str(table),
        "--output-dir",
        str(model),
        "--max-steps",
        "20",
        "--batch-size",
        "8",
        "--threads",
        "1",
        "--no-progress",
    )
    lines = run(cli, "predict", str(model), "--data", str(table), "--json", "--threads", "1")
    rows = [json.loads(line) for line in lines.splitlines()]
    if len(rows) != 40:
        sys.exit(f"predict gave {len(rows)} rows for 40 table rows")
    for row in rows:
        lo, hi = row["interval_50"]
        if not (math.isfinite(row["median"]) and lo <= row["median"] <= hi):
            sys.exit(f"predict gave a bad row: {row}")
    step(
        f"cauchylin-lm train --from-config qwen2-tiny (20 steps) and predict on a CSV: "
        f"{len(rows)} predictions in {time.perf_counter() - start:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True, help="the version of the installed wheel")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    check_installed(args.version)
    check_requirements()
    check_algebra()
    with tempfile.TemporaryDirectory() as tmp:
        check_cli(Path(tmp))
    step("smoke test passed")


if __name__ == "__main__":
    main()
