#!/usr/bin/env python3
"""Sweep every causal-LM architecture of the installed transformers through the adapter.

For each ``model_type`` of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` the sweep builds a tiny random
base from a shrunken config (``cauchylin_hf.testing.tiny_base_config``: the config class's
defaults with hidden size 32, 2 layers (or one of each kind a hybrid lists), 4 heads, 2 key/value
heads, 300 tokens, 4 experts) and checks, in order:

1. ``from_base``: ``CauchyLMForCausalLM.from_base(base, num_token_id=V)`` (a new ``<NUM>`` row, so
   the embedding is resized);
2. ``verify``: ``loc_S`` equals the base's own logits (``verify(base, model).passed``: max
   ``|loc_S - logits| <= 1e-4`` and every greedy choice agrees);
3. ``generate``: ``cauchylin_hf.generation.generate`` with the KV cache gives the same tokens as the
   uncached loop, and the same ``loc_S`` and ``loc_Y`` at every step (within ``1e-4`` or ten times
   the base's own cached-against-full difference, plus ``2e-4`` of their size) and the same
   ``<NUM>`` values, in the standard, causal and greedy compatible modes, from prompts holding a
   ``<NUM>`` with a value;
4. ``train``: one training step (labels and numeric values): a finite loss, finite gradients
   that reach the heads (``W_cls``, ``W_reg``, Abduction), and an optimiser step that moves them.

Entries that are not decoder-only causal LMs (the decoder half of an encoder-decoder, a multimodal
``...ForConditionalGeneration``) and those that need an extra package are skipped with the
reason. Each architecture runs in a worker process with a time limit (``--timeout``); a worker
that overruns is killed and replaced.

Usage::

    python scripts/architecture_sweep.py                       # the table on stdout
    python scripts/architecture_sweep.py --json sweep.json --markdown sweep.md
    python scripts/architecture_sweep.py --docs docs/hf.md     # rewrite the table on that page
    python scripts/architecture_sweep.py --only gpt2 phi3 mamba

The whole sweep takes a few minutes with two workers on two cores (torch threads 1).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import multiprocessing as mp
import platform
import re
import sys
import tempfile
import time
import traceback
from collections import Counter
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

MARK_START = "<!-- architecture-sweep:start -->"
MARK_END = "<!-- architecture-sweep:end -->"
MAX_PARAMS = 20_000_000
"""A shrunken config above this many parameters is reported, not built (a size the shrinking
missed)."""
VOCAB = 300
NOISE = 0.02
"""Standard deviation of the noise added to every parameter of a tiny base."""
MODES = ("standard", "causal", "compatible")
PROMPT_LENGTH, NEW_TOKENS = 6, 6


# ---------------------------------------------------------------------------- the checks


class Skip(Exception):
    """An entry the sweep does not run (not a decoder-only causal LM, a missing package)."""


class Failed(Exception):
    """A check that ran and did not hold."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip() and not line.strip().startswith("Class validation error"):
            return line.strip()[:300]
    return text[:300]


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame, and of the innermost frame of the adapter."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    inner = f"{Path(last.filename).name}:{last.lineno}"
    ours = [f for f in frames if "cauchylin_hf" in f.filename]
    if ours and ours[-1] is not last:
        inner += f" (via {Path(ours[-1].filename).name}:{ours[-1].lineno})"
    return inner


