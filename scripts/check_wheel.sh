#!/usr/bin/env bash
# The package as a user would get it from `pip install cauchylin[hf]`:
#   1. copy the checkout's files (tracked and untracked, without the ignored ones) to a temporary
#      folder, so that the build leaves nothing in the checkout;
#   2. `python -m build`: the sdist, then the wheel built from the sdist (so a file missing from
#      the sdist breaks the wheel too); `twine check --strict` on both;
#   3. check the archives: both packages in the wheel at their import paths, no tests, LICENSE
#      and README in both;
#   4. install the wheel into a fresh venv (`--system-site-packages`: torch and transformers are
#      used from this environment, not downloaded again; cauchylin itself must come from the
#      wheel, which the smoke test checks) and run scripts/wheel_smoke.py from outside the
#      checkout.
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

"$PY" - "$wheel" "$sdist" <<'EOF'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(wheel).namelist()
need = ["cauchylin/__init__.py", "cauchylin/nn/__init__.py", "cauchylin/estimators/__init__.py",
        "cauchylin_hf/__init__.py", "cauchylin_hf/app/cli.py", "cauchylin_hf/app/tables.py"]
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
for n in ("LICENSE", "README.md", "pyproject.toml", "adapters/cauchylin_hf/app/cli.py"):
    if not any(m.endswith("/" + n) for m in members):
        problems.append(f"the sdist lacks {n}")
if problems:
    sys.exit("[wheel] " + "\n[wheel] ".join(problems))
print(f"[wheel] archives hold both packages ({len(names)} files in the wheel), LICENSE, README")
EOF

echo "[wheel] installing the wheel into a fresh venv"
"$PY" -m venv --system-site-packages "$work/venv"
venv_py="$work/venv/bin/python"
# --no-deps: the requirements are already installed in this environment (the smoke test checks
# that they satisfy the wheel's metadata); --force-reinstall: never "already satisfied" by an
# editable install of the same version.
"$venv_py" -m pip install -q --no-deps --force-reinstall --disable-pip-version-check "$wheel"
version="$(basename "$wheel" | cut -d- -f2)"
(cd "$work" && PATH="$work/venv/bin:$PATH" OMP_NUM_THREADS=1 \
  "$venv_py" "$root/scripts/wheel_smoke.py" --version "$version")
