"""Several models read as one by ``predict`` and ``evaluate`` (``--member``, ``--calibration-file``).

Models trained alike from different seeds (``train --seed``) are read as their ensemble: each
number's law is the mean of the models' Cauchy laws in the value space,
``Cauchy(mean loc_k, mean scale_k)`` (:mod:`cauchylin_hf.ensemble` states why that is exact).
The models' own calibrations are not carried over, since each was fitted on one model's law;
``--calibration-file`` names texts (or a table) that none of the models trained on, and the
target intervals are calibrated on the averaged law's errors there
(:func:`cauchylin_hf.ensemble.ensemble_calibration`). With one model, ``--calibration-file``
calibrates its target intervals on those texts in place of its own calibration.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .checks import CliError, data_format, note
from .inputs import load_causal_model, read_data
from .reports import target_field

__all__ = [
    "calibrate",
    "evaluate_members",
    "load_members",
    "model_paths",
    "predict_members",
    "reads_members",
]

# what must agree between the models' data_format.json for one reading of the data to fit all
_SAME_FORMAT = ("template", "target")


def model_paths(args: argparse.Namespace) -> list[str]:
    """The model folder and every ``--member``, in that order."""
    return [str(args.model), *(getattr(args, "member", None) or [])]


def reads_members(args: argparse.Namespace) -> bool:
    """Whether the command reads the models' averaged law (``--member`` or
    ``--calibration-file`` given) rather than one model's own prediction."""
    return (
        bool(getattr(args, "member", None)) or getattr(args, "calibration_file", None) is not None
    )


def load_members(args: argparse.Namespace) -> list[tuple[Any, Any]]:
    """Load the model and each ``--member`` (with its own tokenizer; ``--tokenizer`` is the
    first model's) and check that one reading of the data fits them all.

    Raises:
        CliError: a folder that cannot be loaded, a model without ``<NUM>``, models of other
            value spaces, or a member trained on another template or target.
    """
    paths = model_paths(args)
    first = data_format(paths[0])
    models: list[tuple[Any, Any]] = []
    for k, path in enumerate(paths):
        model, ntok = load_causal_model(
            path, tokenizer=args.tokenizer if k == 0 else None, device=args.device
        )
        name = "the model" if k == 0 else f"--member {path!r}"
        if model.config.num_token_id is None:
            raise CliError(f"{name} has no <NUM> token: it cannot predict numbers")
        if k:
            space, ours = models[0][0].config.value_space, model.config.value_space
            if space != ours:
                raise CliError(
                    f"{name} reads numbers in the value space {ours!r}, the model in {space!r}: "
                    "only models trained alike can be averaged"
                )
            saved = data_format(path)
            for key in _SAME_FORMAT:
                if saved.get(key) != first.get(key):
                    raise CliError(
                        f"{name} was trained with {key} {saved.get(key)!r}, the model with "
                        f"{first.get(key)!r} (data_format.json): only models trained on the "
                        "same data can be averaged"
                    )
        models.append((model, ntok))
    return models


def calibrate(
    args: argparse.Namespace, models: Sequence[tuple[Any, Any]], levels: Sequence[float]
) -> Any:
    """The :class:`~cauchylin_hf.ensemble.EnsembleCalibration` of ``--calibration-file`` (None
    without one), with a note that says what it was fitted on.

    Raises:
        CliError: the file has no target numbers, or the models read its numbers differently.
    """
    from ..ensemble import ensemble_calibration
    from ..predict import number_predictions

    path = getattr(args, "calibration_file", None)
    if path is None:
        return None
    data = read_data(args, path, data_format(args.model))
    field = target_field(data.template, args)
    parts = [
        number_predictions(
            model,
            ntok,
            data.texts,
            target_field=field,
            levels=tuple(levels),
            batch_size=args.batch_size,
            calibrated=False,
        )
        for model, ntok in models
    ]
    try:
        calibration = ensemble_calibration(parts)
    except ValueError as exc:
        raise CliError(f"--calibration-file {path!r}: {exc}") from None
    widths = calibration.widths.tolist()
    uncovered = [c for c, w in zip(calibration.levels, widths, strict=True) if math.isnan(w)]
    few = ""
    if uncovered:  # ceil((n + 1) c) > n: no finite width has the guarantee
        listed = ", ".join(f"{round(100 * c)}%" for c in uncovered)
        few = f"; too few for {listed}, which keep the Cauchy intervals"
    which = "the ensemble's" if len(models) > 1 else "the model's"
    note(
        args,
        f"{which} target intervals are calibrated on the {calibration.count} target numbers of "
        f"{Path(path).name} (valid where none of the models trained on them){few}",
    )
    return calibration


def predict_members(
    args: argparse.Namespace,
    models: Sequence[tuple[Any, Any]],
    prompts: list[str],
    first: Any,
    calibration: Any,
) -> Any:
    """The averaged law's :class:`~cauchylin_hf.predict.ValuePrediction` of ``prompts``, the
    calibration applied to the prompts whose next number is of a field it was fitted on;
    ``first`` is the first model's prediction of them, read already (only its law is used)."""
    import torch

    from ..ensemble import average_value_predictions
    from ..precision import field_before
    from ..predict import predict_values

    parts = [first] + [
        predict_values(
            model, ntok, prompts, levels=args.levels, batch_size=args.batch_size, calibrated=False
        )
        for model, ntok in models[1:]
    ]
    rows = None
    if calibration is not None:
        rows = torch.tensor([field_before(p) in calibration.fields for p in prompts])
    return average_value_predictions(parts, calibration=calibration, rows=rows)


def evaluate_members(
    args: argparse.Namespace, models: Sequence[tuple[Any, Any]], texts: Any, field: str | None
) -> tuple[Any, list[float]]:
    """The :class:`~cauchylin_hf.predict.NumberMetrics` of the averaged law on ``texts``, read a
    batch at a time from every model at once (bounded memory at any data size), and each
    model's own target median absolute error (empty for one model)."""
    from cauchylin.levels import REPORTED_LEVELS

    from ..ensemble import average_number_predictions
    from ..predict import NumberMetrics, iter_number_predictions

    calibration = calibrate(args, models, REPORTED_LEVELS)
    running = NumberMetrics(seed=args.seed)
    alone = [NumberMetrics(seed=args.seed) for _ in models] if len(models) > 1 else []
    streams = [
        iter_number_predictions(
            model,
            ntok,
            texts,
            target_field=field,
            batch_size=args.batch_size,
            calibrated=False,
        )
        for model, ntok in models
    ]
    try:
        for parts in zip(*streams, strict=True):
            running.add(average_number_predictions(parts, calibration=calibration))
            if alone:
                for own, part in zip(alone, parts, strict=True):
                    own.add(part)
    except ValueError as exc:
        raise CliError(f"the models read the numbers of --data differently: {exc}") from None
    mdae = []
    for own in alone:
        if own.count:
            mdae.append(float(own.result().get("target/mdae", math.nan)))
    return running, mdae