def _classify(model_type: str) -> None:
    """Raise :class:`Skip` for entries that are not decoder-only causal LMs."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cls_name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    config_cls = CONFIG_MAPPING[model_type]
    if getattr(config_cls, "is_encoder_decoder", False) is True or (
        "is_encoder_decoder" in getattr(config_cls, "__dataclass_fields__", {})
        and config_cls.__dataclass_fields__["is_encoder_decoder"].default is True
    ):
        raise Skip(
            f"encoder-decoder: {cls_name} is the decoder half of {config_cls.__name__}'s "
            "encoder-decoder (AutoModel builds the whole encoder-decoder from that config)"
        )
    if "AssistantForCausalLM" in cls_name:
        raise Skip(
            f"draft model: {cls_name} drafts tokens for speculative decoding from the target "
            "model's hidden states and key/value states, not from token ids"
        )
    if cls_name.endswith("ForConditionalGeneration"):
        raise Skip(
            f"multimodal: {cls_name} reads images/audio beside text; its config is composite "
            "(the decoder's sizes live in text_config)"
        )


def _skip_if_default_fails(model_type: str) -> None:
    """Raise :class:`Skip` when transformers cannot build the class from its own default config
    either (so the failure is not the shrinking's); return when it can."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    try:
        with torch.device("meta"):
            AutoModelForCausalLM.from_config(CONFIG_MAPPING[model_type]())
    except Exception as exc:
        raise Skip(
            "transformers cannot build it from its own default config either: "
            f"{type(exc).__name__}: {_first_line(exc)}"
        ) from exc


def _base_cache_gap(base: Any, vocab: int) -> float:
    """Max difference between the logits of a base's own cached generation (transformers'
    ``generate``, greedy, with the architecture's own handling of masks and caches) and its logits
    on the whole generated sequence; 0 when its ``generate`` fails."""
    import torch

    ids = torch.randint(3, vocab, (2, PROMPT_LENGTH), generator=torch.Generator().manual_seed(2))
    try:
        with torch.no_grad():
            out = base.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=0,
            )
            steps = torch.stack(out.logits, 1).float()
            full = base(out.sequences).logits[:, PROMPT_LENGTH - 1 : -1].float()
    except Exception:
        return 0.0
    return float((steps - full).abs().max())


