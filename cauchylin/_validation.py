"""The argument checks of cauchylin: every module checks its public arguments with these.

Each check raises ``ValueError`` (a :class:`BroadcastError` for shapes that do not broadcast)
with a message that names the offending argument, and its shape for tensors, so a user can tell
at once which input was wrong. The type and size checks (:func:`require_tensor`,
:func:`positive_int`, :func:`integer`, :func:`finite_number`, :func:`one_of`, :func:`flag`) run at a public entry point; code
below it trusts what was checked. Errors that belong to one operation rather than to an argument
(an exact law with no closed form, an index that would drop the component dimension) are raised
where the operation is. Value checks (finite, positive) need a
device synchronisation; they run only while validation is enabled, which it is by default and can
be switched off globally (:func:`set_validate_args`), for a block (:func:`validation`), or per
object (``validate_args=False``).

Value checks read tensor *data* on the host (one ``torch.aminmax`` pass per tensor). While a graph is
being captured -- ``torch.jit.trace``, ``torch.compile`` (Dynamo), ``torch.export`` -- there is no
data to read, so the value checks are skipped there (:func:`is_tracing`); shape checks still run.
Validate the data at the boundary (before the traced or compiled call) when it matters.

Under the ``torch.func`` transforms (``vmap``, ``grad``, ``jacrev``, ``jacfwd``, ``jvp``,
``functionalize``) the value checks *do* run: a tensor seen inside a transform is a wrapper (a
batched tensor of ``vmap``, a gradient-tracking tensor of ``grad``) whose ``.item()`` or Python
``bool`` is refused (``vmap``: "data-dependent control flow"), so the checks read the plain tensor
underneath instead (:func:`host_values`): every value of every batch member, detached. A check
then fails when any member of the ``vmap`` batch holds a bad value, with the same message as the
loop over the members would give for the first bad one. Nothing is read while a graph is
captured, also under a transform inside ``torch.compile``.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterable, Iterator, Sequence

import torch

__all__ = [
    "BroadcastError",
    "auto_or_share",
    "broadcast_shapes_or_raise",
    "check_binary_mask",
    "check_finite",
    "check_positive_finite",
    "check_same_shape",
    "finite_number",
    "flag",
    "host_values",
    "integer",
    "is_tracing",
    "is_validating",
    "one_of",
    "positive_int",
    "require_tensor",
    "set_validate_args",
    "transforms_active",
    "validation",
]

_VALIDATE_DEFAULT = True


def set_validate_args(enabled: bool) -> None:
    """Switch argument-value validation on or off globally.

    The switch is the default of every ``validate_args=None``. Shape checks always run (they
    cost nothing); value checks (NaN, inf, non-positive scales) synchronise with the device and
    can be disabled for speed. A :class:`~cauchylin.CauchyVector` and the losses read the switch
    whenever they check a value; a :mod:`cauchylin.distributions` object reads it once, when it is
    built. To switch it for one block only, use :func:`validation`.

    Args:
        enabled: ``True`` to run value checks (the default at import), ``False`` to skip them.

    Example:
        >>> import torch, cauchylin
        >>> nan_loc = torch.tensor([float("nan")])
        >>> cauchylin.set_validate_args(False)
        >>> cauchylin.CauchyVector(nan_loc, torch.ones(1)).shape  # accepted unchecked
        torch.Size([1])
        >>> cauchylin.set_validate_args(True)
        >>> cauchylin.CauchyVector(nan_loc, torch.ones(1))
        Traceback (most recent call last):
        ...
        ValueError: loc must be finite, but it holds NaN (shape (1,), dtype torch.float32)
    """
    global _VALIDATE_DEFAULT
    _VALIDATE_DEFAULT = bool(enabled)


def is_tracing() -> bool:
    """Whether a graph is being captured: ``torch.jit.trace``, ``torch.compile`` or ``torch.export``.

    Code that branches on tensor *values* on the host (value checks, fast paths chosen by a
    reduction) must not run then: the branch would be frozen into the graph, or break it.

    Returns:
        ``True`` inside ``torch.jit.trace``, while Dynamo compiles (``torch.compile``) and while
        ``torch.export`` exports; ``False`` in eager execution.

    Example:
        >>> is_tracing()  # eager execution
        False
    """
    if torch.jit.is_tracing():
        return True
    compiler = getattr(torch, "compiler", None)
    if compiler is None:  # pragma: no cover - torch < 2.1
        return False
    if compiler.is_compiling():
        return True
    is_exporting = getattr(compiler, "is_exporting", None)
    return bool(is_exporting is not None and is_exporting())


def transforms_active() -> bool:
    """Whether a ``torch.func`` transform (``vmap``, ``grad``, ``jvp``, ...) is running.

    Kernels that take a fast path with in-place ``out=`` operations or a host-side reduction
    (neither works on a batched tensor) take their functional path then.

    Returns:
        ``True`` inside ``torch.func.vmap``, ``grad``, ``jacrev``, ``jacfwd``, ``jvp``,
        ``hessian`` and ``functionalize`` (and the ``torch.vmap`` alias); ``False`` otherwise.

    Example:
        >>> import torch
        >>> transforms_active()
        False
        >>> torch.func.vmap(lambda x: torch.tensor(transforms_active()))(torch.zeros(2))
        tensor([True, True])
    """
    return _peek is not None and _peek() is not None


def host_values(t: torch.Tensor) -> torch.Tensor | None:
    """Every value ``t`` holds, as a plain detached tensor that can be read on the host.

    Outside ``torch.func`` this is ``t`` (``t.detach()`` if it requires grad). Inside a transform ``t`` may be a wrapper:
    a batched tensor of ``vmap`` (its values are those of all batch members), a gradient-tracking
    tensor of ``grad``/``jvp`` or a functional tensor of ``functionalize``. Each layer is
    unwrapped, so the result holds the values of every batch member. Only the *values* are
    meant to be read (a reduction such as ``aminmax``, ``all``): the batch dimensions of the
    layers are not in any particular place, so the result's shape is not ``t``'s.

    Args:
        t: any tensor.

    Returns:
        The plain tensor of ``t``'s values (``t.numel()`` of them times the batch sizes of the
        ``vmap`` levels around it), or ``None`` while a graph is captured (:func:`is_tracing`),
        where there are no values to read.

    Example:
        >>> import torch
        >>> def smallest(x):
        ...     print(host_values(x).amin().item())
        ...     return x
        >>> _ = torch.func.vmap(smallest)(torch.tensor([[3.0, 2.0], [5.0, -1.0]]))  # both rows
        -1.0
    """
    if is_tracing():
        return None
    if _FUNCTORCH is None:  # pragma: no cover - a torch without torch.func
        return t.detach()
    for _ in range(64):  # one pass per transform level (far fewer in practice)
        if _is_batched(t) or _is_gradtracking(t):
            t = _get_unwrapped(t)
        elif _is_functional(t):
            t = torch._from_functional_tensor(t)
        else:
            break
    return t.detach() if t.requires_grad else t  # (a detached view costs an op: skip it if plain)


# (looked up once: host_values runs on every validated call under a transform)
_FUNCTORCH = getattr(torch._C, "_functorch", None)
if _FUNCTORCH is not None:
    _is_batched = _FUNCTORCH.is_batchedtensor
    _is_gradtracking = _FUNCTORCH.is_gradtrackingtensor
    _is_functional = _FUNCTORCH.is_functionaltensor
    _get_unwrapped = _FUNCTORCH.get_unwrapped
_peek = getattr(_FUNCTORCH, "peek_interpreter_stack", None)


def is_validating(validate_args: bool | None = None) -> bool:
    """Whether value checks run: the per-object flag when given, else the global default.

    Never while a graph is captured (:func:`is_tracing`): a value check reads tensor data on
    the host, which a traced, compiled or exported graph cannot do.

    Args:
        validate_args: a per-object setting, or ``None`` for the global default.

    Returns:
        ``True`` when value checks should run.

    Example:
        >>> is_validating(False), is_validating(None)
        (False, True)
    """
    if is_tracing():
        return False
    return _VALIDATE_DEFAULT if validate_args is None else bool(validate_args)


@contextlib.contextmanager
def validation(enabled: bool) -> Iterator[None]:
    """Context manager that sets the global validation default inside a ``with`` block.

    The previous setting is restored on exit, also when the block raises.

    Args:
        enabled: the setting inside the block (see :func:`set_validate_args`).

    Yields:
        ``None``; the block runs with validation set to ``enabled``.

    Example:
        >>> import torch, cauchylin
        >>> from cauchylin._validation import is_validating
        >>> with cauchylin.validation(False):
        ...     u = cauchylin.CauchyVector(torch.tensor([float("nan")]), torch.ones(1))
        ...     print(is_validating())
        False
        >>> is_validating()  # restored
        True
    """
    global _VALIDATE_DEFAULT
    previous = _VALIDATE_DEFAULT
    _VALIDATE_DEFAULT = bool(enabled)
    try:
        yield
    finally:
        _VALIDATE_DEFAULT = previous


def require_tensor(
    name: str, value: object, *, floating: bool = False, integer: bool = False
) -> torch.Tensor:
    """``value`` if it is a ``torch.Tensor`` (of a floating or an integer dtype when asked).

    Args:
        name: the argument name used in the message.
        value: the argument.
        floating: require a floating-point dtype.
        integer: require an integer dtype (``bool`` does not count).

    Returns:
        ``value``, typed as a tensor.

    Raises:
        ValueError: ``value`` is not a tensor, or not of the required kind of dtype.

    Example:
        >>> import torch
        >>> require_tensor("labels", [1, 2])
        Traceback (most recent call last):
        ...
        ValueError: labels must be a torch.Tensor, got list
        >>> require_tensor("loc", torch.tensor([1]), floating=True)
        Traceback (most recent call last):
        ...
        ValueError: loc must be a floating-point tensor, got dtype torch.int64
    """
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if floating and not value.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    if integer and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise ValueError(f"{name} must be an integer tensor, got dtype {value.dtype}")
    return value


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an ``int >= 1`` (not a bool).

    Args:
        name: the argument name used in the message.
        value: the argument.

    Returns:
        ``value`` as an ``int``.

    Raises:
        ValueError: anything else.

    Example:
        >>> positive_int("causal_size", 0)
        Traceback (most recent call last):
        ...
        ValueError: causal_size must be a positive int, got 0
    """
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def integer(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` if it is an ``int`` (not a bool) in ``[minimum, maximum]`` (each bound optional).

    Args:
        name: the argument name used in the message.
        value: the argument (a Python or NumPy integer).
        minimum: the smallest value allowed, or None.
        maximum: the largest value allowed, or None.

    Returns:
        ``value`` as an ``int``.

    Raises:
        ValueError: not an integer, a bool, or outside the bounds.

    Example:
        >>> integer("readout_contexts", 0, minimum=0)
        0
        >>> integer("reg_context_tokens", 4, minimum=0, maximum=3)
        Traceback (most recent call last):
        ...
        ValueError: reg_context_tokens must be an int in [0, 3], got 4
    """
    if minimum is not None and maximum is not None:
        bound = f" in [{minimum}, {maximum}]"
    elif minimum is not None:
        bound = f" >= {minimum}"
    elif maximum is not None:
        bound = f" <= {maximum}"
    else:
        bound = ""
    message = f"{name} must be an int{bound}, got {value!r}"
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(message)
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise ValueError(message)
    return v


def finite_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    exclusive: bool = False,
    maximum: float | None = None,
) -> float:
    """``float(value)`` for a finite real number (not a bool), within the bounds if given.

    Args:
        name: the argument name used in the message.
        value: the argument (a Python or NumPy real number).
        minimum: the smallest value allowed, or None.
        exclusive: ``minimum`` itself is not allowed (``> minimum`` instead of ``>=``).
        maximum: the largest value allowed (inclusive), or None.

    Returns:
        The number as a ``float``.

    Raises:
        ValueError: not a real number, a bool, NaN, infinite, below ``minimum`` or above
            ``maximum``.

    Example:
        >>> finite_number("threshold", 2)
        2.0
        >>> finite_number("reg_weight", -1, minimum=0)
        Traceback (most recent call last):
        ...
        ValueError: reg_weight must be a finite number >= 0, got -1
        >>> finite_number("alpha", 1.5, minimum=0, maximum=1)
        Traceback (most recent call last):
        ...
        ValueError: alpha must be a finite number in [0, 1], got 1.5
    """
    if minimum is not None and maximum is not None:
        bound = f" in {'(' if exclusive else '['}{minimum:g}, {maximum:g}]"
    elif minimum is not None:
        bound = f" {'>' if exclusive else '>='} {minimum:g}"
    elif maximum is not None:
        bound = f" <= {maximum:g}"
    else:
        bound = ""
    message = f"{name} must be a finite number{bound}, got {value!r}"
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(message)
    v = float(value)
    low = minimum is not None and (v <= minimum if exclusive else v < minimum)
    high = maximum is not None and v > maximum
    if not math.isfinite(v) or low or high:
        raise ValueError(message)
    return v


def flag(name: str, value: object) -> bool:
    """``value`` if it is a ``bool`` (``True``/``False``, not 0/1 or a string).

    Args:
        name: the argument name used in the message.
        value: the argument.

    Returns:
        ``value``.

    Raises:
        ValueError: anything but a bool.

    Example:
        >>> flag("freeze_backbone", "yes")
        Traceback (most recent call last):
        ...
        ValueError: freeze_backbone must be a bool, got 'yes'
    """
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return value


def auto_or_share(name: str, value: object) -> str | float | None:
    """A hold-out setting: ``"auto"``, a share in ``(0, 1)``, or None (None and 0: none).

    Args:
        name: the argument name used in the message.
        value: the argument.

    Returns:
        ``"auto"``, the share as a float, or None.

    Raises:
        ValueError: another string, a bool or another type, or a share outside ``[0, 1)``.

    Example:
        >>> auto_or_share("calibration", "auto"), auto_or_share("calibration", 0), auto_or_share("x", 0.25)
        ('auto', None, 0.25)
        >>> auto_or_share("step_choice", 1.5)
        Traceback (most recent call last):
        ...
        ValueError: step_choice must be a share in (0, 1), got 1.5
    """
    if value is None:
        return None
    if isinstance(value, str):
        if value != "auto":
            raise ValueError(f'{name} must be "auto", a share in (0, 1) or None, got {value!r}')
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a share in [0, 1), got {value!r}")
    share = float(value)
    if share == 0.0:
        return None
    if not 0.0 < share < 1.0:
        raise ValueError(f"{name} must be a share in (0, 1), got {value!r}")
    return share


def one_of(name: str, value: object, choices: Sequence[object]) -> object:
    """``value`` if it is one of ``choices``.

    Args:
        name: the argument name used in the message.
        value: the argument.
        choices: the allowed values (listed in the message in this order).

    Returns:
        ``value``.

    Raises:
        ValueError: ``value`` is not among ``choices``.

    Example:
        >>> one_of("value_space", "log", ("identity", "signed_log1p"))
        Traceback (most recent call last):
        ...
        ValueError: value_space must be one of ('identity', 'signed_log1p'), got 'log'
    """
    try:
        if value in choices:
            return value
    except TypeError:  # an unhashable value against a set of choices
        pass
    raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def _describe(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}"


def check_finite(name: str, t: torch.Tensor) -> None:
    """Raise ``ValueError`` if ``t`` holds NaN or an infinity (skipped while tracing).

    The check reads ``t`` on the host, so it does not run while a graph is captured
    (:func:`is_tracing`): ``torch.jit.trace``, ``torch.compile(fullgraph=True)`` and
    ``torch.export`` see no data-dependent branch.

    Args:
        name: the argument name used in the message.
        t: the tensor to check.

    Raises:
        ValueError: ``t`` is not finite; the message names ``name``, shape and dtype.

    Example:
        >>> import torch
        >>> check_finite("loc", torch.tensor([0.0, float("nan")]))
        Traceback (most recent call last):
        ...
        ValueError: loc must be finite, but it holds NaN (shape (2,), dtype torch.float32)
    """
    values = host_values(t)
    if values is None:
        return
    if not _all_finite(values):
        bad = "NaN" if bool(torch.isnan(values).any()) else "an infinite value"
        raise ValueError(f"{name} must be finite, but it holds {bad} ({_describe(t)})")


def _extremes(t: torch.Tensor) -> tuple[float, float] | None:
    """``(min, max)`` of a real floating ``t`` in one pass (NaN if ``t`` holds one), else ``None``.

    ``torch.aminmax`` reads ``t`` once and allocates nothing of its size, where
    ``isfinite(t).all()`` and ``(t > 0).all()`` each write a boolean copy and read it again: on
    large tensors the checks cost less than half as much this way. Both extremes are NaN as soon
    as one entry is (``aminmax`` propagates NaN), so comparisons with them fail as they should.
    """
    if not t.is_floating_point() or t.numel() == 0:
        return None
    lo, hi = torch.stack(torch.aminmax(t)).tolist()  # one device synchronisation
    return lo, hi


def _all_finite(t: torch.Tensor) -> bool:
    extremes = _extremes(t)
    if extremes is None:
        return bool(torch.isfinite(t).all())
    lo, hi = extremes
    return -math.inf < lo and hi < math.inf


def check_positive_finite(name: str, t: torch.Tensor) -> None:
    """Raise ``ValueError`` unless every entry of ``t`` is finite and strictly positive.

    Skipped while tracing, like :func:`check_finite`.

    Args:
        name: the argument name used in the message.
        t: the tensor to check.

    Raises:
        ValueError: ``t`` is not finite or has an entry ``<= 0``.

    Example:
        >>> import torch
        >>> check_positive_finite("scale", torch.tensor([1.0, 0.0]))
        Traceback (most recent call last):
        ...
        ValueError: scale must be strictly positive, but its smallest entry is 0.0 (shape (2,), dtype torch.float32)
    """
    values = host_values(t)
    if values is None:
        return
    extremes = _extremes(values)
    if extremes is not None and 0.0 < extremes[0] and extremes[1] < math.inf:
        return  # one pass decided it; the slower checks below only build the message
    check_finite(name, t)
    if not bool((values > 0).all()):
        smallest = values.min().item()
        raise ValueError(
            f"{name} must be strictly positive, but its smallest entry is {smallest!r} ({_describe(t)})"
        )


def check_binary_mask(name: str, mask: torch.Tensor) -> None:
    """Raise ``ValueError`` unless every entry of the mask ``mask`` is 0 or 1 (skipped while tracing).

    A mask selects positions with ``mask != 0``; a NaN (``NaN != 0`` is true), a 0.5 or a 2 would
    be counted silently, so such values are refused. A ``bool`` tensor always passes (no
    reduction).

    Args:
        name: the argument name used in the message.
        mask: a ``bool``, integer or floating tensor.

    Raises:
        ValueError: an entry is neither 0 nor 1 (NaN included), or the mask is complex; the
            message names ``name``, the first bad value, shape and dtype.

    Example:
        >>> import torch
        >>> check_binary_mask("attention_mask", torch.tensor([1, 1, 0]))  # fine
        >>> check_binary_mask("attention_mask", torch.tensor([1.0, float("nan")]))
        Traceback (most recent call last):
        ...
        ValueError: attention_mask must hold only 0 and 1 (or be a bool tensor), but it holds nan (shape (2,), dtype torch.float32)
    """
    if mask.dtype == torch.bool or mask.numel() == 0:
        return
    if mask.is_complex():
        raise ValueError(f"{name} must be a real 0/1 or bool tensor ({_describe(mask)})")
    values = host_values(mask)
    if values is None:
        return
    ok = (values == 0) | (values == 1)
    if not bool(ok.all()):
        bad = values[~ok].flatten()[0].item()
        raise ValueError(
            f"{name} must hold only 0 and 1 (or be a bool tensor), but it holds {bad!r} "
            f"({_describe(mask)})"
        )


class BroadcastError(ValueError, RuntimeError):
    """Shapes that do not broadcast: a ``ValueError`` (like every argument error of cauchylin)
    that is also the ``RuntimeError`` torch raises for the same mistake, so code written for
    torch's distributions (``except RuntimeError``) catches it too.

    Example:
        >>> issubclass(BroadcastError, ValueError), issubclass(BroadcastError, RuntimeError)
        (True, True)
    """


BroadcastError.__module__ = "cauchylin"  # its public home (``cauchylin.BroadcastError``)


def check_same_shape(**named: torch.Tensor | None) -> None:
    """Check that the given tensors (None entries skipped) all have the first one's shape.

    Args:
        **named: tensors by argument name, the first given one the reference.

    Raises:
        ValueError: a tensor whose shape differs from the first one's; the message names both.

    Example:
        >>> check_same_shape(labels=torch.zeros(3), mask=None, predictions=torch.zeros(4))
        Traceback (most recent call last):
        ...
        ValueError: predictions shape (4,) must equal labels shape (3,)
    """
    items = [(k, v) for k, v in named.items() if v is not None]
    if not items:
        return
    first_name, first = items[0]
    for name, t in items[1:]:
        if tuple(t.shape) != tuple(first.shape):
            raise ValueError(
                f"{name} shape {tuple(t.shape)} must equal {first_name} shape {tuple(first.shape)}"
            )


def broadcast_shapes_or_raise(**named: Sequence[int] | torch.Size) -> torch.Size:
    """``torch.broadcast_shapes`` that names the arguments and their shapes when it fails.

    Args:
        **named: shapes by argument name.

    Returns:
        The broadcast shape.

    Raises:
        BroadcastError: the shapes do not broadcast (a ``ValueError`` and a ``RuntimeError``);
            the message lists every name and shape.

    Example:
        >>> broadcast_shapes_or_raise(loc=(3,), scale=(2,))
        Traceback (most recent call last):
        ...
        cauchylin.BroadcastError: shapes do not broadcast: loc (3,), scale (2,)
    """
    shape = _broadcast_plain(named.values())
    if shape is not None:
        return shape
    try:
        return torch.broadcast_shapes(*named.values())
    except RuntimeError:
        listed = ", ".join(f"{k} {tuple(v)}" for k, v in named.items())
        raise BroadcastError(f"shapes do not broadcast: {listed}") from None


def _broadcast_plain(shapes: Iterable[Sequence[int] | torch.Size]) -> torch.Size | None:
    """The broadcast shape of shapes of plain non-negative ``int`` sizes, else ``None``.

    ``torch.broadcast_shapes`` goes through torch's symbolic-size reference code, about 10 us a
    call on a CPU and several times that under ``vmap`` (a check that runs on every
    ``log_prob``). Plain shapes are broadcast here with the same rule (a size of 1 stretches,
    other sizes must agree, a missing leading dimension counts as 1); ``None`` (for torch to
    decide, and to raise) on anything else: a symbolic size, a negative one, sizes that do not
    broadcast.
    """
    out: list[int] = []
    for shape in shapes:
        if not isinstance(shape, (tuple, list)):  # (torch.Size is a tuple)
            return None
        extra = len(shape) - len(out)
        if extra > 0:
            out[:0] = [1] * extra
        offset = len(out) - len(shape)
        for i, n in enumerate(shape):
            if type(n) is not int or n < 0:
                return None
            if n == 1:
                continue
            have = out[offset + i]
            if have == 1:
                out[offset + i] = n
            elif have != n:
                return None
    return torch.Size(out)
