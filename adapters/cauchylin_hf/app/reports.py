"""What the commands of ``cauchylin-lm`` print about a training and its numbers: the target,
the metrics, the learning check, the readouts and calibration, and notes on values that can
look like faults."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any, cast

from .checks import note, warn
from .inputs import Data

__all__ = [
    "describe",
    "explain",
    "format_record",
    "print_metrics",
    "report_readouts",
    "shorten",
    "target_context",
    "target_field",
    "target_report",
    "write_value",
]


def shorten(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters, ending in ``...`` when cut.

    Args:
        text: the text.
        limit: the longest result.

    Returns:
        The text, whole or cut.

    Example:
        >>> shorten("abcdefgh", 6)
        'abc...'
    """
    return text if len(text) <= limit else text[: limit - 3] + "..."


def print_metrics(metrics: dict[str, float]) -> None:
    """Print one ``name  value`` line per metric, sorted by name.

    Args:
        metrics: the metrics.

    A coverage or interval score of a group whose intervals are not all calibrated
    (``calibrated_50 < 1``) says so on its line.

    Example:
        >>> print_metrics({"eval/loss": 1.25, "eval/acc": 0.5})
        eval/acc   0.5
        eval/loss  1.25
        >>> print_metrics({"t/coverage_50": 0.25, "t/calibrated_50": 0.0})
        t/calibrated_50  0
        t/coverage_50    0.25  (not calibrated: the model's Cauchy intervals)
    """
    width = max(len(k) for k in metrics)
    for key in sorted(metrics):
        print(f"{key.ljust(width)}  {metrics[key]:.6g}{_calibration_label(metrics, key)}")


def _calibration_label(metrics: dict[str, float], key: str) -> str:
    """``"  (not calibrated ...)"`` for a coverage or interval score of uncalibrated intervals."""
    group, _, name = key.rpartition("/")
    kind, _, level = name.rpartition("_")
    if kind not in ("coverage", "interval_score"):
        return ""
    share = metrics.get(f"{group}/calibrated_{level}")
    if share is None or math.isnan(share) or share >= 1:
        return ""
    if share <= 0:
        return "  (not calibrated: the model's Cauchy intervals)"
    return f"  ({share:.0%} of the intervals calibrated, the others the model's Cauchy ones)"


def format_record(tt: Any, precision: Any, median: float | None) -> dict[str, Any]:
    """The ``data_format.json`` record ``train`` writes beside the model.

    Args:
        tt: the table template, or None for free text.
        precision: the :class:`~cauchylin_hf.precision.NumberPrecision`, or None.
        median: the median of the training targets, or None.

    Returns:
        ``{"template", "target", "precision", "target_median"}``.

    Example:
        >>> format_record(None, None, 2.5)
        {'template': None, 'target': None, 'precision': None, 'target_median': 2.5}
    """
    return {
        "template": None if tt is None else tt.template,
        "target": None if tt is None else tt.target,
        "precision": None if precision is None else precision.to_dict(),
        "target_median": median,
    }


def target_field(tt: Any, args: argparse.Namespace) -> str | None:
    """The target field of :func:`~cauchylin_hf.predict.number_predictions` (None: the last
    number of each text): ``--target-field``, else, when a template writes something after the
    target, the field of the template's text just before the target.

    Args:
        tt: the table template, or None for free text.
        args: the parsed arguments.

    Returns:
        The field, or None.

    Example:
        >>> target_field(None, argparse.Namespace(target_field="price"))
        'price'
    """
    from ..numbers import field_of

    given = getattr(args, "target_field", None)
    if given is not None or tt is None or tt.target_is_last():
        return cast(str | None, given)
    return field_of(tt.text_before_target())


def _target_name(data: Data, field: str | None) -> str:
    if data.template is not None:
        return f"column {data.template.target!r}"
    return f"the last {field!r} number of each text" if field else "the last number of each text"


