r"""Per-context readouts and calibrated intervals for a trained causal language model.

The regression head ``Y = W_reg U' + b_reg`` is one readout shared by every number of every
text, trained together with the backbone. After training, the backbone's features often hold a
number far better than that shared readout reads it (a ridge regression on the final hidden state
can be several times more accurate). Two steps, run by :func:`~cauchylin_hf.training.train`
after training (and by the command line and the demo):

* :func:`solve_readouts` reads every number of the training texts once, groups the numbers by
  their *context* (the ``config.readout_context_tokens`` tokens ending at the position that
  predicts them: in a table, a column's name), and solves, per context with enough numbers, the
  Cauchy readout ``Y ~ Cauchy(w . loc_U' + b, sigma)`` by penalised maximum likelihood
  (:func:`cauchylin.readout.fit_cauchy_readout`). The solved readout replaces the shared head for
  that context (the shared head's likelihood on those numbers is reported beside the readout's,
  but it is measured on the numbers the head was trained on, so it decides nothing).
* :func:`calibrate` reads the numbers of texts the model was *not* trained on and fits, per
  context (and for all other numbers together), split-conformal widths
  (:mod:`cauchylin.conformal`): the central interval of coverage ``c`` becomes
  ``loc_Y ± q(c) scale_Y``, which covers a new number of that context with probability at least
  ``c`` (the rows being exchangeable), whatever the errors' law.
* :func:`cross_calibrate`, for a dataset too small to hold texts out
  (:func:`cauchylin.conformal.calibration_holdout`), fits the widths of each context with a
  solved readout on the training texts themselves: the readout is solved again without each of
  ``folds`` folds of the texts (one cheap solve per fold, the penalty it was solved with) and
  each number is scored by the readout that did not see it (cross-conformal, CV+ style). The
  backbone did see those texts, so these widths are only as good as the readout's out-of-fold
  errors are like a new row's; the numbers the shared head reads stay uncalibrated (and are
  labelled so where intervals are shown).

Both are stored in the model (``model.action.readouts``, a
:class:`cauchylin.nn.readouts.ContextReadouts`, saved and loaded with its weights) and used by
:func:`~cauchylin_hf.predict.predict_values`, :func:`~cauchylin_hf.predict.number_predictions`,
``generate`` and ``forward``. The model's own Cauchy predictive stays what the heads compute;
``calibrated=False`` in the prediction functions gives the raw Cauchy intervals.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch.utils.data import Dataset

from cauchylin._validation import positive_int
from cauchylin.conformal import conformal_widths
from cauchylin.nn.modes import STANDARD
from cauchylin.nn.readouts import OTHER
from cauchylin.readout import DEFAULT_PENALTIES, CauchyReadout, cauchy_nll, fit_cauchy_readout
from cauchylin.value_space import to_value_space

from .data import NumericDataCollator, NumericDataset
from .loss import before_numbers
from .tokenizer import NumericTokenizer

__all__ = [
    "MIN_CALIBRATION_COUNT",
    "MIN_READOUT_COUNT",
    "CalibrationReport",
    "NumberFeatures",
    "ReadoutReport",
    "calibrate",
    "cross_calibrate",
    "number_features",
    "solve_readouts",
]

MIN_READOUT_COUNT = 30
"""The fewest numbers of one context that :func:`solve_readouts` solves a readout on."""

MIN_CALIBRATION_COUNT = 20
"""The fewest numbers of one context that :func:`calibrate` gives widths of their own (with 20,
levels up to 95% are calibrated: ``ceil(21 * 0.95) = 20``)."""

MAX_CONTEXTS = 256
"""The most contexts that get a readout (the most frequent ones)."""


@dataclass
class NumberFeatures:
    """The numbers of some texts, with what the model computes at the position before each.

    Attributes:
        codes: ``[N]`` int64 context codes (:meth:`~cauchylin_hf.model.CauchyLMForCausalLM.context_codes`).
        loc: ``[N, C]`` ``loc_U'`` in the standard mode at ``config.temperature`` (float64).
        numbers: ``[N, S]`` the earlier numbers of the text that the readouts read beside it
            (:meth:`~cauchylin_hf.model.CauchyLMForCausalLM.readout_context`; ``S = 0`` when they
            read ``loc_U'`` alone).
        loc_y: ``[N]`` the model's ``loc_Y`` there, with the readouts it has now.
        scale_y: ``[N]`` its ``scale_Y``.
        targets: ``[N]`` the numbers in the value space, ``t = g(y)``.
        text_index: ``[N]`` the text each number is in.

    Example:
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> f = number_features(model, ntok, ["a 1, b 2.", "a 5, b 7, c 9."])
        >>> f.text_index.tolist(), tuple(f.loc.shape)
        ([0, 0, 1, 1, 1], (5, 32))
    """

    codes: torch.Tensor
    loc: torch.Tensor
    numbers: torch.Tensor
    loc_y: torch.Tensor
    scale_y: torch.Tensor
    targets: torch.Tensor
    text_index: torch.Tensor

    def __len__(self) -> int:
        """The number of numbers."""
        return int(self.codes.numel())

    def features(self, table: Any) -> torch.Tensor:
        """``[N, C + S]`` what a readout of ``table`` reads at each number
        (:meth:`cauchylin.nn.readouts.ContextReadouts.features`)."""
        return cast(torch.Tensor, table.features(self.loc, self.numbers))


def _dataset(data: Dataset | Iterable[str], tokenizer: NumericTokenizer, name: str) -> Dataset:
    if isinstance(data, Dataset):
        return data
    texts = list(data)
    if not texts:
        raise ValueError(f"{name} is empty")
    return NumericDataset.from_texts(texts, tokenizer, name=name)


@torch.no_grad()
def number_features(
    model: Any,
    tokenizer: NumericTokenizer,
    data: Dataset | Iterable[str],
    *,
    batch_size: int = 32,
) -> NumberFeatures:
    """Read every number of some texts in one teacher-forced pass per batch.

    At each position whose next token is ``<NUM>`` (a real one, not the first token of a text):
    its context code, ``loc_U'`` of the standard mode at ``config.temperature`` (the training
    mode), the earlier numbers its readout reads, the model's ``loc_Y``/``scale_Y`` (with its
    current readouts) and the number.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` (put in eval mode).
        tokenizer: its numeric tokenizer.
        data: texts, or an encoded dataset (e.g. a :class:`~cauchylin_hf.data.dataset.NumericDataset`).
        batch_size: texts per forward pass.

    Returns:
        :class:`NumberFeatures` (on the CPU).

    Raises:
        ValueError: empty data or a bad batch size.
    """
    batch_size = positive_int("batch_size", batch_size)
    dataset = _dataset(data, tokenizer, "data")
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        collate_fn=NumericDataCollator(tokenizer, padding_side="right"),
    )
    num = int(model.config.num_token_id)
    temperature = float(model.config.temperature)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in NumberFeatures.__dataclass_fields__}
    start = 0
    try:
        for batch in loader:
            ids = batch["input_ids"].to(device)
            mask = batch["attention_mask"].to(device)
            values = batch["numeric_values"].to(device)
            hidden, _ = model.encode(ids, values, mask, use_cache=False)
            codes, numbers = model.readout_context(ids, values, mask)
            if numbers is None:
                numbers = torch.zeros(*ids.shape, 0, device=device)
            select = before_numbers(ids, mask, num)
            if bool(select.any()):
                _, act = model.heads(
                    hidden[select],
                    STANDARD,
                    temperature,
                    context=codes[select],
                    numbers=numbers[select] if numbers.shape[-1] else None,
                )
                parts["codes"].append(codes[select].cpu())
                parts["loc"].append(act.U_prime.loc.double().cpu())
                parts["numbers"].append(numbers[select].double().cpu())
                parts["loc_y"].append(act.loc_Y.double().cpu())
                parts["scale_y"].append(act.scale_Y.double().cpu())
                y = values[:, 1:][select[:, :-1]].double()
                parts["targets"].append(to_value_space(y, model.config.value_space).cpu())
                rows = torch.arange(ids.shape[0], device=device)[:, None].expand_as(select)
                parts["text_index"].append((rows[select] + start).cpu())
            start += ids.shape[0]
    finally:
        model.train(was_training)
    if not parts["codes"]:
        c = int(model.config.causal_hidden_size)
        empty = torch.zeros(0, dtype=torch.float64)
        return NumberFeatures(
            torch.zeros(0, dtype=torch.long),
            torch.zeros(0, c, dtype=torch.float64),
            torch.zeros(0, model.action.readouts.numbers, dtype=torch.float64),
            empty,
            empty,
            empty,
            torch.zeros(0, dtype=torch.long),
        )
    return NumberFeatures(**{k: torch.cat(v) for k, v in parts.items()})


@dataclass
class ReadoutReport:
    """What :func:`solve_readouts` did, per context it considered.

    Attributes:
        contexts: one dict per context with enough numbers: ``code``, ``count``, ``shared_nll``
            (the shared head's mean NLL on them), ``solved_nll`` (the readout's cross-validated
            NLL), ``penalty``, ``location`` (how the location was fitted, where it was) and
            ``kept`` (whether the readout replaced the shared head), and
            ``note`` (why a readout could not be solved there: the shared head stays; else
            empty).
        numbers: how many numbers were read.

    Example:
        >>> r = ReadoutReport([{"code": 5, "count": 40, "kept": True}], 52)
        >>> r.kept
        1
    """

    contexts: list[dict[str, Any]] = field(default_factory=list)
    numbers: int = 0

    @property
    def kept(self) -> int:
        """How many contexts got a solved readout."""
        return sum(1 for c in self.contexts if c["kept"])

    @property
    def unsolved(self) -> list[dict[str, Any]]:
        """The contexts whose readout could not be solved (each keeps the shared head)."""
        return [c for c in self.contexts if c.get("note")]


def _groups(
    codes: torch.Tensor, min_count: int, limit: int | None
) -> list[tuple[int, torch.Tensor]]:
    """``(code, row indices)`` of the codes with at least ``min_count`` rows, most frequent first."""
    if codes.numel() == 0:
        return []
    unique, inverse, counts = torch.unique(codes, return_inverse=True, return_counts=True)
    order = sorted(range(unique.numel()), key=lambda i: (-int(counts[i]), int(unique[i])))
    out = []
    for i in order:
        if int(counts[i]) < min_count:
            break
        out.append((int(unique[i]), (inverse == i).nonzero().flatten()))
        if limit is not None and len(out) >= limit:
            break
    return out


def solve_readouts(
    model: Any,
    tokenizer: NumericTokenizer,
    data: Dataset | Iterable[str],
    *,
    min_count: int = MIN_READOUT_COUNT,
    max_contexts: int = MAX_CONTEXTS,
    penalties: Sequence[float] = DEFAULT_PENALTIES,
    folds: int = 5,
    seed: int = 0,
    batch_size: int = 32,
    penalty_rule: str = "least",
    location: str = "cauchy",
) -> ReadoutReport:
    """Solve a readout per context on the training texts and put the better ones in the model.

    Every context with at least ``min_count`` numbers (the ``max_contexts`` most frequent) gets
    :func:`cauchylin.readout.fit_cauchy_readout` on the readout's features at its positions
    (``loc_U'``, followed by the text's ``config.readout_numbers`` earlier numbers when that is
    above 0: :meth:`cauchylin.nn.readouts.ContextReadouts.features`), the penalty chosen by
    ``folds``-fold cross-validation. The readout replaces the shared head for that context
    wherever the solve gives a finite readout. (The report holds the shared head's NLL on the
    same numbers beside the readout's cross-validated one; it is not a fair comparison to choose
    by: the head was trained on those numbers, and after many steps on a small table it fits
    them far better than it predicts new rows, while the readout's NLL is out of fold.)
    The model's earlier readouts and calibration are replaced (a calibration belongs to the
    readouts it was fitted with: run :func:`calibrate` after this).

    Args:
        model: a trained :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        tokenizer: its numeric tokenizer.
        data: the training texts (or the encoded training dataset).
        min_count: the fewest numbers a context needs (at least ``2 * folds``).
        max_contexts: the most contexts solved.
        penalties: the ridge penalties cross-validation picks from.
        folds: cross-validation folds.
        seed: seed of the fold assignment.
        batch_size: texts per forward pass.
        penalty_rule: what cross-validation makes of the penalties: the one of the least
            held-out NLL (``"least"``), the readouts of all averaged (``"average"``) or the one
            of the least median held-out absolute residual (``"median_error"``):
            :func:`cauchylin.readout.fit_cauchy_readout`.
        location: how each readout's location is fitted: ``"cauchy"`` (maximum likelihood),
            ``"least_squares"`` or ``"choose"`` (the one of the smaller median out-of-fold
            error, per context): :func:`cauchylin.readout.fit_cauchy_readout`. The report
            names each context's (``location``), and :func:`cross_calibrate` refits with it.

    Returns:
        A :class:`ReadoutReport`.

    Raises:
        ValueError: a model without ``<NUM>``, empty data, or bad counts.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> _ = torch.manual_seed(0)
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> texts = [f"width {w}, area {2 * w}." for w in range(1, 61)]
        >>> report = solve_readouts(model, ntok, texts)
        >>> report.numbers, len(report.contexts)  # two contexts: "width " and "area "
        (120, 2)
        >>> model.action.readouts.num_contexts == report.kept == model.config.readout_contexts
        True
    """
    _check_counts(model, min_count, max_contexts)
    if min_count < 2 * folds:
        raise ValueError(f"min_count must be at least 2 * folds = {2 * folds}, got {min_count}")
    batch_size = positive_int("batch_size", batch_size)
    # The shared head's predictions (without earlier readouts) are the baseline of each context;
    # a failure while they are read (bad data, Ctrl-C) puts the earlier table back.
    table = model.action.readouts
    before = (copy.deepcopy(table.state_dict()), model.config.readout_contexts, table.numbers)
    table.set_numbers(int(getattr(model.config, "readout_numbers", 0)))  # and empties it
    model.config.readout_contexts = 0
    try:
        shared = number_features(model, tokenizer, data, batch_size=batch_size)
    except BaseException:
        table.numbers = before[2]
        _restore(table, before[0])
        model.config.readout_contexts = before[1]
        raise
    x = shared.features(table)
    report = ReadoutReport(numbers=len(shared))
    codes: list[int] = []
    fits: list[CauchyReadout | None] = []
    for code, rows in _groups(shared.codes, min_count, max_contexts):
        t = shared.targets[rows]
        shared_nll = float(cauchy_nll(t, shared.loc_y[rows], shared.scale_y[rows]).mean())
        entry: dict[str, Any] = {"code": code, "count": int(rows.numel()), "shared_nll": shared_nll}
        try:
            fit = fit_cauchy_readout(
                x[rows],
                t,
                penalties=penalties,
                folds=folds,
                seed=seed,
                penalty_rule=penalty_rule,
                rtol=table.feature_rtol(),
                location=location,
            )
            solved_nll = (
                fit.cv_nll if not math.isnan(fit.cv_nll) else _in_sample_nll(fit, x[rows], t)
            )
            usable = bool(torch.isfinite(fit.weight).all()) and math.isfinite(float(fit.bias))
            usable = usable and math.isfinite(float(fit.noise)) and float(fit.noise) > 0
            if not usable:
                raise ValueError("the solve gave a readout that is not finite")
        except (RuntimeError, ValueError) as exc:  # torch.linalg.LinAlgError is a RuntimeError
            # The trained model stays as it is: that context keeps the shared head.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            report.contexts.append(
                {
                    **entry,
                    "solved_nll": math.nan,
                    "penalty": math.nan,
                    "kept": False,
                    "note": f"the readout could not be solved ({first})",
                }
            )
            continue
        report.contexts.append(
            {
                **entry,
                "solved_nll": solved_nll,
                "penalty": fit.penalty,
                "location": fit.location,
                "kept": True,
                "note": "",
            }
        )
        codes.append(code)
        fits.append(fit)
    table.store(codes, fits)
    model.config.readout_contexts = table.num_contexts
    return report


def _restore(table: Any, state: dict[str, torch.Tensor]) -> None:
    """Put a table's saved buffers back (its rows, readouts, widths and counts)."""
    for name, value in state.items():
        table.register_buffer(name, value)


def _in_sample_nll(fit: CauchyReadout, x: torch.Tensor, t: torch.Tensor) -> float:
    loc, scale = fit.predict(x)
    return float(cauchy_nll(t, loc, scale).mean())


def _check_counts(model: Any, min_count: int, max_contexts: int) -> None:
    if getattr(getattr(model, "config", None), "num_token_id", None) is None:
        raise ValueError("the model has no <NUM> token (config.num_token_id is None)")
    min_count = positive_int("min_count", min_count)
    max_contexts = positive_int("max_contexts", max_contexts)


@dataclass
class CalibrationReport:
    """What :func:`calibrate` did.

    Attributes:
        levels: the calibrated coverages.
        contexts: one dict per calibrated row: ``code`` (:data:`~cauchylin.nn.readouts.OTHER`
            for the pooled row), ``count`` and ``widths`` (one per level; ``inf`` where the
            count is too small for the level).
        numbers: how many numbers were read.
        folds: 0 for split-conformal widths (:func:`calibrate`, on held-out texts), else the
            folds of the cross-conformal widths (:func:`cross_calibrate`, on the training
            texts).

    Example:
        >>> r = CalibrationReport((0.5,), [{"code": -1, "count": 25, "widths": [0.7]}], 25)
        >>> r.calibrated_numbers
        25
    """

    levels: tuple[float, ...]
    contexts: list[dict[str, Any]] = field(default_factory=list)
    numbers: int = 0
    folds: int = 0

    @property
    def calibrated_numbers(self) -> int:
        """How many of the numbers fell in a calibrated row."""
        return sum(int(c["count"]) for c in self.contexts)


def calibrate(
    model: Any,
    tokenizer: NumericTokenizer,
    data: Dataset | Iterable[str],
    *,
    min_count: int = MIN_CALIBRATION_COUNT,
    max_contexts: int = MAX_CONTEXTS,
    batch_size: int = 32,
) -> CalibrationReport:
    """Fit split-conformal widths on texts the model was not trained on, per context.

    Reads every number of ``data`` with the model as it is (its solved readouts included); each
    context with at least ``min_count`` numbers (the ``max_contexts`` most frequent) gets the
    widths :func:`cauchylin.conformal.conformal_widths` of its numbers at every level of
    ``config.calibration_levels``, and the other numbers that the shared head reads (contexts
    without a solved readout), together and when at least ``min_count``, the widths of the
    :data:`~cauchylin.nn.readouts.OTHER` row; the numbers of a solved context without enough
    calibration numbers of its own keep the readout's Cauchy intervals. A level the count
    is too small for (``ceil((n + 1) c) > n``) stays uncalibrated there. Earlier widths are
    replaced; solved readouts are kept.

    Args:
        model: a trained :class:`~cauchylin_hf.model.CauchyLMForCausalLM`.
        tokenizer: its numeric tokenizer.
        data: held-out texts (or an encoded dataset) that training did not see.
        min_count: the fewest numbers a row is calibrated on.
        max_contexts: the most contexts with rows of their own.
        batch_size: texts per forward pass.

    Returns:
        A :class:`CalibrationReport`.

    Raises:
        ValueError: a model without ``<NUM>``, empty data, or bad counts.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> _ = torch.manual_seed(0)
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> held = [f"width {w}, area {2 * w}." for w in range(100, 130)]
        >>> report = calibrate(model, ntok, held)
        >>> [c["count"] for c in report.contexts]  # "width " and "area ", 30 each
        [30, 30]
        >>> 0.5 in report.levels, model.action.readouts.num_contexts
        (True, 2)
    """
    _check_counts(model, min_count, max_contexts)
    feats = number_features(model, tokenizer, data, batch_size=batch_size)
    levels = tuple(float(c) for c in model.config.calibration_levels)
    table = model.action.readouts
    report = CalibrationReport(levels=levels, numbers=len(feats))
    own = _groups(feats.codes, min_count, max_contexts)
    calibrated: dict[int, tuple[torch.Tensor, int]] = {}
    taken = torch.zeros(len(feats), dtype=torch.bool)
    for code, rows in own:
        if code == OTHER:
            continue
        taken[rows] = True
        calibrated[code] = (_widths(feats, rows, levels), int(rows.numel()))
    # The pool: the other numbers that the shared head reads. Errors in units of the model's
    # scale are comparable across the contexts of one head; a solved readout's are not (a
    # context read almost exactly has a tiny scale: pooled with the shared head's numbers, its
    # errors made the pooled 95% width a thousand scales on the demo corpus).
    solved = torch.zeros(len(feats), dtype=torch.bool)
    if table.num_contexts:
        where = table.lookup(feats.codes.to(table.contexts.device))
        solved = ((where >= 0) & table.is_solved[where.clamp(min=0)]).cpu()
    rest = (~taken & ~solved).nonzero().flatten()
    if rest.numel() >= min_count:
        calibrated[OTHER] = (_widths(feats, rest, levels), int(rest.numel()))
    _store_widths(model, calibrated, report)
    return report


def _store_widths(
    model: Any, calibrated: dict[int, tuple[torch.Tensor, int]], report: CalibrationReport
) -> None:
    """Put the widths of ``calibrated`` (``{code: (widths, count)}``) in the model's table,
    replacing earlier widths and keeping the solved readouts; list them in ``report``."""
    table = model.action.readouts
    levels = report.levels
    for code, (w, n) in calibrated.items():
        report.contexts.append({"code": code, "count": n, "widths": w.tolist()})
    # Keep the solved rows (their readouts) and add rows for calibrated contexts without one.
    old = {int(c): i for i, c in enumerate(table.codes.tolist())}
    every = sorted(set(old) | set(calibrated))
    fits = [None if old.get(code) is None else table.readout(old[code]) for code in every]
    widths = torch.full((len(every), len(levels)), math.nan, dtype=torch.float64)
    counts = []
    for j, code in enumerate(every):
        if code in calibrated:
            widths[j] = calibrated[code][0]
        counts.append(calibrated[code][1] if code in calibrated else 0)
    rows_kept = [j for j, code in enumerate(every) if fits[j] is not None or code in calibrated]
    table.store(
        [every[j] for j in rows_kept],
        [fits[j] for j in rows_kept],
        widths[rows_kept],
        [counts[j] for j in rows_kept],
    )
    model.config.readout_contexts = table.num_contexts


def cross_calibrate(
    model: Any,
    tokenizer: NumericTokenizer,
    data: Dataset | Iterable[str],
    readouts: ReadoutReport,
    *,
    folds: int | None = None,
    seed: int = 0,
    min_count: int = MIN_CALIBRATION_COUNT,
    batch_size: int = 32,
) -> CalibrationReport:
    """Cross-conformal widths from the training texts, for data too small to hold texts out.

    For each context with a solved readout and at least ``min_count`` numbers in ``data``: the
    texts are dealt into ``folds`` folds (copies of a text together, shuffled with ``seed``;
    None: one fold per text, jackknife+),
    the readout is solved again on the other folds with the penalty of ``readouts`` (one solve
    per fold), and each number's score is ``|t - loc| / scale`` under the readout of its fold.
    The widths :func:`cauchylin.conformal.conformal_widths` of those out-of-fold scores then
    scale the intervals of the readout solved on every text. The contexts the shared head reads
    keep the Cauchy intervals: its errors on the texts it was trained on are no new row's.

    The guarantee is weaker than :func:`calibrate`'s: the backbone was trained on these texts
    (its features may fit them better than a new row's), and out-of-fold scores are CV+'s, whose
    coverage is at least ``1 - 2 (1 - c)`` in the worst case (Barber et al., 2021) and about
    ``c`` in practice. Fewer folds err on the wide side (each fold's readout is solved on fewer
    rows than the one used): on three 60-row tables (1000 fresh rows each) 5 folds covered on
    average 0.61, 0.91 and 0.96 of the fresh rows at 50%, 80% and 90%, one fold per text 0.52,
    0.88 and 0.94 (the default; about 0.07 s per text and context on one CPU core).

    Args:
        model: a trained :class:`~cauchylin_hf.model.CauchyLMForCausalLM` with its solved
            readouts (:func:`solve_readouts`).
        tokenizer: its numeric tokenizer.
        data: the texts the readouts were solved on (or their encoded dataset).
        readouts: what :func:`solve_readouts` returned (the penalty of each context).
        folds: the folds (at least 2), or None for one per text.
        seed: seed of the fold assignment.
        min_count: the fewest numbers a context is calibrated on.
        batch_size: texts per forward pass.

    Returns:
        A :class:`CalibrationReport` with ``folds`` set (to the folds used).

    Raises:
        ValueError: a model without ``<NUM>``, empty data, or bad counts.

    Example:
        >>> import torch
        >>> from cauchylin_hf.model import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> _ = torch.manual_seed(0)
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> texts = [f"width {w}, area {2 * w}." for w in range(1, 61)]
        >>> solved = solve_readouts(model, ntok, texts)
        >>> report = cross_calibrate(model, ntok, texts, solved, folds=5)
        >>> report.folds, [c["count"] for c in report.contexts] == [60] * solved.kept
        (5, True)
    """
    _check_counts(model, min_count, MAX_CONTEXTS)
    if folds is not None and positive_int("folds", folds) < 2:
        raise ValueError(f"folds must be at least 2, got {folds}")
    feats = number_features(model, tokenizer, data, batch_size=batch_size)
    levels = tuple(float(c) for c in model.config.calibration_levels)
    penalty = {int(c["code"]): float(c["penalty"]) for c in readouts.contexts if c["kept"]}
    fitted = {int(c["code"]): c.get("location", "cauchy") for c in readouts.contexts if c["kept"]}
    fold, folds = _text_folds(feats, folds, seed)
    report = CalibrationReport(levels=levels, numbers=len(feats), folds=folds)
    calibrated: dict[int, tuple[torch.Tensor, int]] = {}
    features = feats.features(model.action.readouts)  # what the solved readouts read
    rtol = model.action.readouts.feature_rtol()
    for code, rows in _groups(feats.codes, min_count, None):
        if code not in penalty:
            continue
        x, t = features[rows], feats.targets[rows]
        loc, scale = torch.zeros_like(t), torch.ones_like(t)
        scored = torch.zeros_like(t, dtype=torch.bool)
        for j in range(folds):
            out = fold[rows] == j
            if not bool(out.any()) or int((~out).sum()) < 2:
                continue  # a fold with every number of the context: none left to solve on
            fit = fit_cauchy_readout(
                x[~out],
                t[~out],
                penalties=[penalty[code]],
                seed=seed,
                rtol=rtol,
                location=fitted[code],
            )
            loc[out], scale[out] = fit.predict(x[out])
            scored |= out
        n = int(scored.sum())
        if n < min_count:
            continue
        scale = scale.clamp(min=torch.finfo(torch.float64).tiny)
        calibrated[code] = (conformal_widths(t[scored], loc[scored], scale[scored], levels), n)
    _store_widths(model, calibrated, report)  # no pooled row: the shared head's stay Cauchy
    return report


def _text_folds(feats: NumberFeatures, folds: int | None, seed: int) -> tuple[torch.Tensor, int]:
    """``([N] the fold of each number, the folds)``: its text's, the texts dealt at random into
    ``folds`` folds (None: one per text), copies of a text (the same numbers read at the same
    features) together."""
    if len(feats) == 0:
        return feats.text_index.clone(), folds or 0
    per_text: dict[int, list[float]] = {}
    for ti, tv, first in zip(
        feats.text_index.tolist(), feats.targets.tolist(), feats.loc[:, 0].tolist(), strict=True
    ):
        per_text.setdefault(ti, []).extend((tv, first))
    keys: dict[tuple[float, ...], int] = {}
    group = torch.zeros(int(feats.text_index.max()) + 1, dtype=torch.long)
    for ti, key in per_text.items():
        group[ti] = keys.setdefault(tuple(key), len(keys))
    k = len(keys) if folds is None else min(folds, len(keys))
    order = torch.randperm(len(keys), generator=torch.Generator().manual_seed(seed))
    fold_of = torch.empty(len(keys), dtype=torch.long)
    fold_of[order] = torch.arange(len(keys)) % k
    return fold_of[group[feats.text_index]], k


def _widths(feats: NumberFeatures, rows: torch.Tensor, levels: tuple[float, ...]) -> torch.Tensor:
    scale = feats.scale_y[rows].clamp(min=torch.finfo(torch.float64).tiny)
    return conformal_widths(feats.targets[rows], feats.loc_y[rows], scale, levels)