def check(model_type: str, info: dict[str, Any]) -> None:
    """Run the four checks on one architecture, noting the stage and details in ``info``."""
    import torch
    from cauchylin_hf._backbone import LOGIT_POSTPROCESSING
    from cauchylin_hf.generation import generate
    from cauchylin_hf.model import CauchyLMForCausalLM
    from cauchylin_hf.testing import tiny_base_config, tiny_base_model
    from cauchylin_hf.verify import verify
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    info["stage"] = "config"
    info["class"] = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    _classify(model_type)
    try:
        config = tiny_base_config(model_type, vocab_size=VOCAB)
    except ImportError as exc:
        raise Skip(f"needs an extra package: {_first_line(exc)}") from exc
    info["stage"] = "build"
    try:
        with torch.device("meta"):
            meta = AutoModelForCausalLM.from_config(config)
    except ImportError as exc:
        raise Skip(f"needs an extra package: {_first_line(exc)}") from exc
    except Exception:
        _skip_if_default_fails(model_type)
        raise
    info["class"] = type(meta).__name__
    info["params"] = sum(p.numel() for p in meta.parameters())
    del meta
    if info["params"] > MAX_PARAMS:
        raise Failed(f"the shrunken config still has {info['params']:,} parameters")
    # Zero- or one-initialised gates and scales can hide a path at initialisation (Gemma 3n's
    # per-layer token embeddings): a little noise on every parameter shows them.
    base: Any = tiny_base_model(model_type, vocab_size=VOCAB, perturb=NOISE)
    rows = int(base.get_input_embeddings().weight.shape[0])

    info["stage"] = "from_base"
    model: Any = CauchyLMForCausalLM.from_base(base, num_token_id=rows)
    num = rows

    info["stage"] = "verify"
    report = verify(base, model)
    info["max_abs_diff"] = report.max_abs_diff
    info["max_abs_logit"] = report.max_abs_logit
    mismatch = (
        f"max |loc_S - base logits| = {report.max_abs_diff:.3g} (tolerance "
        f"{report.tolerance:.0e}, max |logit| {report.max_abs_logit:.3g}), greedy agreement "
        f"{100 * report.greedy_agreement:.0f} %"
    )
    capped = None
    if not report.passed:
        caps = {a: getattr(base.config, a, None) for a in LOGIT_POSTPROCESSING}
        caps = {a: c for a, c in caps.items() if c}
        if not caps:
            raise Failed(mismatch)
        # A soft cap c tanh(x / c) is not linear: compare with the logits before it (a cap of
        # 1e9 leaves them within float32 rounding) and run the other checks on that base.
        for attr in caps:
            setattr(base.config, attr, 1e9)
        for child in base.children():  # a cap read once at init (Inkling 2's logit_softcap)
            if isinstance(getattr(child, "softcap", None), float):
                child.softcap = 1e9
        uncapped = verify(base, model)
        if not uncapped.passed:
            raise Failed(f"{mismatch}; with the soft cap lifted: {uncapped.max_abs_diff:.3g}")
        capped = (
            f"logit soft-capping ({', '.join(f'{a}={c}' for a, c in caps.items())}): {mismatch}; "
            f"loc_S equals the logits before the cap (max diff {uncapped.max_abs_diff:.2g}), and "
            "the other checks pass"
        )

    info["stage"] = "generate"
    # The base's own cached logits differ from its full pass by rounding: ~1e-6 for attention,
    # up to ~1e-4 of the logits' size for state-space layers, whose chunked scan and step
    # differ (Zamba2: 1e-4 in float32, 1e-6 in float64; NemotronH: the adapter's cached loc_S
    # equals transformers' own cached logits exactly). A stale cache or a wrong mask moves
    # loc_S by 0.1 and more.
    gap = _base_cache_gap(base, VOCAB)
    info["base_cache_gap"] = gap
    with torch.no_grad():
        _, cache = model.encode(torch.randint(3, VOCAB, (1, 4)), use_cache=True)
    info["cache"] = type(cache).__name__ if cache is not None else None
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, PROMPT_LENGTH), generator=gen)
    values = torch.zeros(2, PROMPT_LENGTH)
    ids[:, 2] = num
    values[:, 2] = torch.tensor([1.5, -20.0])
    for mode in MODES:
        kw: dict[str, Any] = {
            "mode": mode,
            "max_new_tokens": NEW_TOKENS,
            "eos_token_id": [],
            "return_distributions": True,
        }
        if mode == "compatible":
            kw["temperature"] = 0.0
        cached = generate(model, ids, values, use_cache=True, **kw)
        plain = generate(model, ids, values, use_cache=False, **kw)
        if not torch.equal(cached.sequences, plain.sequences):
            raise Failed(
                f"{mode} mode: cached tokens {cached.new_tokens.tolist()} != uncached "
                f"{plain.new_tokens.tolist()}"
            )
        # The tokens of a tiny random model can agree by luck: the scores of every step must too.
        for name in ("loc_S", "loc_Y"):
            a, b = cached.steps[name], plain.steps[name]
            tol = max(1e-4, 10 * gap) + 2e-4 * float(b.abs().max())
            if not torch.allclose(a, b, rtol=0, atol=tol):
                diff = (a - b).abs().amax(dim=-1) if a.dim() == 3 else (a - b).abs()
                raise Failed(
                    f"{mode} mode: cached {name} differs from the uncached loop (max difference "
                    f"per step {[round(float(d), 4) for d in diff.amax(0)]})"
                )
        if not torch.allclose(cached.numeric_values, plain.numeric_values, rtol=1e-4, atol=1e-4):
            raise Failed(f"{mode} mode: cached <NUM> values differ from the uncached loop")

    info["stage"] = "train"
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(ids, values, labels=ids)
    loss = out.loss
    if loss is None or not bool(torch.isfinite(loss)):
        raise Failed(f"training loss {loss}")
    loss.backward()
    heads = {
        "W_cls": model.action.classifier.weight,
        "W_reg": model.action.regressor.weight,
        "Abduction": model.abduction.loc_net.weight,
    }
    for name, p in heads.items():
        if p.grad is None or not bool(torch.isfinite(p.grad).all()) or not bool(p.grad.any()):
            raise Failed(f"no finite non-zero gradient reaches {name}")
    bad = [
        n for n, p in model.named_parameters() if p.grad is not None and not p.grad.isfinite().all()
    ]
    if bad:
        raise Failed(f"non-finite gradients in {bad[:3]}")
    before = {name: p.detach().clone() for name, p in heads.items()}
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-2).step()
    moved = [name for name, p in heads.items() if not torch.equal(p, before[name])]
    if len(moved) != len(heads):
        raise Failed(f"the optimiser step moved only {moved}")
    info["loss"] = float(loss)
    if capped is not None:
        info["stage"] = "verify"
        raise Failed(capped)


