"""Training on a large table: time to the first step, peak memory and rows/s against the row count.

For each row count it writes a numeric table (``area,rooms,age,price``, about 14.5 bytes a row)
and runs ``cauchylin-lm train --from-config qwen2-tiny --max-steps S --threads T --data t.csv``
in a fresh process. It prints, per row count: the CSV's size, the seconds from the process's
start to the end of the first optimizer step, the whole run's seconds (statistics, training,
readouts, calibration, saving), the peak resident memory (``ru_maxrss`` of that process), and the
rows read per second to the first step (rows / time to first step).

Then it sets the encoding beside the training step's consumption on the first rows of the
largest table: rows/s of :class:`~cauchylin_hf.data.streaming.LazyNumericDataset` encoding a batch
(what each ``DataLoader`` worker does per step), rows/s of the in-memory
:meth:`NumericDataset.from_texts <cauchylin_hf.data.dataset.NumericDataset.from_texts>`, and rows/s the
training step consumes (batch size / seconds per step, from the CLI run).

With ``--evaluate-rows`` it then evaluates the model of the first training run on tables of
those row counts (``cauchylin-lm evaluate MODEL --data t.csv --json``, one fresh process each),
and with ``--evaluate-jsonl-rows`` on JSONL files of the same texts (``{"text": "area 246, rooms
7, age 97 -> price 773.4."}`` a line): seconds, peak resident memory, and rows evaluated per
second (rows / whole run, start-up included; one forward pass per batch gives the token
metrics and the number predictions) with the process's CPU seconds (which other jobs on the
machine do not stretch as they do the wall time), each peak beside the smallest run's of its kind, and the
rows/s the training step consumes on the same model. The runs go by size, a table and a JSONL
file of each size together, and each is written to ``--json``'s ``.partial.json`` as it ends.

Run it with the code to measure on ``PYTHONPATH`` (the command line it starts is
``python -m cauchylin_lm``), so the same script measures two versions side by side.

Usage::

    python benchmarks/bench_data_scaling.py --rows 10000 100000 1000000 10000000 \\
        --json scaling.json --plot docs/assets/benchmarks/data_scaling.png
    python benchmarks/bench_data_scaling.py --rows 10000 --no-encoding \\
        --evaluate-rows 10000 100000 1000000 --evaluate-jsonl-rows 10000 100000 1000000 \\
        --evaluate-batch-size 128 --json evaluate.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _machine import describe, machine_info

# Run inside the child: note the wall-clock time at the end of each optimizer step, then the CLI.
_CHILD = """
import sys, time
import transformers
_step = transformers.Trainer.training_step
def training_step(self, *args, **kwargs):
    out = _step(self, *args, **kwargs)
    print(f"BENCH step {time.time():.4f}", file=sys.stderr, flush=True)
    return out
