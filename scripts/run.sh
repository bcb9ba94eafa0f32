#!/usr/bin/env bash
# One entry point for the README's two commands:
#   bash scripts/run.sh demo   -> installs what the demo needs (the hf extra), runs the main job
#   bash scripts/run.sh test   -> installs the hf, dev and docs extras, runs lint, the type check,
#                                 the test suite, the numerics again on other CPU kernels, the wheel
#                                 check, the docs build, then the floor, latest and newest-torch
#                                 environments (scripts/compat.py); prints the wall time of each part
# Options right after the command: --dry-run (print what would run, run nothing) and, for test,
# --skip PART[,PART...] (the parts are listed by `bash scripts/run.sh --help`).
# Both work with the system interpreter, in an activated venv, or with PYTHON=/path/to/python.
# Torch: an installed torch (CPU or CUDA) is used as it is; without one, torch==2.13.0 is installed
# (the CPU build on machines that carry it). GPU users install their CUDA torch first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
root="$(pwd -P)"
export NO_MKDOCS_2_WARNING=1

PARTS="setup ruff mypy pytest numerics wheel docs compat"

usage() {
  cat <<EOF
usage: bash scripts/run.sh demo [--dry-run] [demo options...]
       bash scripts/run.sh test [--dry-run] [--skip PART[,PART...]] [pytest arguments...]

demo  installs what is missing (torch, then this checkout with the hf extra) and runs the main
      job: cauchylin-lm demo (its options: python -m cauchylin_hf.app.cli demo --help).
test  what CI runs; its parts, in order (the names --skip takes):
        setup     install what is missing (torch, then this checkout with the hf, dev, docs extras)
        ruff      ruff check and ruff format --check
        mypy      the type check ([tool.mypy] in pyproject.toml)
        pytest    the test suite (extra arguments go to pytest)
        numerics  tests/cauchylin again under other CPU kernels (MKL, ATen)
        wheel     scripts/check_wheel.sh: the sdist and wheel, installed into a fresh venv
        docs      mkdocs build --strict
        compat    scripts/compat.py: the floor, latest and newest-torch environments
                  (also skipped when pytest arguments are given, or with CAUCHYLIN_COMPAT=0)
--dry-run  print the parts and their commands, run nothing
EOF
}

dry=0
skip=","
# The command, then run.sh's own options (what follows goes to the demo or to pytest).
cmd="${1:-}"
shift || true
while [ "$#" -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --skip|--skip=*)
      if [ "$cmd" != "test" ]; then
        echo "run.sh: --skip is an option of test" >&2
        exit 2
      fi
      if [ "$1" = "--skip" ]; then
        if [ "$#" -lt 2 ]; then
          echo "run.sh: --skip needs a list of parts: $PARTS" >&2
          exit 2
        fi
        list="$2"
        shift 2
      else
        list="${1#--skip=}"
        shift
      fi
      for name in ${list//,/ }; do
        case " $PARTS " in
          *" $name "*) skip="$skip$name," ;;
          *) echo "run.sh: unknown part '$name' for --skip; the parts: $PARTS" >&2; exit 2 ;;
        esac
      done
      ;;
    *) break ;;
  esac
