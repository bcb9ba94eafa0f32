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

    Example:
        >>> print_metrics({"eval/loss": 1.25, "eval/acc": 0.5})
        eval/acc   0.5
        eval/loss  1.25
    """
    width = max(len(k) for k in metrics)
    for key in sorted(metrics):
        print(f"{key.ljust(width)}  {metrics[key]:.6g}")


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

    from ..streaming import STATS_ROWS

    values = torch.tensor(targets, dtype=torch.float64)
    median = f"median {quantiles(values, (0.5,))[0]:.6g} over " if targets else "none in "
    of = f"a sample of {len(targets)} of " if len(data.texts) > STATS_ROWS else ""
    print(f"target: {_target_name(data, field)} ({median}{of}{len(data.texts)} texts)")
    first = "row 1 as text" if data.table is not None else "text 1"
    print(f"{first}: {shorten(data.texts[0])}", flush=True)


def report_readouts(result: Any) -> None:
    """Print one line on the solved readouts and one on the calibration, after training.

    Args:
        result: what :func:`cauchylin_hf.training.train` returned.

    Example:
        >>> from types import SimpleNamespace
        >>> report_readouts(SimpleNamespace(readouts=None, calibration=None))
    """
    solved = result.readouts
    if solved is not None and solved.contexts:
        print(
            f"read the numbers of {solved.kept} of {len(solved.contexts)} contexts with a "
            "readout solved on the training rows (where it reads them better than the shared "
            "head)",
            flush=True,
        )
    cal = result.calibration
    if cal is None:
        return
    rows = max((int(c["count"]) for c in cal.contexts), default=0)
    if rows:
        levels = f"{round(100 * cal.levels[0])}% to {round(100 * cal.levels[-1])}%"
        print(
            f"calibrated the intervals ({len(cal.levels)} levels, {levels}) on "
            f"{result.calibration_size} held-out rows never trained on",
            flush=True,
        )
    else:
        print(
            f"the {result.calibration_size} held-out rows hold too few numbers of any one "
            "context to calibrate on: the intervals are the model's Cauchy ones",
            flush=True,
        )


def target_report(
    args: argparse.Namespace,
    model: Any,
    ntok: Any,
    data: Data,
    baseline: float | None,
    where: str,
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

    Returns:
        The metrics of :func:`~cauchylin_hf.predict.number_metrics`, with
        ``target/mdae_baseline`` and ``target/spread_ratio`` where there are targets.

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

    running = NumberMetrics()  # bounded memory: the texts are read a batch at a time
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
    name = data.template.target if data.template is not None else "target"
    print(
        f"{name} on {check.count} {where}: median absolute error {check.mdae:.4g}; predicting "
        f"{guess} ({check.baseline:.4g}) for every row: {check.baseline_mdae:.4g}",
        file=sys.stderr if getattr(args, "json", False) else sys.stdout,
    )
    for message in check.warnings(name):
        warn(args, message)
    return metrics


def explain(args: argparse.Namespace, metrics: dict[str, float]) -> None:
    """Notes on what can look like a fault: ``nan`` values and a negative loss.

    Args:
        args: the parsed arguments (the command, for the notes).
        metrics: the printed metrics.

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
            "values are not all equal (a field seen once has none)",
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