def run_one(model_type: str) -> dict[str, Any]:
    """:func:`check` with its outcome as a record (never raises)."""
    start = time.perf_counter()
    info: dict[str, Any] = {}
    status, reason, where = "pass", "", ""
    try:
        check(model_type, info)
    except Skip as exc:
        status, reason = "skip", str(exc)
    except Failed as exc:
        status, reason = "fail", str(exc)
    except Exception as exc:
        status, reason, where = "fail", f"{type(exc).__name__}: {_first_line(exc)}", _where(exc)
    record = {"model_type": model_type, "status": status, "stage": info.pop("stage", "config")}
    record.update(info)
    if status == "pass" and "cache" in info and info["cache"] is None:
        reason = (
            "no cache comes back from the decoder under this release's name: generation runs "
            "the whole sequence at every step"
        )
    record["reason"] = reason
    if where:
        record["where"] = where
    record["seconds"] = round(time.perf_counter() - start, 2)
    record["cause"] = cause(record)
    return record


def _worker(conn: Connection) -> None:
    """A worker process: runs the architectures it is sent, one at a time."""
    import logging
    import warnings

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # model code prints; the parent's progress bar owns the terminal
    os.dup2(devnull, 2)
    warnings.filterwarnings("ignore")
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    logging.getLogger("cauchylin_hf").setLevel(logging.ERROR)
    import cauchylin_hf.model  # noqa: F401 - imported before the clock of the first task starts

    conn.send(None)  # ready
    while True:
        model_type = conn.recv()
        if model_type is None:
            return
        conn.send(run_one(model_type))


# ---------------------------------------------------------------------------- the pool


class _Worker:
    """A worker process, its pipe, and the architecture it is running (None: idle)."""

    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.task: str | None = None
        self.started = 0.0

    def assign(self, model_type: str) -> None:
        self.task, self.started = model_type, time.monotonic()
        self.conn.send(model_type)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                self.proc.kill()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def sweep(model_types: list[str], jobs: int, timeout: float, progress: bool) -> list[dict]:
    """Run :func:`run_one` on every model type in ``jobs`` worker processes.

    An architecture that runs longer than ``timeout`` seconds, or whose worker dies, is recorded
    as a failure and its worker replaced.
    """
    from tqdm import tqdm

    ctx = mp.get_context("spawn")
    pending = list(model_types)
    results: dict[str, dict] = {}
    workers = [_Worker(ctx) for _ in range(max(1, min(jobs, len(pending))))]
    bar = tqdm(total=len(pending), unit="arch", disable=not progress, dynamic_ncols=True)
    counts: Counter[str] = Counter()

    def done(record: dict) -> None:
        record.setdefault("cause", cause(record))
        results[record["model_type"]] = record
        counts[record["status"]] += 1
        bar.set_postfix(counts, refresh=False)
        bar.update(1)

    try:
        while pending or any(w.task for w in workers):
            for w in workers:
                if w.ready and w.task is None and pending:
                    w.assign(pending.pop(0))
                    bar.set_description(w.task or "")
            ready = wait([w.conn for w in workers], timeout=0.5)
            now = time.monotonic()
            for i, w in enumerate(workers):
                if w.conn in ready:
                    try:
                        message = w.conn.recv()
                    except (EOFError, OSError):
                        message = "died"
                    if message is None:
                        w.ready = True
                        continue
                    if message != "died":
                        w.task = None
                        done(message)
                        continue
                    code = w.proc.exitcode
                    reason = f"the worker process died (exit code {code})"
                elif w.task is not None and now - w.started > timeout:
                    reason = f"timeout: still running after {timeout:g} s"
                elif not w.ready and not w.proc.is_alive():
                    reason = f"the worker process died at start (exit code {w.proc.exitcode})"
                else:
                    continue
                if w.task is not None:
                    done(
                        {
                            "model_type": w.task,
                            "status": "fail",
                            "stage": "?",
                            "reason": reason,
                            "seconds": round(now - w.started, 2),
                        }
                    )
                w.stop(kill=True)
                if not w.ready and w.task is None and w.proc.exitcode not in (None, 0):
                    raise RuntimeError(reason)
                workers[i] = _Worker(ctx)
    finally:
        for w in workers:
            w.stop()
        bar.close()
    return [results[m] for m in model_types]