done
skipped() { case "$skip" in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# A command, or with --dry-run its words as a shell would read them.
x() {
  if [ "$dry" = "1" ]; then
    printf '   '
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# A new temporary folder (with --dry-run only its pattern: nothing is created).
fresh_dir() {
  if [ "$dry" = "1" ]; then echo "${TMPDIR:-/tmp}/tmp.XXXXXXXXXX"; else mktemp -d; fi
}

# pip of $PY; a venv made without pip (uv venv) gets it from the standard library's ensurepip.
pip_install() {
  if [ "$dry" = "0" ] && ! "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m ensurepip --upgrade >/dev/null
  fi
  x "$PY" -m pip install -q "$@"
}

# setup EXTRA...: torch if it is missing, then this checkout (editable) with those extras.
setup() {
  local extras
  extras="$(IFS=,; echo "$*")"
  if [ "$dry" = "1" ]; then
    echo "    (when torch is missing)"
    pip_install "torch==2.13.0"
    echo "    (when cauchylin is not this checkout's editable install, or a requirement of the" \
      "extras $* is not met; always with CAUCHYLIN_REINSTALL=1)"
    pip_install -e ".[$extras]"
    return
  fi
  if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] no torch found: installing torch==2.13.0"
    pip_install "torch==2.13.0"
  fi
  # Reinstall when cauchylin or cauchylin_hf is not this checkout's editable install (the
  # check runs from outside the checkout, so the current folder cannot answer for them), when
  # the installed metadata is not this pyproject.toml's, or when a requirement of the extras
  # is missing or too old; compat.py check-installed says which.
  if ! (cd / && "$PY" "$root/scripts/compat.py" check-installed "$@") \
    || [ "${CAUCHYLIN_REINSTALL:-0}" = "1" ]; then
    echo "[setup] installing cauchylin with the extras $* (editable)"
    pip_install -e ".[$extras]"
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

# step NAME TITLE: whether part NAME runs; announces it (timed), or says that it is skipped.
step() {
  if skipped "$1"; then
    echo "== $2: skipped (--skip $1)"
    return 1
  fi
  if [ "$dry" = "1" ]; then
    echo "== $2 [$1]"
  else
    part "$2"
  fi
}

numerics() {
  # The numerics once more with other CPU kernels: results must not hang on one kernel's
  # rounding (MKL picks AVX-512, AVX2 or SSE code paths by CPU; ATen its own vector width).
  local mkl_alt=$1 inductor_cache preload=""
  # Its own inductor cache: torch's cache does not key on ATEN_CPU_CAPABILITY, and a loop
  # compiled with vector code above fails to rebuild without the vector headers here.
  inductor_cache="$(fresh_dir)"
  # On AMD CPUs MKL ignores MKL_ENABLE_INSTRUCTIONS unless it believes it runs on Intel: a
  # one-line preloaded library answers its vendor query, so the setting takes effect (an
  # SSE4.2 sgemm then runs ~2.5x slower, which is how we checked). Without gcc, say so.
  if [ "$dry" = "0" ] && grep -qs AuthenticAMD /proc/cpuinfo; then
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
  x env LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}" \
    MKL_ENABLE_INSTRUCTIONS="$mkl_alt" ATEN_CPU_CAPABILITY=default CI="${CI:-true}" \
    TORCHINDUCTOR_CACHE_DIR="$inductor_cache" \
    "$PY" -m pytest -n 2 --dist loadfile -q tests/cauchylin
  if [ "$dry" = "0" ]; then rm -rf "$inductor_cache"; fi
}

case "$cmd" in
  demo)
    # Only what the demo imports: the hf extra (transformers, tokenizers, accelerate, peft,
    # matplotlib, ...), not the test and docs tooling.
    setup hf
    if [ "$dry" = "1" ]; then
      x "$PY" -m cauchylin_hf.app.cli demo "$@"
    elif "$PY" -c "import cauchylin_hf.app.cli" >/dev/null 2>&1; then
      exec "$PY" -m cauchylin_hf.app.cli demo "$@"
    else
      exec "$PY" examples/algebra_tour.py "$@"
    fi
    ;;
  test)
    if [ "$dry" = "0" ]; then
      trap report_times EXIT
    fi
    if step setup "setup"; then setup hf dev docs; fi
    if step ruff "ruff"; then
      x "$PY" -m ruff check .
      x "$PY" -m ruff format --check .
    fi
    if step mypy "mypy"; then
      x "$PY" -m mypy # files and settings: [tool.mypy] in pyproject.toml
    fi
    if step pytest "pytest"; then
      x env CI="${CI:-true}" "$PY" -m pytest -n 2 --dist loadfile -q "$@"
    fi
    if grep -qs avx512f /proc/cpuinfo; then mkl_alt=AVX2; else mkl_alt=SSE4_2; fi
    if step numerics \
      "pytest tests/cauchylin with MKL_ENABLE_INSTRUCTIONS=$mkl_alt ATEN_CPU_CAPABILITY=default"; then
      numerics "$mkl_alt"
    fi
    # The package as users get it: build the sdist and the wheel, twine check, install the wheel
    # into a fresh venv and run a smoke test there (about a minute).
    if step wheel "wheel: build, twine check, install into a fresh venv, smoke test"; then
      x env PYTHON="$PY" bash scripts/check_wheel.sh
    fi
    # No -q: it would hide the warnings that --strict turns into a failure.
    if step docs "mkdocs build --strict"; then
      x "$PY" -m mkdocs build --strict -d "$(fresh_dir)/site"
    fi
    # The declared dependency range: a fresh venv at the floors of every dependency, one at the
    # latest releases (both with this interpreter's torch build) and one with the newest torch the
    # registry serves (a CUDA build, several GB, kept in uv's cache), each running mypy, the core
    # and adapter tests and the quick demo (scripts/compat.py; about half an hour on 2 cores).
    # Skipped when pytest arguments narrow the run, or with CAUCHYLIN_COMPAT=0.
    if [ "$#" -gt 0 ] || [ "${CAUCHYLIN_COMPAT:-1}" = "0" ]; then
      echo "== compat: skipped (pytest arguments given or CAUCHYLIN_COMPAT=0); run it alone" \
        "with: $PY scripts/compat.py"
    elif step compat "compat: the floor, latest and newest-torch environments"; then
      x "$PY" scripts/compat.py
    fi
    ;;
  -h | --help | help)
    usage
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac
