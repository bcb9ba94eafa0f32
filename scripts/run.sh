#!/usr/bin/env bash
# One entry point for the README's two commands:
#   bash scripts/run.sh demo   -> installs what is missing, runs the main job
#   bash scripts/run.sh test   -> installs what is missing, runs lint, the type check, the test suite
#                                 (numerics twice, on two CPU kernel settings) and the docs build
# Torch: an installed torch (CPU or CUDA) is used as it is; without one, torch==2.13.0 is installed
# (the CPU build on machines that carry it). GPU users install their CUDA torch first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export NO_MKDOCS_2_WARNING=1

setup() {
  if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] no torch found: installing torch==2.13.0"
    "$PY" -m pip install -q "torch==2.13.0"
  fi
  # Reinstall when anything is missing or when the installed packages belong to another checkout.
  here="$(pwd -P)"
  if ! "$PY" -c "
import os, sys, cauchylin, cauchylin_hf, pytest, hypothesis, mkdocs, transformers, peft, mypy, build, twine
for m in (cauchylin, cauchylin_hf):
    if not os.path.realpath(m.__file__).startswith(sys.argv[1] + os.sep):
        sys.exit(1)
" "$here" >/dev/null 2>&1 || [ "${CAUCHYLIN_REINSTALL:-0}" = "1" ]; then
    echo "[setup] installing cauchylin with the hf, dev and docs extras (editable)"
    "$PY" -m pip install -q -e ".[hf,dev,docs]"
  fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
  demo)
    setup
    if "$PY" -c "import cauchylin_hf.app.cli" >/dev/null 2>&1; then
      exec "$PY" -m cauchylin_hf.app.cli demo "$@"
    else
      exec "$PY" examples/algebra_tour.py "$@"
    fi
    ;;
  test)
    setup
    echo "== ruff"
    "$PY" -m ruff check .
    "$PY" -m ruff format --check .
    echo "== mypy"
    "$PY" -m mypy  # files and settings: [tool.mypy] in pyproject.toml
    echo "== pytest"
    CI="${CI:-true}" "$PY" -m pytest -n 2 --dist loadfile -q "$@"
    # The numerics once more with other CPU kernels: results must not hang on one kernel's
    # rounding (MKL picks AVX-512, AVX2 or SSE code paths by CPU; ATen its own vector width).
    if grep -qs avx512f /proc/cpuinfo; then mkl_alt=AVX2; else mkl_alt=SSE4_2; fi
    echo "== pytest tests/cauchylin with MKL_ENABLE_INSTRUCTIONS=$mkl_alt ATEN_CPU_CAPABILITY=default"
    # Its own inductor cache: torch's cache does not key on ATEN_CPU_CAPABILITY, and a loop
    # compiled with vector code above fails to rebuild without the vector headers here.
    inductor_cache="$(mktemp -d)"
    # On AMD CPUs MKL ignores MKL_ENABLE_INSTRUCTIONS unless it believes it runs on Intel: a
    # one-line preloaded library answers its vendor query, so the setting takes effect (an
    # SSE4.2 sgemm then runs ~2.5x slower, which is how we checked). Without gcc, say so.
    preload=""
    if grep -qs AuthenticAMD /proc/cpuinfo; then
      if command -v gcc >/dev/null 2>&1; then
        echo 'int mkl_serv_intel_cpu_true(void){return 1;}' > "$inductor_cache/mkl_vendor.c"
        if gcc -shared -fPIC -o "$inductor_cache/mkl_vendor.so" "$inductor_cache/mkl_vendor.c"; then
          preload="$inductor_cache/mkl_vendor.so"
        else
          echo "[note] could not build the MKL vendor shim: MKL may ignore MKL_ENABLE_INSTRUCTIONS"
        fi
      else
        echo "[note] AMD CPU without gcc: MKL will ignore MKL_ENABLE_INSTRUCTIONS in this run"
      fi
    fi
    LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}" \
      MKL_ENABLE_INSTRUCTIONS="$mkl_alt" ATEN_CPU_CAPABILITY=default CI="${CI:-true}" \
      TORCHINDUCTOR_CACHE_DIR="$inductor_cache" \
      "$PY" -m pytest -n 2 --dist loadfile -q tests/cauchylin
    rm -rf "$inductor_cache"
    # The package as users get it: build the sdist and the wheel, twine check, install the wheel
    # into a fresh venv and run a smoke test there (about a minute).
    echo "== wheel: build, twine check, install into a fresh venv, smoke test"
    PYTHON="$PY" bash scripts/check_wheel.sh
    if [ -f mkdocs.yml ]; then
      # No -q: it would hide the warnings that --strict turns into a failure.
      echo "== mkdocs build --strict"
      "$PY" -m mkdocs build --strict -d "$(mktemp -d)/site"
    fi
    ;;
  *)
    echo "usage: bash scripts/run.sh {demo|test} [args...]" >&2
    exit 2
    ;;
esac