# ---------------------------------------------------------------------------- reports


CAUSES: list[tuple[str, str]] = [
    ("^encoder-decoder", "the decoder half of an encoder-decoder (skipped)"),
    ("^multimodal", "a multimodal ...ForConditionalGeneration (skipped)"),
    ("^draft model", "a speculative-decoding draft model (skipped)"),
    ("^needs an extra package", "needs an extra package (skipped)"),
    ("own default config either", "transformers cannot build it from its own default (skipped)"),
    ("soft-capping", "logit soft-capping c tanh(logits / c): not linear in z"),
    (
        "prediction head with other layers",
        "a prediction head (dense, norm) before the output layer",
    ),
    ("linear map of the decoder's hidden state", "the output layer reads another width than z"),
    ("not what AutoModel builds", "AutoModel does not rebuild the decoder from its config"),
    ("composite config", "a composite config (the decoder's sizes in sub-configs)"),
    ("^timeout", "ran past the time limit (--timeout)"),
    ("worker process died", "the worker process died (crash or out of memory)"),
]
"""(pattern of the reason, cause): how the failures and skips are grouped on the docs page."""

NOTES: dict[str, tuple[str, str]] = {
    "modernbert-decoder": (
        "a prediction head (dense, norm) before the output layer",
        "logits = decoder(lm_head(z)): lm_head is a dense layer and a norm",
    ),
    "dory": (
        "a head that is not a plain linear layer",
        "DoryLMHead multiplies each logit by a learned per-token scale",
    ),
    "deepseek_v4": (
        "the decoder needs the token ids, not only their embeddings",
        "hash-routed experts look the expert up by token id",
    ),
    "cpmant": (
        "the decoder needs the token ids, not only their embeddings",
        "CpmAntModel.forward takes input_ids only (it prepends prompt tokens)",
    ),
    "dots3_note": (
        "a composite config (the decoder's sizes in sub-configs)",
        "multimodal; the shrunken config does not meet its vision-adapter checks",
    ),
}
"""Causes found by reading the model's code, for failures whose message does not name them."""


def cause(record: dict) -> str:
    """The cause of a failure or skip (empty for a pass)."""
    if record["status"] == "pass":
        return ""
    note = NOTES.get(record["model_type"])
    if note is not None:
        return note[0]
    reason = record.get("reason", "")
    for pattern, label in CAUSES:
        if re.search(pattern, reason):
            return label
    return "other"


def _versions() -> dict[str, str]:
    import torch
    import transformers

    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
    }


def summary(records: list[dict]) -> dict[str, Any]:
    """Counts: total, passed, failed, skipped, and the share that passes."""
    c = Counter(r["status"] for r in records)
    ran = c["pass"] + c["fail"]
    return {
        "total": len(records),
        "pass": c["pass"],
        "fail": c["fail"],
        "skip": c["skip"],
        "pass_share_of_all": c["pass"] / len(records) if records else 0.0,
        "pass_share_of_run": c["pass"] / ran if ran else 0.0,
    }


