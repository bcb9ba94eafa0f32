#!/usr/bin/env bash
# The GPU check (docs/benchmarks.md, "The GPU check"). On a machine with a CUDA GPU: a fresh
# virtual environment with the newest torch the registry serves (its CUDA build), this checkout
# with the hf and dev extras and, if it installs, liger-kernel (the fused cross-entropy baseline);
# then scripts/gpu_check.py runs the suite's CUDA cases (pytest -m cuda) and the benchmarks in
# float32 and bfloat16, and writes OUT/gpu_check.json and OUT/gpu_check.md.
# Without a CUDA GPU it says so and runs the dry run of its own plumbing (toy sizes, on the CPU,
# with the interpreter at hand), which the test suite runs too.
#
#   bash scripts/gpu_check.sh [OUT] [OPTIONS...]   # OUT defaults to gpu_check/; OPTIONS go to
#                                                  # gpu_check.py (--below-floors, --only, --skip-tests)
# Environment: PYTHON (the interpreter that makes the venv, default python3), GPU_CHECK_VENV
# (where to make it, default a temporary folder), GPU_CHECK_REUSE=1 (no venv: run with PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-gpu_check}"
shift || true
PY="${PYTHON:-python3}"
start=$SECONDS

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "[gpu_check] no CUDA GPU on this machine (nvidia-smi finds none): running the dry run" \
    "of the plumbing instead (toy sizes on the CPU; its numbers mean nothing)"
  exec "$PY" scripts/gpu_check.py --dry-run --out "$OUT" "$@"
fi
nvidia-smi -L

fresh_venv() {
  venv="${GPU_CHECK_VENV:-$(mktemp -d)/venv}"
  echo "[gpu_check] fresh venv in $venv: the newest torch, cauchylin[hf,dev], liger-kernel"
  "$PY" -m venv "$venv" || return 1
  pip_q() { "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@"; }
  # (a machine-wide pip constraint may cap torch below the newest release: lifted for this venv)
  export PIP_CONSTRAINT=/dev/null
  pip_q --upgrade pip || return 1
  pip_q torch || return 1
  pip_q -e ".[hf,dev]" || return 1
  if ! pip_q liger-kernel; then
    echo "[gpu_check] liger-kernel did not install: the fused cross-entropy baseline is skipped"
  fi
  run_py="$venv/bin/python"
}

run_py="$PY"
if [ "${GPU_CHECK_REUSE:-0}" != "1" ] && ! fresh_venv; then
  # A GPU machine without access to the package registry: the interpreter at hand, if it has a
  # CUDA torch and transformers (the checkout itself is put on the path by gpu_check.py).
  echo "[gpu_check] the fresh environment could not be installed (no registry?): trying $PY"
  if ! "$PY" -c "import torch, transformers; assert torch.cuda.is_available()"; then
    echo "[gpu_check] $PY has no CUDA torch with transformers either: give one with PYTHON=..."
    exit 1
  fi
  run_py="$PY"
fi
echo "[gpu_check] environment ready after $((SECONDS - start)) s"
"$run_py" -c "import torch; print('[gpu_check] torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())"
status=0
"$run_py" scripts/gpu_check.py --out "$OUT" "$@" || status=$?
echo "[gpu_check] done in $((SECONDS - start)) s (exit $status)"
exit $status