def describe(data: Data, field: str | None, targets: Sequence[float]) -> None:
    """Print, before training, which number is the target and how the first row reads as text.

    Args:
        data: the training texts.
        field: the target field (:func:`target_field`).
        targets: the target numbers of the texts.

    Example:
        >>> describe(Data(["3 eggs cost 6."], None, None, "t.txt"), None, [6.0])
        target: the last number of each text (median 6 over 1 texts)
        text 1: 3 eggs cost 6.
    """
    import torch

    from cauchylin.metrics import quantiles

    from ..data.arrow import STATS_ROWS

    values = torch.tensor(targets, dtype=torch.float64)
    median = f"median {quantiles(values, (0.5,))[0]:.6g} over " if targets else "none in "
    of = f"a sample of {len(targets)} of " if len(data.texts) > STATS_ROWS else ""
    print(f"target: {_target_name(data, field)} ({median}{of}{len(data.texts)} texts)")
    first = "row 1 as text" if data.table is not None else "text 1"
    print(f"{first}: {shorten(data.texts[0])}", flush=True)
    _describe_categories(data)


def _describe_categories(data: Data) -> None:
    """One line naming the columns read as categories (cells without a number), and where a
    template lets a category's words join the next number's field."""
    from ..data.template import category_columns

    word_rows = getattr(data.table, "word_rows", None)
    if not word_rows:
        return
    rows = int(getattr(data.table, "word_sample", 0)) or len(data.texts)
    categories, partly = category_columns(word_rows, rows)
    if categories or partly:
        first = "the first " if rows < len(data.texts) else ""
        listed = ", ".join(categories) if categories else "none"
        mixed = "".join(
            f"; {c} partly ({n} of {first}{rows} rows hold no number there)"
            for c, n in partly.items()
        )
        print(f"columns read as categories (words, no number): {listed}{mixed}", flush=True)
    words = set(categories) | set(partly)
    for column, joined in data.template.joined_fields():
        if column in words:
            print(
                f"note: the words of column {column!r} join the field of column {joined!r} (the "
                "template has no ',' or '->' between them), so that field is split by "
                f"{column!r}'s value; put ', ' or ' -> ' between them",
                flush=True,
            )


def report_readouts(result: Any, held_out: int = 0, target_code: int | None = None) -> None:
    """Print one line on the solved readouts and one on the calibration, after training.

    Args:
        result: what :func:`cauchylin_hf.training.train` returned.
        held_out: the rows the calibration was asked to hold out
            (:func:`cauchylin.conformal.calibration_holdout`; 0: none).
        target_code: the context code of the target number (:func:`target_context`), or None.

    Example:
        >>> from types import SimpleNamespace
        >>> report_readouts(SimpleNamespace(readouts=None, calibration=None))
        the intervals are not calibrated (no rows held out to calibrate on): they are the model's Cauchy intervals
    """
    solved = result.readouts
    if solved is not None and solved.contexts:
        target = _target_solved(solved, target_code)
        among = "" if target is None else f"; the target's context: {target}"
        print(
            f"read the numbers of {solved.kept} of {len(solved.contexts)} contexts with a "
            f"readout solved on the training rows{among}",
            flush=True,
        )
    cal = result.calibration
    cauchy = "they are the model's Cauchy intervals"
    if cal is None:
        print(f"the intervals are not calibrated (no rows held out to calibrate on): {cauchy}")
        return
    rows = max((int(c["count"]) for c in cal.contexts), default=0)
    first, last = round(100 * cal.levels[0]), round(100 * cal.levels[-1])
    levels = f"{len(cal.levels)} levels, {first}% to {last}%"
    if cal.folds and not cal.contexts:
        print(
            "the intervals are not calibrated (too few rows to hold some out, and no context "
            f"with a solved readout to calibrate on the training rows): {cauchy}",
            flush=True,
        )
    elif cal.folds:
        print(
            f"calibrated the intervals ({levels}) of {len(cal.contexts)} context(s) with a "
            f"solved readout by cross-conformal widths ({cal.folds} folds of the training rows, "
            "each row scored by the readout solved without its fold: too few rows to hold some "
            "out); the numbers of the other contexts keep the model's Cauchy intervals (not "
            "calibrated)",
            flush=True,
        )
    elif rows:
        why = ""
        if held_out and result.calibration_size != held_out:
            why = (
                f" ({held_out} asked for: rows are held out by a hash of their text, so the "
                "count varies around it, and copies of a text count once)"
            )
        print(
            f"calibrated the intervals ({levels}) on {result.calibration_size} held-out rows "
            f"never trained on{why}",
            flush=True,
        )
    else:
        print(
            f"the {result.calibration_size} held-out rows hold too few numbers of any one "
            "context to calibrate on: the intervals are the model's Cauchy ones (not calibrated)",
            flush=True,
        )


def _target_solved(solved: Any, code: int | None) -> str | None:
    """Whether the target's context got a readout, in words (None: not known)."""
    if code is None:
        return None
    mine = [c for c in solved.contexts if c["code"] == code]
    if not mine:
        return "not among them (too few numbers to solve a readout on)"
    if mine[0]["kept"]:
        return "among them"
    return "not among them (its readout could not be solved)"


def target_context(model: Any, ntok: Any, text: str, field: str | None) -> int | None:
    """The context code of a text's target number (the last number, or the last of ``field``).

    Args:
        model: the model (:meth:`~cauchylin_hf.model.CauchyLMForCausalLM.context_codes`).
        ntok: its numeric tokenizer.
        text: a training text (the target's context is the same in every row of a table).
        field: the target field (:func:`target_field`), or None for the last number.

    Returns:
        The code, or None when the text holds no such number.

    Example:
        >>> from cauchylin_hf.testing import save_tiny_base
        >>> from cauchylin_hf.app.cli import load_causal_model
        >>> import tempfile
        >>> model, ntok = load_causal_model(save_tiny_base(tempfile.mkdtemp(), "qwen2", spare_rows=1))
        >>> a = target_context(model, ntok, "eggs 3, pens 4.", None)
        >>> a == target_context(model, ntok, "cups 9, pens 7.", None)  # the words before it
        True
        >>> target_context(model, ntok, "no number here.", None) is None
        True
    """
    import torch

    from ..numbers import field_of, find_numbers

    spans = find_numbers(text)
    which = [
        k
        for k, s in enumerate(spans)
        if field is None or field_of(text[(spans[k - 1].end if k else 0) : s.start]) == field
    ]
    ids = list(ntok(text)["input_ids"])
    at = [i for i, t in enumerate(ids) if t == ntok.num_token_id]  # one <NUM> per number
    if not which or len(at) != len(spans) or at[which[-1]] == 0:
        return None
    device = next(model.parameters()).device
    codes = model.context_codes(torch.tensor([ids], device=device))
    return int(codes[0, at[which[-1]] - 1])


def target_report(
    args: argparse.Namespace,
    model: Any,
    ntok: Any,
    data: Data,
    baseline: float | None,
    where: str,
    undefined: dict[str, str] | None = None,
    running: Any = None,
) -> dict[str, float]:
    """The number metrics of ``data`` and the learning check: the target's median absolute
    error beside the baseline's (one line), warnings when nothing was learnt.

    Args:
        args: the parsed arguments (``--batch-size``, ``--raw-intervals``, ``--json``).
        model: the model.
        ntok: its numeric tokenizer.
        data: the texts whose target numbers are scored.
        baseline: the training median (None: the scored targets' own median).
        where: what the texts are, in the printed line (``"held-out texts"``).
        undefined: a dict to fill with why ``spearman`` is ``nan`` in a group
            (:func:`~cauchylin_hf.predict.spearman_undefined`), for :func:`explain`.
        running: the :class:`~cauchylin_hf.predict.NumberMetrics` of ``data``'s predictions
            when they were read already (by ``evaluate_model``'s pass); None reads them here.

    Returns:
        The metrics of :func:`~cauchylin_hf.predict.number_metrics`, with
        ``target/mdae_baseline`` and ``target/spread_ratio`` where there are targets (read
        from a uniform random sample of the targets past
        :data:`~cauchylin_hf.predict.KEPT_VALUES` of them, its size under
        ``target/check_sample``).

    Raises:
        ValueError: no text of ``data`` holds a number.

    Example:
        >>> from cauchylin_hf.testing import save_tiny_base
        >>> from cauchylin_hf.app.cli import load_causal_model
        >>> import tempfile
        >>> model, ntok = load_causal_model(save_tiny_base(tempfile.mkdtemp(), "qwen2", spare_rows=1))
        >>> args = argparse.Namespace(command="evaluate", batch_size=2, json=False)
        >>> data = Data(["eggs 3.", "pens 4."], None, None, "t")
        >>> metrics = target_report(args, model, ntok, data, 3.0, "texts")  # doctest: +ELLIPSIS
        target on 2 texts: median absolute error ...
        >>> "target/mdae_baseline" in metrics
        True
    """
    from cauchylin.metrics import quantiles

    from ..predict import NumberMetrics, iter_number_predictions, learning_check

    if running is None:
        # bounded memory: the texts are read a batch at a time (past a size, from seeded samples)
        running = NumberMetrics(seed=getattr(args, "seed", 0))
        for batch in iter_number_predictions(
            model,
            ntok,
            data.texts,
            target_field=target_field(data.template, args),
            batch_size=args.batch_size,
            calibrated=not getattr(args, "raw_intervals", False),
        ):
            running.add(batch)
    if running.count == 0:
        raise ValueError("no text holds a number: nothing to predict")
    metrics = running.result()
    if undefined is not None:
        undefined.update(running.undefined())
    predicted, true = running.targets()
    if predicted.numel() == 0:
        return metrics
    if not bool(predicted.isfinite().all()):
        return metrics
    guess = "the training median"
    if baseline is None:  # a model folder from elsewhere: the evaluated targets' own median
        baseline = quantiles(true, (0.5,))[0]
        guess = "their own median (the model folder records no training median)"
    check = learning_check(predicted, true, baseline)
    metrics["target/mdae_baseline"] = check.baseline_mdae
    metrics["target/spread_ratio"] = check.spread_ratio
    count, sampled = running.target_count, ""
    if count > check.count:  # the check read a uniform sample of the targets
        metrics["target/check_sample"] = float(check.count)
        sampled = f" (the medians and spreads of a uniform sample of {check.count})"
    name = data.template.target if data.template is not None else "target"
    means = ""
    if check.compares_means:  # half the targets or more are the median: its median error is 0
        means = (
            f" (half the {name} values or more equal it: mean absolute errors {check.mae:.4g} "
            f"and {check.baseline_mae:.4g})"
        )
    print(
        f"{name} on {count} {where}: median absolute error {check.mdae:.4g}; predicting "
        f"{guess} ({check.baseline:.4g}) for every row: {check.baseline_mdae:.4g}{means}"
        f"{sampled}",
        file=sys.stderr if getattr(args, "json", False) else sys.stdout,
    )
    for message in check.warnings(name):
        warn(args, message)
    return metrics


