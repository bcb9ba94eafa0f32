"""The scripts in ``examples/`` run and print what they claim."""

import ast
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _printed_list(stdout: str, prefix: str) -> list[float]:
    line = next(line for line in stdout.splitlines() if line.startswith(prefix))
    return [float(v) for v in ast.literal_eval(line[line.index("[") : line.rindex("]") + 1])]


def test_algebra_tour():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "algebra_tour.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # The sample median of n = 200k Cauchy draws has standard deviation pi * scale / (2 sqrt(n));
    # 5 of them (a two-sided false-failure rate below 1e-6) with the largest scale printed.
    scales = _printed_list(out, "W3 (W1 U):")
    tolerance = 5 * math.pi * max(scales) / (2 * math.sqrt(200_000))
    medians = _printed_list(out, "median of 200k joint draws")
    locs = _printed_list(out, "closed-form loc")
    assert all(abs(m - c) <= tolerance for m, c in zip(medians, locs, strict=True))
    # |W3 W1| scale_U from the definition, by hand.
    w1 = [[1.0, -1.0, 0.0], [0.5, 0.5, 0.5]]
    w3 = [[2.0, -1.0], [1.0, 1.0]]
    scale_u = [1.0, 0.5, 2.0]
    w31 = [[sum(w3[i][k] * w1[k][j] for k in range(2)) for j in range(3)] for i in range(2)]
    expected = [sum(abs(w31[i][j]) * scale_u[j] for j in range(3)) for i in range(2)]
    assert scales == expected
    log_p = _printed_list(out, "log P(X > 0)")
    assert all(math.isfinite(v) and v <= 0 for v in log_p)
    assert abs(log_p[1] - math.log(0.5)) < 1e-6