transformers.Trainer.training_step = training_step
from cauchylin_lm import main
sys.exit(main(sys.argv[1:]))
"""


def write_table(path: Path, rows: int, seed: int = 0) -> None:
    """A numeric table: area (30-250), rooms (1-8), age (0-100), price (one decimal)."""
    rng = random.Random(seed)
    with path.open("w") as f:
        f.write("area,rooms,age,price\n")
        lines = []
        for _ in range(rows):
            area, rooms, age = rng.randint(30, 250), rng.randint(1, 8), rng.randint(0, 100)
            price = round(area * 3.1 + rooms * 12 - age * 0.8 + rng.gauss(0, 20), 1)
            lines.append(f"{area},{rooms},{age},{price}\n")
            if len(lines) == 100_000:
                f.writelines(lines)
                lines = []
        f.writelines(lines)


def run_cli(table: Path, out: Path, steps: int, threads: int, batch: int) -> dict:
    """One ``train`` run: seconds to the first step, in all, seconds per step, peak RSS."""
    cmd = [sys.executable, "-c", _CHILD, "train", "--from-config", "qwen2-tiny"]
    cmd += ["--max-steps", str(steps), "--threads", str(threads), "--batch-size", str(batch)]
    cmd += ["--data", str(table), "--output-dir", str(out), "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    log = out.with_suffix(".log")
    start = time.time()
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own peak memory
    total = time.time() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = log.read_text()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:])} failed ({proc.returncode}):\n{stderr[-4000:]}")
    peak_kb = usage.ru_maxrss
    steps_at = [float(line.split()[2]) for line in stderr.splitlines() if line.startswith("BENCH")]
    per_step = (steps_at[-1] - steps_at[0]) / (len(steps_at) - 1) if len(steps_at) > 1 else None
    return {
        "first_step_s": steps_at[0] - start,
        "total_s": total,
        "step_s": per_step,
        "peak_rss_mb": peak_kb / 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }


def write_jsonl(table: Path, path: Path) -> None:
    """The table's rows as texts of the default template, one JSON record a line."""
    import csv

    with table.open(newline="") as f, path.open("w") as out:
        reader = csv.reader(f)
        header = next(reader)
        lines = []
        for row in reader:
            body = ", ".join(f"{k} {v}" for k, v in zip(header[:-1], row[:-1], strict=True))
            lines.append(json.dumps({"text": f"{body} -> {header[-1]} {row[-1]}."}) + "\n")
            if len(lines) == 100_000:
                out.writelines(lines)
                lines = []
        out.writelines(lines)


def run_evaluate(
    model: Path, data: Path, threads: int, batch: int, workers: int, sample_s: float = 60.0
) -> dict:
    """One ``evaluate`` run in a fresh process: seconds, peak RSS, the metrics it printed, and
    its resident memory sampled every ``sample_s`` seconds (``memory``)."""
    cmd = [sys.executable, "-m", "cauchylin_lm", "evaluate", str(model), "--data", str(data)]
    cmd += ["--threads", str(threads), "--batch-size", str(batch), "--json", "--no-progress"]
    cmd += ["--dataloader-workers", str(workers)] if workers else []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    # named after the whole file name: the table's and the JSONL file's runs keep their own
    log, out = data.with_name(data.name + ".eval.log"), data.with_name(data.name + ".eval.json")
    start = time.time()
    memory: list[list[float]] = []  # [seconds, resident MB, peak resident MB] as it runs
    with log.open("w") as err, out.open("w") as stdout:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=err)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # the child's own peak memory
            if pid:
                break
            if not memory or time.time() - start >= memory[-1][0] + sample_s:
                now, mb = round(time.time() - start, 1), _resident_mb(proc.pid)
                if all(v == v for v in mb):  # not an exited child's (no VmRSS there)
                    memory.append([now, *mb])
            time.sleep(0.2)
    total = time.time() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed:\n{log.read_text()[-4000:]}")
    metrics = json.loads(out.read_text())
    cpu = usage.ru_utime + usage.ru_stime  # the child's own CPU seconds: what load does not add
    return {
        "total_s": total,
        "cpu_s": cpu,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "memory": memory,
        "metrics": metrics,
    }


def _resident_mb(pid: int) -> list[float]:
    """A running process's resident and peak resident memory (``VmRSS``, ``VmHWM``), in MB
    (nan where ``/proc`` is not there)."""
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = float(value.split()[0]) / 1024
    except OSError:
        pass
    return [fields.get("VmRSS", float("nan")), fields.get("VmHWM", float("nan"))]


