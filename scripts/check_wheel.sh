#!/usr/bin/env bash
# The package as a user would get it from `pip install cauchylin[hf]`:
#   1. copy the checkout's files (tracked and untracked, without the ignored ones) to a temporary
#      folder, so that the build leaves nothing in the checkout;
#   2. `python -m build`: the sdist, then the wheel built from the sdist (so a file missing from
#      the sdist breaks the wheel too); `twine check --strict` on both;
#   3. check the archives: both packages in the wheel at their import paths, no tests, LICENSE
#      and README in both;
#   4. install the wheel (--no-deps) into a fresh venv that sees this environment's packages
#      (torch, transformers, ... are used from here, not downloaded again; cauchylin itself must
#      come from the wheel, which the smoke test checks) and run scripts/wheel_smoke.py from
#      outside the checkout.
# "This environment" is $PYTHON's (default python3): the system interpreter, a venv or a conda
# environment alike.
# Needs the dev extra (build, twine). Run: bash scripts/check_wheel.sh   (about a minute)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
root="$(pwd -P)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "[wheel] copying the checkout to $work/src"
mkdir -p "$work/src"
git ls-files -z --cached --others --exclude-standard \
  | (cd "$root" && xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' ) \
  | tar --null -T - -cf - \
  | tar -xf - -C "$work/src"

echo "[wheel] python -m build (sdist, then the wheel from the sdist)"
# --no-isolation: the build backend (setuptools) of this environment, no download.
(cd "$work/src" && "$PY" -m build --no-isolation --outdir "$work/dist" . >"$work/build.log" 2>&1) \
  || { cat "$work/build.log"; echo "[wheel] the build failed" >&2; exit 1; }
wheel="$(ls "$work"/dist/*.whl)"
sdist="$(ls "$work"/dist/*.tar.gz)"
echo "[wheel] built $(basename "$sdist") and $(basename "$wheel")"

"$PY" -m twine check --strict "$work"/dist/*

"$PY" - "$wheel" "$sdist" "$work/src" <<'EOF'
import pathlib, sys, tarfile, zipfile
wheel, sdist, src = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
names = zipfile.ZipFile(wheel).namelist()
need = ["cauchylin/__init__.py", "cauchylin/nn/__init__.py", "cauchylin/estimators/__init__.py",
        "cauchylin_hf/__init__.py", "cauchylin_hf/app/cli.py", "cauchylin_hf/app/parser.py",
        "cauchylin_hf/data/__init__.py", "cauchylin_hf/data/table.py", "cauchylin_lm.py"]
missing = [n for n in need if n not in names]
stray = [n for n in names if n.startswith(("tests/", "adapters/", "benchmarks/", "docs/"))]
licence = [n for n in names if n.endswith(("/LICENSE", "licenses/LICENSE"))]
entry = [n for n in names if n.endswith("entry_points.txt")]
problems = []
if missing: problems.append(f"the wheel lacks {missing}")
if stray: problems.append(f"the wheel holds files outside the packages: {stray[:5]}")
if not licence: problems.append("the wheel has no LICENSE")
if not entry or b"cauchylin-lm" not in zipfile.ZipFile(wheel).read(entry[0]):
    problems.append("the wheel declares no cauchylin-lm console script")
members = tarfile.open(sdist).getnames()
# every package of the checkout is in the wheel (a package left out of pyproject's list builds
# fine, into the sdist and the wheel alike, and fails at import)
for init in sorted([*src.glob("cauchylin/**/__init__.py"), *src.glob("adapters/cauchylin_hf/**/__init__.py")]):
    name = init.relative_to(src).as_posix().removeprefix("adapters/")
    if name not in names:
        problems.append(f"the wheel lacks the package {name.rsplit('/', 1)[0]} ({name})")
for n in ("LICENSE", "README.md", "pyproject.toml", "adapters/cauchylin_hf/app/cli.py"):
    if not any(m.endswith("/" + n) for m in members):
        problems.append(f"the sdist lacks {n}")
if problems:
    sys.exit("[wheel] " + "\n[wheel] ".join(problems))
print(f"[wheel] archives hold both packages ({len(names)} files in the wheel), LICENSE, README")
EOF

echo "[wheel] installing the wheel into a fresh venv"
"$PY" -m venv "$work/venv"
venv_py="$work/venv/bin/python"
# The dependencies: a .pth file in the fresh venv lists the package folders of $PY's environment.
# Not `venv --system-site-packages`: for a venv's python that means its *base* interpreter's
# packages (no torch, no transformers). The folders of a .pth file come after the venv's own
# site-packages on sys.path, and the .pth files inside them are not run, so an editable install
# of this checkout in $PY's environment (an import hook that a .pth file starts) stays out and
# the wheel's cauchylin is the one imported; the smoke test checks both.
venv_site="$("$venv_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
(cd "$work" && "$PY" - "$root" >"$venv_site/_cauchylin_wheel_check_deps.pth") <<'EOF'
import os, sys, sysconfig
root = os.path.realpath(sys.argv[1])
stdlib = {os.path.realpath(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")}
for entry in sys.path:
    path = os.path.realpath(entry) if entry else ""
    if not path or path == os.getcwd() or not os.path.isdir(path):
        continue
    if path in stdlib or os.path.basename(path) == "lib-dynload":  # the standard library
        continue
    inside = path == root or path.startswith(root + os.sep)
    if inside and "site-packages" not in path.split(os.sep):  # the checkout's own folders
        continue
    print(path)
EOF
echo "[wheel] the venv sees the packages of $("$PY" -c 'import sys; print(sys.prefix)'):" \
  "$(tr '\n' ' ' <"$venv_site/_cauchylin_wheel_check_deps.pth")"
# --no-deps: the requirements come from $PY's environment (the smoke test checks that they
# satisfy the wheel's metadata); --force-reinstall: never "already satisfied" by an editable
# install of the same version.
"$venv_py" -m pip install -q --no-deps --force-reinstall --disable-pip-version-check "$wheel"
version="$(basename "$wheel" | cut -d- -f2)"
(cd "$work" && PATH="$work/venv/bin:$PATH" OMP_NUM_THREADS=1 \
  "$venv_py" "$root/scripts/wheel_smoke.py" --version "$version")