def _cell(text: str) -> str:
    """Text as one Markdown table cell (pipes escaped, no HTML tags such as ``<NUM>``)."""
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def markdown(records: list[dict], versions: dict[str, str], seconds: float) -> str:
    """The Markdown block of the docs page: a summary sentence, then the table."""
    s = summary(records)
    lines = [
        f"Measured with transformers {versions['transformers']} and torch {versions['torch']} "
        f"(`python scripts/architecture_sweep.py`, {seconds:.0f} s on {versions['cpus']} CPU "
        f"cores): **{s['pass']} of {s['total']}** model types of the causal-LM mapping pass every "
        f"check ({100 * s['pass_share_of_all']:.0f} %; {s['pass']} of the "
        f"{s['pass'] + s['fail']} that were run, {100 * s['pass_share_of_run']:.0f} %), "
        f"{s['fail']} fail, {s['skip']} are skipped.",
        "",
        "| cause | count | model types |",
        "|---|---|---|",
    ]
    groups: dict[str, list[str]] = {}
    for r in records:
        if r["status"] != "pass":
            groups.setdefault(cause(r), []).append(r["model_type"])
    for label, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        names = ", ".join(f"`{m}`" for m in members)
        lines.append(f"| {_cell(label)} | {len(members)} | {names} |")
    lines += [
        "",
        "| model type | class | result | stage | reason |",
        "|---|---|---|---|---|",
    ]
    for r in records:
        result = {"pass": "pass", "fail": "**fail**", "skip": "skip"}[r["status"]]
        stage = "" if r["status"] == "pass" else r.get("stage", "")
        reason = r.get("reason", "")
        note = NOTES.get(r["model_type"])
        if note is not None and r["status"] != "pass":
            reason = f"{note[1]}: {reason}"
        lines.append(
            f"| `{r['model_type']}` | {r.get('class', '')} | {result} | {stage} | {_cell(reason)} |"
        )
    return "\n".join(lines) + "\n"


def print_table(records: list[dict], stream: Any = sys.stdout) -> None:
    """A plain-text table: model type, result, stage, reason (first line)."""
    width = max(len(r["model_type"]) for r in records)
    for r in records:
        stage = "" if r["status"] == "pass" else r.get("stage", "")
        print(
            f"{r['model_type']:<{width}}  {r['status']:<4}  {stage:<9}  {r.get('reason', '')}",
            file=stream,
        )
    groups = Counter(r["cause"] for r in records if r["status"] != "pass")
    print("\nfailures and skips by cause:", file=stream)
    for label, n in groups.most_common():
        print(f"  {n:3d}  {label}", file=stream)
    s = summary(records)
    print(
        f"\n{s['pass']}/{s['total']} pass ({100 * s['pass_share_of_all']:.0f} %), "
        f"{s['fail']} fail, {s['skip']} skipped; {s['pass']}/{s['pass'] + s['fail']} of those run "
        f"({100 * s['pass_share_of_run']:.0f} %)",
        file=stream,
    )


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file (the old file survives a failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def update_docs(path: Path, block: str) -> None:
    """Replace the text between the sweep's markers on a docs page with ``block``."""
    text = path.read_text()
    if MARK_START not in text or MARK_END not in text:
        raise SystemExit(f"{path} has no {MARK_START} ... {MARK_END} block to replace")
    head, rest = text.split(MARK_START, 1)
    _, tail = rest.split(MARK_END, 1)
    _write(path, f"{head}{MARK_START}\n{block}{MARK_END}{tail}")


def main(argv: list[str] | None = None) -> int:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="MODEL_TYPE", help="these model types only")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per architecture (default 60)"
    )
    parser.add_argument("--json", type=Path, help="write the records and versions here")
    parser.add_argument("--markdown", type=Path, help="write the Markdown table here")
    parser.add_argument(
        "--docs", type=Path, help=f"replace the {MARK_START} block of this page with the table"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="write the tables of an earlier --json run instead of running the sweep",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    if args.timeout <= 0:
        parser.error("--timeout must be > 0")
    names = list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            parser.error(f"not in the causal-LM mapping: {unknown}")
        names = [n for n in names if n in set(args.only)]
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        records, seconds, versions = saved["records"], saved["seconds"], saved["versions"]
        if args.only:
            records = [r for r in records if r["model_type"] in set(args.only)]
    else:
        start = time.perf_counter()
        records = sweep(names, args.jobs, args.timeout, progress=not args.no_progress)
        seconds = time.perf_counter() - start
        versions = _versions()
    print_table(records)
    block = markdown(records, versions, seconds)
    if args.json:
        payload = {
            "versions": versions,
            "seconds": round(seconds, 1),
            "summary": summary(records),
            "records": records,
        }
        _write(args.json, json.dumps(payload, indent=1) + "\n")
    if args.markdown:
        _write(args.markdown, block)
    if args.docs:
        update_docs(args.docs, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