def evaluate_runs(ns: argparse.Namespace, model: Path, tmp: Path, train_rate: float) -> list:
    """The ``evaluate`` rows: a table per ``--evaluate-rows``, a JSONL per
    ``--evaluate-jsonl-rows``; printed as they finish (and written to ``--json``)."""
    runs: list[dict] = []
    # by size, the table and the JSONL file of each size together: a run stopped half way has
    # both kinds of every size it reached
    jobs = sorted(
        [("csv", n) for n in ns.evaluate_rows] + [("jsonl", n) for n in ns.evaluate_jsonl_rows],
        key=lambda job: (job[1], job[0]),
    )
    if not jobs:
        return runs
    print(
        f"cauchylin-lm evaluate MODEL --threads {ns.threads} --batch-size {ns.evaluate_batch_size}"
        f" --dataloader-workers {ns.dataloader_workers}"
    )
    print(
        f"{'data':>6} {'rows':>10} {'MB':>8} {'total s':>9} {'peak RSS MB':>12} {'rows/s':>8} "
        f"{'peak / first':>13} {'train rows/s':>13} {'CPU s':>8}"
    )
    first: dict[str, float] = {}  # the first (smallest) run's peak of each kind
    for kind, rows in jobs:
        table = tmp / f"eval{rows}.csv"
        if not table.exists():
            write_table(table, rows, seed=1)
        data = table
        if kind == "jsonl":
            data = tmp / f"eval{rows}.jsonl"
            write_jsonl(table, data)
        r = run_evaluate(model, data, ns.threads, ns.evaluate_batch_size, ns.dataloader_workers)
        r.update(kind=kind, rows=rows, mb=data.stat().st_size / 1e6, rows_per_s=rows / r["total_s"])
        r["train_rows_per_s"] = train_rate
        first.setdefault(kind, r["peak_rss_mb"])
        r["peak_ratio"] = r["peak_rss_mb"] / first[kind]
        r["load_average"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        runs.append(r)
        print(
            f"{kind:>6} {rows:>10} {r['mb']:>8.1f} {r['total_s']:>9.1f} {r['peak_rss_mb']:>12.0f} "
            f"{r['rows_per_s']:>8.0f} {r['peak_ratio']:>12.2f}x {train_rate:>13.0f} "
            f"{r['cpu_s']:>8.1f}",
            flush=True,
        )
        if ns.json:  # what is done so far survives a run stopped half way
            partial = {"evaluate": runs, "partial": True}
            Path(ns.json).with_suffix(".partial.json").write_text(json.dumps(partial, indent=2))
    return runs


def encoding_rates(table: Path, rows: int, batch: int) -> dict:
    """Rows/s of encoding a batch lazily and of the in-memory encoding, on ``rows`` rows."""
    import datasets
    from cauchylin_hf.app.corpus import train_corpus_tokenizer
    from cauchylin_hf.data import LazyNumericDataset, NumericDataset, TableTemplate
    from cauchylin_hf.data.table_stream import stream_table_texts
    from cauchylin_hf.tokenizer import NumericTokenizer

    texts = stream_table_texts(table, TableTemplate.default)[0].texts[:rows]
    ntok = NumericTokenizer(train_corpus_tokenizer(texts[:2000], vocab_size=1024))
    lazy = LazyNumericDataset(datasets.Dataset.from_dict({"text": texts}), ntok)
    start = time.perf_counter()
    for i in range(0, rows, batch):
        lazy.__getitems__(list(range(i, min(i + batch, rows))))
    lazy_s = time.perf_counter() - start
    start = time.perf_counter()
    NumericDataset.from_texts(texts, ntok)
    eager_s = time.perf_counter() - start
    return {"rows": rows, "lazy_rows_per_s": rows / lazy_s, "eager_rows_per_s": rows / eager_s}


def main(argv: list[str] | None = None) -> int:
    """Run the scaling benchmark (``--help`` lists the flags)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps per run")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--encode-rows", type=int, default=20_000, help="rows of the rate test")
    parser.add_argument(
        "--no-encoding", action="store_true", help="skip the encoding rates (an older version)"
    )
    parser.add_argument(
        "--evaluate-rows", type=int, nargs="*", default=[], help="tables to evaluate (rows)"
    )
    parser.add_argument(
        "--evaluate-jsonl-rows", type=int, nargs="*", default=[], help="JSONL files (lines)"
    )
    parser.add_argument("--evaluate-batch-size", type=int, default=64)
    parser.add_argument("--dataloader-workers", type=int, default=0, help="evaluate's readers")
    parser.add_argument("--json", help="write the numbers here")
    parser.add_argument("--plot", help="write the figure here (PNG)")
    ns = parser.parse_args(argv)
    print(describe(with_allocator=False))
    print(
        f"cauchylin-lm train --from-config qwen2-tiny --max-steps {ns.steps} --threads "
        f"{ns.threads} --batch-size {ns.batch_size}"
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "table.csv"
        header = f"{'rows':>10} {'CSV MB':>8} {'first step s':>13} {'total s':>9} "
        print(header + f"{'peak RSS MB':>12} {'rows/s to step 1':>17}", flush=True)
        for rows in ns.rows:
            write_table(table, rows)
            r = run_cli(table, Path(tmp) / f"out{rows}", ns.steps, ns.threads, ns.batch_size)
            r.update(rows=rows, csv_mb=table.stat().st_size / 1e6)
            results.append(r)
            print(
                f"{rows:>10} {r['csv_mb']:>8.2f} {r['first_step_s']:>13.1f} {r['total_s']:>9.1f} "
                f"{r['peak_rss_mb']:>12.0f} {rows / r['first_step_s']:>17.0f}",
                flush=True,
            )
        encode_rows = min(ns.encode_rows, ns.rows[-1])
        rates = {} if ns.no_encoding else encoding_rates(table, encode_rows, ns.batch_size)
        steps = [r["step_s"] for r in results if r["step_s"]]
        consume = ns.batch_size / min(steps) if steps else float("nan")
        model = Path(tmp) / f"out{ns.rows[0]}"
        evaluated = evaluate_runs(ns, model, Path(tmp), consume)
    print(f"the training step consumes {consume:.0f} rows/s (batch {ns.batch_size})")
    if rates:
        print(
            f"encoding ({encode_rows} rows, batches of {ns.batch_size}): lazy "
            f"{rates['lazy_rows_per_s']:.0f} rows/s per worker, in memory "
            f"{rates['eager_rows_per_s']:.0f} rows/s"
        )
    data = {
        "machine": machine_info(),
        "command": f"train --from-config qwen2-tiny --max-steps {ns.steps} --threads {ns.threads}",
        "runs": results,
        "encoding": {**rates, "step_rows_per_s": consume},
    }
    if evaluated:
        data["evaluate"] = evaluated
        data["evaluate_command"] = (
            f"evaluate MODEL --threads {ns.threads} --batch-size {ns.evaluate_batch_size} "
            f"--dataloader-workers {ns.dataloader_workers}"
        )
        for r in evaluated:
            print(
                f"evaluate {r['kind']} {r['rows']} rows: peak RSS {r['peak_ratio']:.2f}x the "
                f"smallest {r['kind']} run's, {r['rows_per_s']:.0f} rows/s (training consumes "
                f"{consume:.0f} rows/s)"
            )
    if ns.json:
        Path(ns.json).write_text(json.dumps(data, indent=2) + "\n")
    if ns.plot:
        plot(data, ns.plot)
    return 0


def plot(data: dict, path: str) -> None:
    """Time to the first step and peak memory against the row count (log-log)."""
    from _plotting import footnote, pyplot, save

    plt = pyplot()
    runs = data["runs"]
    rows = [r["rows"] for r in runs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.loglog(rows, [r["first_step_s"] for r in runs], "o-", label="to the first step")
    ax1.loglog(rows, [r["total_s"] for r in runs], "s--", label="whole run")
    ax1.set(xlabel="table rows", ylabel="seconds", title="time")
    ax1.legend()
    ax2.semilogx(rows, [r["peak_rss_mb"] / 1024 for r in runs], "o-")
    ax2.set(xlabel="table rows", ylabel="GiB", title="peak resident memory")
    ax2.set_ylim(bottom=0)
    footnote(fig, f"{data['command']}; {describe(with_allocator=False)}")
    save(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
