#!/usr/bin/env bash
# One entry point for the README's two commands:
#   bash scripts/run.sh demo   -> installs what is missing, runs the main job
#   bash scripts/run.sh test   -> installs what is missing, runs lint, the type check, the test suite
#                                 (numerics twice, on two CPU kernel settings), the wheel check,
#                                 the docs build, then the floor, latest and newest-torch environments
#                                 (scripts/compat.py); prints the wall time of each part
# Both work with the system interpreter, in an activated venv, or with PYTHON=/path/to/python.
# Torch: an installed torch (CPU or CUDA) is used as it is; without one, torch==2.13.0 is installed
# (the CPU build on machines that carry it). GPU users install their CUDA torch first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
root="$(pwd -P)"
export NO_MKDOCS_2_WARNING=1

# pip of $PY; a venv made without pip (uv venv) gets it from the standard library's ensurepip.
pip_install() {
  if ! "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m ensurepip --upgrade >/dev/null
  fi
  "$PY" -m pip install -q "$@"
}

setup() {
  if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] no torch found: installing torch==2.13.0"
    pip_install "torch==2.13.0"
  fi
  # Reinstall when cauchylin or cauchylin_hf is not this checkout's editable install (the
  # check runs from outside the checkout, so the current folder cannot answer for them), when
  # the installed metadata is not this pyproject.toml's, or when a requirement of the hf, dev
  # and docs extras is missing or too old; compat.py check-installed says which.
  if ! (cd / && "$PY" "$root/scripts/compat.py" check-installed hf dev docs) \
    || [ "${CAUCHYLIN_REINSTALL:-0}" = "1" ]; then
    echo "[setup] installing cauchylin with the hf, dev and docs extras (editable)"
    pip_install -e ".[hf,dev,docs]"
  fi
}

# The wall time of each part of a command, printed at its end (also when a part fails).
part_names=()
part_times=()
part_start=$SECONDS
part() {
  part_close
  echo "== $1"
  part_names+=("$1")
  part_start=$SECONDS
}
part_close() {
  if [ "${#part_names[@]}" -gt "${#part_times[@]}" ]; then
    part_times+=("$((SECONDS - part_start))")
  fi
}
report_times() {
  local status=$?
  part_close
  if [ "${#part_times[@]}" -gt 0 ]; then
    echo "== wall time of each part (exit status $status)"
    for i in "${!part_times[@]}"; do
      printf '%6d s  %s\n' "${part_times[$i]}" "${part_names[$i]}"
    done
    printf '%6d s  in all\n' "$SECONDS"
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
    trap report_times EXIT
    part "setup"
    setup
    part "ruff"
    "$PY" -m ruff check .
    "$PY" -m ruff format --check .
    part "mypy"
    "$PY" -m mypy  # files and settings: [tool.mypy] in pyproject.toml
    part "pytest"
    CI="${CI:-true}" "$PY" -m pytest -n 2 --dist loadfile -q "$@"
    # The numerics once more with other CPU kernels: results must not hang on one kernel's
    # rounding (MKL picks AVX-512, AVX2 or SSE code paths by CPU; ATen its own vector width).
    if grep -qs avx512f /proc/cpuinfo; then mkl_alt=AVX2; else mkl_alt=SSE4_2; fi
    part "pytest tests/cauchylin with MKL_ENABLE_INSTRUCTIONS=$mkl_alt ATEN_CPU_CAPABILITY=default"
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
    part "wheel: build, twine check, install into a fresh venv, smoke test"
    PYTHON="$PY" bash scripts/check_wheel.sh
    if [ -f mkdocs.yml ]; then
      # No -q: it would hide the warnings that --strict turns into a failure.
      part "mkdocs build --strict"
      "$PY" -m mkdocs build --strict -d "$(mktemp -d)/site"
    fi
    # The declared dependency range: a fresh venv at the floors of every dependency, one at the
    # latest releases (both with this interpreter's torch build) and one with the newest torch the
    # registry serves (a CUDA build, several GB, kept in uv's cache), each running mypy, the core
    # and adapter tests and the quick demo (scripts/compat.py; about 20 minutes). Skipped when pytest arguments narrow the run, or
    # with CAUCHYLIN_COMPAT=0.
    if [ "$#" -gt 0 ] || [ "${CAUCHYLIN_COMPAT:-1}" = "0" ]; then
      echo "== compat: skipped (pytest arguments given or CAUCHYLIN_COMPAT=0); run it alone" \
        "with: $PY scripts/compat.py"
    else
      part "compat: the floor, latest and newest-torch environments"
      "$PY" scripts/compat.py
    fi
    ;;
  *)
    echo "usage: bash scripts/run.sh {demo|test} [args...]" >&2
    exit 2
    ;;
esac
