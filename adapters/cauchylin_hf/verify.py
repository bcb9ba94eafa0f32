"""``verify``: does the causal model start where its base model is?

``from_base`` initialises the heads so that ``loc_S`` equals the base logits (Abduction the
identity, ``W_cls`` the base head; see
[Initialisation that reproduces the base model][initialisation-that-reproduces-the-base-model]).

:func:`verify` runs a base causal LM and its causal model on the same text and reports:

* the **init equivalence** (asserted by the tests, within ``tolerance``): max ``|loc_S - base
  logits|`` in float32 over the compared positions and the base's classes, and the agreement of
  the greedy choices in compatible mode (``argmax loc_S`` vs the base's ``argmax``);
* **measured, not asserted** numbers that tell whether the defaults are trainable: how often the
  standard-mode OvR choice ``argmax_k P_k`` agrees with the base's greedy token, the initial OvR
  loss per position next to the base's cross-entropy on the same next tokens, and the spread of
  ``P_k`` (the fraction of probabilities within 0.01 and 0.1 of 1/2, quantiles, the median of
  ``sum_k P_k`` per position).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cauchylin.nn.modes import STANDARD
from cauchylin.vector import CauchyVector

from ._backbone import input_embedding_weight, load_base, load_tokenizer
from .batch import IGNORE_INDEX
from .loss import next_token_targets
from .model import CauchyLMForCausalLM

__all__ = ["DEFAULT_TEXTS", "VerifyReport", "verify"]

DEFAULT_TEXTS = (
    "The store sold 12 boxes of eggs for 3.50 dollars each, 42 dollars in total.",
    "Water boils at 100 degrees Celsius and freezes at 0 degrees at sea level.",
    "In 2023 the town had 48000 residents, 3 schools and 1 hospital.",
    "Add 7 and 5 to get 12, then divide by 4 to get 3.",
)
"""Texts :func:`verify` reads when none are given (numbers in them stay ordinary tokens)."""

_QUANTILES = (0.0, 0.01, 0.5, 0.99, 1.0)


@dataclass
class VerifyReport:
    """The numbers :func:`verify` measured; ``str(report)`` is a readable table.

    Attributes:
        architecture: the base model's class name.
        model_type: the base ``model_type``.
        tied_embeddings: whether the base ties its head to its embedding.
        hidden_size: ``H``.
        base_vocab_size: rows of the base head (its logits' width).
        num_classes: OvR classes of the causal model.
        num_token_id: the ``<NUM>`` id (None without one).
        positions: number of compared positions (attention mask 1).
        max_abs_diff: max ``|loc_S - base logits|`` (float32) over the positions and the first
            ``min(num_classes, base_vocab_size)`` classes.
        max_abs_logit: max ``|base logit|`` (the scale of the comparison).
        greedy_agreement: fraction of positions where ``argmax loc_S`` (compatible mode) equals
            the base's ``argmax``.
        ovr_agreement: same for the standard-mode OvR choice ``argmax_k P_k`` (measured).
        ovr_loss: initial OvR loss per position (the training objective's ``cls_loss``).
        base_cross_entropy: the base's cross-entropy per position on the same next tokens.
        loss_positions: number of positions in both losses.
        frac_p_within_001: fraction of all ``P_k`` with ``|P_k - 1/2| < 0.01``, where
            ``P_k = 1/2 + atan((loc_S_k - tau_k) / scale_S_k) / pi`` in standard mode at ``T = 1``
            (``tau_k`` the threshold).
        frac_p_within_01: fraction with ``|P_k - 1/2| < 0.1``.
        p_quantiles: ``{q: quantile of P_k}`` for q in 0, 0.01, 0.5, 0.99, 1.
        median_p_sum: median over positions of ``sum_k P_k``.
        mean_scale_U: mean ``scale_U`` (gamma_0 right after initialisation).
        tolerance: the tolerance of ``max_abs_diff``.
        dtype: dtype of the base's logits.

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> report = verify(tiny_base_model("qwen2", spare_rows=2), tokenizer=tiny_tokenizer())
        >>> report.architecture, report.passed, report.greedy_agreement, report.num_token_id
        ('Qwen2ForCausalLM', True, 1.0, 300)
        >>> report.max_abs_diff <= report.tolerance, round(report.mean_scale_U, 4)
        (True, 0.01)
        >>> print(str(report).splitlines()[0])
        verify: Qwen2ForCausalLM (qwen2, tied embeddings, float32), H=32, 302 base classes, ...
    """

    architecture: str
    model_type: str
    tied_embeddings: bool
    hidden_size: int
    base_vocab_size: int
    num_classes: int
    num_token_id: int | None
    positions: int
    max_abs_diff: float
    max_abs_logit: float
    greedy_agreement: float
    ovr_agreement: float
    ovr_loss: float
    base_cross_entropy: float
    loss_positions: int
    frac_p_within_001: float
    frac_p_within_01: float
    p_quantiles: dict[float, float] = field(default_factory=dict)
    median_p_sum: float = math.nan
    mean_scale_U: float = math.nan
    tolerance: float = 1e-4
    dtype: str = "float32"

    @property
    def passed(self) -> bool:
        """``max_abs_diff <= tolerance`` and every greedy choice agrees (compatible mode)."""
        return self.max_abs_diff <= self.tolerance and self.greedy_agreement == 1.0

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (plus ``passed``), e.g. for JSON.

        Returns:
            ``{field: value}`` for every field, ``p_quantiles`` keyed by ``str(q)``, and
            ``"passed"``.

        Example:
            >>> import json
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> d = verify(tiny_base_model("llama", spare_rows=1)).to_dict()  # random ids, no text
            >>> d["passed"], d["positions"], d["num_token_id"], list(d["p_quantiles"])
            (True, 128, None, ['0.0', '0.01', '0.5', '0.99', '1.0'])
            >>> json.loads(json.dumps(d))["model_type"]
            'llama'
        """
        out = asdict(self)
        out["p_quantiles"] = {str(k): v for k, v in self.p_quantiles.items()}
        out["passed"] = self.passed
        return out

    def __str__(self) -> str:
        """A two-column table of the measurements."""
        tied = "tied" if self.tied_embeddings else "untied"
        num = "none" if self.num_token_id is None else str(self.num_token_id)
        q = ", ".join(f"{v:.3g}" for v in self.p_quantiles.values())
        ok = "OK" if self.max_abs_diff <= self.tolerance else "FAIL"
        rows = [
            ("positions compared", f"{self.positions}"),
            (
                "max |loc_S - base logits| (float32)",
                f"{self.max_abs_diff:.3e}  (tolerance {self.tolerance:.0e}: {ok}; "
                f"max |logit| {self.max_abs_logit:.3g})",
            ),
            ("greedy agreement, compatible mode", f"{100 * self.greedy_agreement:.1f} %"),
            ("OvR argmax agreement, standard mode", f"{100 * self.ovr_agreement:.1f} %"),
            ("initial OvR loss per position", f"{self.ovr_loss:.4g}"),
            ("base cross-entropy per position", f"{self.base_cross_entropy:.4g}"),
            ("P_k within 0.01 of 1/2", f"{100 * self.frac_p_within_001:.2f} %"),
            ("P_k within 0.1 of 1/2", f"{100 * self.frac_p_within_01:.2f} %"),
            ("P_k quantiles (0, 1%, 50%, 99%, 100%)", q),
            ("median sum_k P_k per position", f"{self.median_p_sum:.4g}"),
            ("mean scale_U", f"{self.mean_scale_U:.4g}"),
        ]
        width = max(len(r[0]) for r in rows)
        head = (
            f"verify: {self.architecture} ({self.model_type}, {tied} embeddings, {self.dtype}), "
            f"H={self.hidden_size}, {self.base_vocab_size} base classes, {self.num_classes} OvR "
            f"classes, <NUM> id {num}"
        )
        lines = [head, "-" * len(head)] + [f"{k:<{width}}  {v}" for k, v in rows]
        return "\n".join(lines)


def _encode_texts(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask)`` of the texts, special tokens included."""
    rows = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"texts[{i}] must be a str, got {type(t).__name__}")
        ids = tokenizer(t, add_special_tokens=True)["input_ids"][:max_length]
        if len(ids) < 2:
            raise ValueError(f"texts[{i}] gives fewer than 2 tokens: nothing to predict")
        rows.append(ids)
    n = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(rows), n), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), n), dtype=torch.long)
    for b, r in enumerate(rows):
        input_ids[b, : len(r)] = torch.tensor(r)
        mask[b, : len(r)] = 1
    return input_ids, mask


def _quantiles(x: torch.Tensor, qs: Sequence[float]) -> dict[float, float]:
    s = torch.sort(x.reshape(-1)).values
    n = s.numel()
    return {q: float(s[min(n - 1, round(q * (n - 1)))]) for q in qs}


@torch.no_grad()
def verify(
    base: str | os.PathLike | PreTrainedModel,
    causal_model: Any = None,
    tokenizer: Any = None,
    texts: Sequence[str] | None = None,
    *,
    input_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    max_length: int = 64,
    tolerance: float = 1e-4,
    base_kwargs: dict[str, Any] | None = None,
) -> VerifyReport:
    """Measure how exactly a causal model reproduces its base model right after initialisation.

    Both models read the same ``input_ids`` (numbers stay ordinary tokens, ``numeric_values`` is
    0, so the comparison is exact). Without ``causal_model`` one is built with
    :meth:`~cauchylin_hf.model.CauchyLMForCausalLM.from_base` (sharing the base's decoder; when a
    ``<NUM>`` row must be added, the base's input embedding gains that row, its outputs are
    unchanged).

    Args:
        base: a local checkpoint folder or a loaded causal LM.
        causal_model: the :class:`~cauchylin_hf.model.CauchyLMForCausalLM` to check (default:
            built from ``base``).
        tokenizer: the base tokenizer (``None``: the one in the base folder, if any; a folder; a
            tokenizer object; a ``NumericTokenizer``).
        texts: texts to read (default :data:`DEFAULT_TEXTS`); ignored when ``input_ids`` is
            given. Without a tokenizer, 4 x 32 random ids (seed 0) are read instead.
        input_ids: ``[B, L]`` explicit ids (then ``attention_mask`` optional).
        attention_mask: ``[B, L]`` mask of ``input_ids``.
        max_length: truncate each text to this many tokens.
        tolerance: the bound ``max_abs_diff`` is checked against (``report.passed``).
        base_kwargs: extra ``from_pretrained`` arguments for a base folder.

    Returns:
        :class:`VerifyReport`.

    Raises:
        ValueError: a base that cannot be loaded (see ``from_base``), a causal model of another
            width, or texts too short to predict anything.

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> report = verify(tiny_base_model("qwen2", spare_rows=2), tokenizer=tiny_tokenizer())
        >>> report.passed, report.max_abs_diff <= 1e-4
        (True, True)
    """
    model, base_path = load_base(base, base_kwargs)
    plain_tok, numeric_tok = load_tokenizer(tokenizer, base_path)
    if causal_model is None:
        tok_arg = numeric_tok if numeric_tok is not None else (plain_tok or False)
        causal_model = CauchyLMForCausalLM.from_base(model, tok_arg)
    if not isinstance(causal_model, CauchyLMForCausalLM):
        raise ValueError(
            f"causal_model must be a CauchyLMForCausalLM, got {type(causal_model).__name__}"
        )
    cfg = causal_model.config
    if cfg.hidden_size != model.config.hidden_size:
        raise ValueError(
            f"causal_model (H={cfg.hidden_size}) was not built on this base "
            f"(H={model.config.hidden_size})"
        )
    input_ids, attention_mask = _probe_ids(
        model, causal_model, plain_tok, texts, max_length, input_ids, attention_mask
    )
    logits, U, loc_S, log_p, train_out = _read_with_both(
        model, causal_model, input_ids, attention_mask
    )
    dtype = str(logits.dtype).removeprefix("torch.")
    logits = logits.float()

    valid = attention_mask.bool()
    k = min(loc_S.shape[-1], logits.shape[-1])
    diff = (loc_S[..., :k] - logits[..., :k]).abs()[valid]
    base_choice = logits.argmax(-1)[valid]
    greedy = loc_S.argmax(-1)[valid] == base_choice
    ovr = log_p.argmax(-1)[valid] == base_choice
    # The base's cross-entropy on the positions the OvR loss counts.
    shifted = next_token_targets(input_ids, None, attention_mask)
    assert shifted.mask is not None
    target = shifted.labels[shifted.mask]
    ce = (
        F.cross_entropy(shifted.positions(logits)[shifted.mask], target)
        if target.numel()
        else torch.tensor(0.0)
    )
    p = log_p[valid].exp()
    near = (p - 0.5).abs()
    return VerifyReport(
        architecture=type(model).__name__,
        model_type=str(model.config.model_type),
        tied_embeddings=bool(getattr(model.config, "tie_word_embeddings", False)),
        hidden_size=int(causal_model.abduction.in_features),
        base_vocab_size=int(logits.shape[-1]),
        num_classes=int(causal_model.action.num_classes),
        num_token_id=cfg.num_token_id,
        positions=int(valid.sum()),
        max_abs_diff=float(diff.max()) if diff.numel() else 0.0,
        max_abs_logit=float(logits[valid].abs().max()),
        greedy_agreement=float(greedy.float().mean()),
        ovr_agreement=float(ovr.float().mean()),
        ovr_loss=float(train_out.cls_loss),
        base_cross_entropy=float(ce),
        loss_positions=int(train_out.cls_count),
        frac_p_within_001=float((near < 0.01).float().mean()),
        frac_p_within_01=float((near < 0.1).float().mean()),
        p_quantiles=_quantiles(p, _QUANTILES),
        median_p_sum=float(p.sum(-1).median()),
        mean_scale_U=float(U.scale[valid].mean()),
        tolerance=float(tolerance),
        dtype=dtype,
    )


def _probe_ids(
    model: PreTrainedModel,
    causal_model: CauchyLMForCausalLM,
    plain_tok: Any,
    texts: Sequence[str] | None,
    max_length: int,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids both models read, on the base's device: the given ids, the encoded texts, or
    (without a tokenizer) 4 x 32 random ids of seed 0; and their attention mask."""
    device = input_embedding_weight(model).device
    if input_ids is None:
        if plain_tok is not None:
            input_ids, attention_mask = _encode_texts(
                plain_tok, list(texts or DEFAULT_TEXTS), max_length
            )
        else:
            high = min(input_embedding_weight(model).shape[0], causal_model.action.num_classes)
            gen = torch.Generator().manual_seed(0)
            input_ids = torch.randint(0, high, (4, 32), generator=gen)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    return input_ids.to(device), attention_mask.to(device)


def _read_with_both(
    model: PreTrainedModel,
    causal_model: CauchyLMForCausalLM,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
) -> tuple[torch.Tensor, CauchyVector, torch.Tensor, torch.Tensor, Any]:
    """Both models on the same ids in eval mode (each left in the mode it was in): the base's
    logits; the causal model's ``U``, ``loc_S`` and OvR log-probabilities in standard mode; and
    its training output (the OvR loss) on the ids as labels."""
    was_training = (model.training, causal_model.training)
    model.eval()
    causal_model.eval()
    try:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        hidden, _ = causal_model.encode(
            cast(torch.LongTensor, input_ids), attention_mask=attention_mask
        )
        U, act = causal_model.heads(hidden, STANDARD, 1.0)
        labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
        train_out = causal_model(input_ids, attention_mask=attention_mask, labels=labels)
        return logits, U, act.loc_S.float(), act.ovr_log_probs()[0].float(), train_out
    finally:
        model.train(was_training[0])
        causal_model.train(was_training[1])