def explain(
    args: argparse.Namespace, metrics: dict[str, float], undefined: dict[str, str] | None = None
) -> None:
    """Notes on what can look like a fault: ``nan`` values and a negative loss.

    Args:
        args: the parsed arguments (the command, for the notes).
        metrics: the printed metrics.
        undefined: why ``spearman`` is ``nan`` per group (filled by :func:`target_report`);
            the note names what happened to the first three.

    Example:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     explain(argparse.Namespace(command="evaluate"), {"eval/loss": -0.5})
        >>> "eval/loss is negative, which is fine" in err.getvalue()
        True
    """
    nan = sorted(k for k, v in metrics.items() if isinstance(v, float) and math.isnan(v))
    if nan:
        shown = ", ".join(nan[:3]) + (f" and {len(nan) - 3} more" if len(nan) > 3 else "")
        note(
            args,
            f"nan ({shown}) marks a value undefined for its group, not a failure: a rank "
            "correlation (spearman) needs at least two numbers whose predictions and true "
            f"values are not all equal{_what_happened(undefined or {})}",
        )
    loss = metrics.get("eval/loss")
    if loss is not None and loss < 0:
        note(
            args,
            "eval/loss is negative, which is fine: eval/loss = eval/cls_loss + reg_weight * "
            "eval/reg_loss, and eval/reg_loss is the Cauchy negative log-density of the "
            "numbers, log(pi scale_Y) + log(1 + z^2), below 0 when the predicted scale is "
            "under 1/pi (sharp predictions)",
        )


def _what_happened(undefined: dict[str, str]) -> str:
    """`` (here: group: reason; ...)`` for the first three groups, or nothing."""
    if not undefined:
        return ""
    said = [f"{group}: {reason}" for group, reason in list(undefined.items())[:3]]
    more = f"; and {len(undefined) - 3} more" if len(undefined) > 3 else ""
    return f" (here {'; '.join(said)}{more})"


def write_value(precision: Any, value: float, prefix: str, decimals: int | None) -> str:
    """A predicted number as the training data wrote its field (``inf`` and ``-inf`` as such).

    Args:
        precision: the :class:`~cauchylin_hf.precision.NumberPrecision` of the model.
        value: the number.
        prefix: the text before it (its field).
        decimals: ``--decimals``, or None for the field's own.

    Returns:
        The number as text.

    Example:
        >>> from cauchylin_hf.precision import NumberPrecision
        >>> write_value(NumberPrecision(), float("inf"), "price ", None)
        'inf'
    """
    if not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    return cast(str, precision.write(value, prefix, decimals))
