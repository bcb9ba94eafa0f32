r"""The causal language model beside a plain language model, at equal budget, on held-out numbers.

What a user would pick instead of this library is a plain causal LM trained with softmax
cross-entropy on the same text, numbers written as digits, reading numbers back from its greedy
continuation. This module trains both from the same recipe and scores the *target number* of each
held-out text (its last number):

* :class:`Recipe` — backbone size (a Qwen2 architecture built from a config: nothing is
  downloaded), tokenizer size and the training budget shared by both models;
* :func:`train_causal` — :class:`~cauchylin_hf.model.CauchyLMForCausalLM` on a fresh backbone,
  trained with :func:`cauchylin_hf.training.train`; its prediction is the median of the
  regression head, with central intervals (:mod:`cauchylin_hf.predict`);
* :func:`train_text_baseline` — the same backbone as ``Qwen2ForCausalLM`` trained by the
  ``transformers.Trainer`` with the same steps, batch, schedule and seed; a byte-level BPE
  tokenizer of the same family (numbers are not merged: digits are tokens);
* :func:`train_text_baseline` with ``ntl_weight`` — the same plus the Number Token Loss
  (``ntloss.NTLoss``, the Wasserstein form on digit tokens; the ``ntloss`` extra) added to the
  cross-entropy with that weight: cross-entropy made number-aware;
* :func:`train_mse_head` — a pointwise regression head: a linear layer on the final hidden state
  at the position before the target, trained by squared error in the value space on the same
  ``<NUM>`` inputs as the causal model, no language-model loss;
* :func:`pretrain_text_backbone` — a backbone first trained with plain cross-entropy on other
  text, the starting point of the path users take with a real decoder (``base=`` of the training
  functions);
* :func:`baseline_predictions` — greedy continuation of the text before each target, the first
  number written there (the training median when none is written);
* :func:`sampled_predictions` — the regression-aware reading of a text model: the median of ``K``
  sampled continuations' numbers, and their sample quantiles as central intervals;
* :func:`score` — MAE, median absolute error, Spearman, interval coverage, and token accuracy
  on the text tokens (the tokens that are not numbers: comparable between the two tokenizers).
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from cauchylin._validation import positive_int
from cauchylin.metrics import interval_coverage, rank_correlation

from ..model import CauchyLMForCausalLM
from ..numbers import find_numbers
from ..predict import number_predictions
from ..tokenizer import NumericTokenizer
from ..training import TrainResult, train
from .corpus import train_corpus_tokenizer

__all__ = [
    "NTL_WEIGHT",
    "Recipe",
    "Scores",
    "TargetRegressor",
    "baseline_predictions",
    "causal_predictions",
    "corrupt_targets",
    "hidden_at_targets",
    "mse_head_predictions",
    "pretrain_text_backbone",
    "sampled_predictions",
    "score",
    "split_at_target",
    "text_accuracy",
    "train_causal",
    "train_causal_run",
    "train_mse_head",
    "train_text_baseline",
    "training_median",
]

NTL_WEIGHT = 0.3
"""Weight of the Number Token Loss beside the cross-entropy (the value its authors train with)."""


LR_SCHEDULERS = ("cosine", "warmup_stable_decay")
"""The learning-rate schedules a :class:`Recipe` offers."""


@dataclass(frozen=True)
class Recipe:
    """The backbone and the training budget that both models share.

    Attributes:
        hidden_size: ``H`` of the Qwen2 backbone.
        num_layers: decoder layers.
        num_heads: attention heads (key/value heads: half of them).
        vocab_size: largest tokenizer vocabulary.
        max_steps: optimizer steps.
        batch_size: texts per step.
        learning_rate: peak learning rate (AdamW, after a linear warm-up over 5% of the steps).
        lr_scheduler: ``"cosine"`` (the default: cosine decay to 0 after the warm-up) or
            ``"warmup_stable_decay"`` (the peak held until the last 20% of the steps, then a
            cosine decay to 0 over them; transformers' ``get_wsd_schedule``).
        adam_beta2: AdamW's second-moment decay (default 0.95, the package's training default:
            see :func:`~cauchylin_hf.training.make_training_arguments`); every model of a
            comparison trains with it.
        seed: seed of the weights and the data order.
        settings: causal settings for ``from_base`` (``CauchyLMConfig`` fields) on top of the
            defaults.
        step_choice: the causal model's ``step_choice`` (:mod:`cauchylin_hf.step_choice`):
            rows held out to choose the step whose network is kept; None keeps the last step.

    Example:
        >>> Recipe().max_steps, Recipe(max_steps=10).with_settings(alpha=0.0).settings
        (1000, {'alpha': 0.0})
    """

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    vocab_size: int = 512
    max_steps: int = 1000
    batch_size: int = 32
    learning_rate: float = 3e-3
    lr_scheduler: str = "cosine"
    adam_beta2: float = 0.95
    seed: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    step_choice: float | str | None = None

    def __post_init__(self) -> None:
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise ValueError(
                f"lr_scheduler must be one of {', '.join(LR_SCHEDULERS)}, got {self.lr_scheduler!r}"
            )

    def with_settings(self, **settings: Any) -> Recipe:
        """A copy with more causal settings.

        Args:
            **settings: ``CauchyLMConfig`` fields.

        Returns:
            The new recipe.

        Example:
            >>> Recipe().with_settings(threshold=0.0).with_settings(alpha=0.0).settings
            {'threshold': 0.0, 'alpha': 0.0}
        """
        return replace(self, settings={**self.settings, **settings})

    def backbone(self, tokenizer: Any) -> Any:
        """A fresh ``Qwen2ForCausalLM`` of this size for ``tokenizer`` (seeded).

        Args:
            tokenizer: the (plain) tokenizer; its length sizes the embedding.

        Returns:
            The model.

        Example:
            >>> from cauchylin_hf.app.corpus import train_corpus_tokenizer
            >>> tok = train_corpus_tokenizer(["x 1, y 2."], vocab_size=300)
            >>> Recipe(hidden_size=16, num_heads=2).backbone(tok).config.hidden_size
            16
        """
        from transformers import AutoModelForCausalLM, Qwen2Config

        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=max(1, self.num_heads // 2),
            intermediate_size=3 * self.hidden_size,
            max_position_embeddings=512,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return AutoModelForCausalLM.from_config(config)

    def trainer_arguments(self) -> dict[str, Any]:
        """The ``TrainingArguments`` fields of the shared budget.

        Returns:
            ``max_steps``, batch size, learning rate, AdamW's ``adam_beta2``, the schedule
            (with its decay steps for ``"warmup_stable_decay"``), warm-up steps, seed.

        Example:
            >>> Recipe(max_steps=200).trainer_arguments()["warmup_steps"]  # 5% of the steps
            10
            >>> Recipe().trainer_arguments()["adam_beta2"]  # every model of a comparison
            0.95
            >>> Recipe(lr_scheduler="warmup_stable_decay").trainer_arguments()["lr_scheduler_kwargs"]
            {'num_decay_steps': 200}
        """
        return {
            "max_steps": self.max_steps,
            "per_device_train_batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "adam_beta2": self.adam_beta2,
            "lr_scheduler_type": self.lr_scheduler,
            "warmup_steps": max(1, self.max_steps // 20),
            "seed": self.seed,
            **(
                {"lr_scheduler_kwargs": {"num_decay_steps": max(1, self.max_steps // 5)}}
                if self.lr_scheduler == "warmup_stable_decay"
                else {}
            ),
        }


def split_at_target(text: str) -> tuple[str, float]:
    """The text before its last number, and that number.

    Args:
        text: a text with at least one number.

    Returns:
        ``(prompt, value)``.

    Raises:
        ValueError: the text holds no number.

    Example:
        >>> split_at_target("radius 14.2, area 633.")
        ('radius 14.2, area ', 633.0)
    """
    numbers = find_numbers(text)
    if not numbers:
        raise ValueError(f"the text holds no number: {text[:60]!r}")
    last = numbers[-1]
    return text[: last.start], last.value


def corrupt_targets(
    texts: Sequence[str], fraction: float = 0.1, factor: float = 100.0, seed: int = 1
) -> list[str]:
    """Multiply the target (last) number of a random ``fraction`` of the texts by ``factor``.

    Args:
        texts: training texts.
        fraction: the share of texts to corrupt, in ``[0, 1]``.
        factor: the multiplier.
        seed: seed of the choice.

    Returns:
        The texts, some with a corrupted target.

    Raises:
        ValueError: ``fraction`` outside ``[0, 1]``.

    Example:
        >>> corrupt_targets(["a 1, b 2.", "a 3, b 4."], fraction=1.0)
        ['a 1, b 200.', 'a 3, b 400.']
    """
    import random

    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction!r}")
    rng = random.Random(seed)
    out = []
    for text in texts:
        numbers = find_numbers(text)
        if numbers and rng.random() < fraction:
            last = numbers[-1]
            text = text[: last.start] + f"{last.value * factor:g}" + text[last.end :]
        out.append(text)
    return out


def _fresh_or_copy(
    train_texts: Sequence[str], recipe: Recipe, base: tuple[Any, Any] | None, num_token: str | None
) -> tuple[Any, Any]:
    """A fresh backbone with a tokenizer trained on the texts, or copies of a given pair."""
    if base is not None:
        model, tok = base
        return copy.deepcopy(model), copy.deepcopy(tok)
    tok = train_corpus_tokenizer(
        list(train_texts), vocab_size=recipe.vocab_size, num_token=num_token
    )
    return recipe.backbone(tok), tok


def train_causal(
    train_texts: Sequence[str], recipe: Recipe, *, base: tuple[Any, Any] | None = None
) -> tuple[Any, NumericTokenizer, float]:
    """Build and train the causal language model of a recipe: :func:`train_causal_run`'s model,
    tokenizer and training seconds.

    Args:
        train_texts: training texts.
        recipe: backbone, budget and causal settings.
        base: as in :func:`train_causal_run`.

    Returns:
        ``(model, numeric_tokenizer, train_seconds)``.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, ntok, seconds = train_causal(texts, tiny)
        >>> type(model).__name__, ntok.num_token_id == model.config.num_token_id
        ('CauchyLMForCausalLM', True)
    """
    model, ntok, result = train_causal_run(train_texts, recipe, base=base)
    return model, ntok, float(result.train_runtime)


def train_causal_run(
    train_texts: Sequence[str],
    recipe: Recipe,
    *,
    base: tuple[Any, Any] | None = None,
    calibration: Sequence[str] | None = None,
    callbacks: Sequence[Any] = (),
) -> tuple[Any, NumericTokenizer, TrainResult]:
    """Build and train the causal language model of a recipe.

    Args:
        train_texts: training texts.
        recipe: backbone, budget and causal settings.
        base: ``(plain model, its tokenizer)`` to start from (copied, e.g. from
            :func:`pretrain_text_backbone`), or None for a fresh backbone and a tokenizer trained
            on ``train_texts``.
        calibration: texts of their own to calibrate the intervals on (none of
            ``train_texts``; e.g. one hold-out shared by models of several seeds), or None:
            ``train``'s default, a fifth of ``train_texts`` held out (``calibration="auto"``).
        callbacks: more Trainer callbacks (e.g. a probe's), passed to
            :func:`~cauchylin_hf.training.train`.

    Returns:
        ``(model, numeric_tokenizer, result)``: the
        :class:`~cauchylin_hf.training.TrainResult` holds the rows the readouts were solved and
        calibrated on (to solve them again with other settings).

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, ntok, result = train_causal_run(texts, tiny)
        >>> result.global_step, result.readout_data is not None
        (2, True)
    """
    base_model, tok = _fresh_or_copy(train_texts, recipe, base, "<NUM>")
    ntok = NumericTokenizer(tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        settings = {"freeze_backbone": False, **recipe.settings}
        model = CauchyLMForCausalLM.from_base(base_model, ntok, **settings)
    assert isinstance(model, CauchyLMForCausalLM)  # return_tokenizer is False
    args = recipe.trainer_arguments()
    with tempfile.TemporaryDirectory() as out:
        result = train(
            model,
            ntok,
            list(train_texts),
            None,
            out,
            max_steps=args.pop("max_steps"),
            batch_size=args.pop("per_device_train_batch_size"),
            learning_rate=args.pop("learning_rate"),
            seed=args.pop("seed"),
            progress=False,
            save=False,
            evaluate=False,
            step_choice=recipe.step_choice,
            calibration="auto" if calibration is None else list(calibration),
            callbacks=callbacks,
            **args,
        )
    return model, ntok, result


def _run_trainer(
    model: Any,
    rows: list[dict[str, Any]],
    collator: Any,
    recipe: Recipe,
    compute_loss_func: Any = None,
) -> float:
    """Train ``model`` on ``rows`` with the recipe's budget, silently; the training seconds."""
    from transformers import PrinterCallback, Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
            remove_unused_columns=False,
            **recipe.trainer_arguments(),
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=rows,
            data_collator=collator,
            compute_loss_func=compute_loss_func,
        )
        trainer.remove_callback(PrinterCallback)  # silent, like train(progress=False)
        start = time.perf_counter()
        trainer.train()
        return time.perf_counter() - start


def _ntl_loss(tokenizer: Any, weight: float) -> Any:
    """``compute_loss_func`` of the Trainer: next-token cross-entropy + ``weight`` * NTL-WAS."""
    try:
        from ntloss import NTLoss
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the CE + Number Token Loss baseline needs the ntloss package: "
            "pip install 'cauchylin[ntloss]'"
        ) from exc
    ntl = NTLoss(tokenizer=tokenizer, digit_level=True)

    def loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
        logits = outputs.logits[:, :-1].float()
        target = labels[:, 1:]
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum"
        )
        # as transformers' causal-LM loss: a sum over the batch's tokens divided by their count
        count = num_items_in_batch if num_items_in_batch is not None else (target != -100).sum()
        ce = ce / count
        return ce + weight * ntl(logits, target.contiguous())

    return loss


def train_text_baseline(
    train_texts: Sequence[str],
    recipe: Recipe,
    *,
    ntl_weight: float = 0.0,
    base: tuple[Any, Any] | None = None,
) -> tuple[Any, Any, float]:
    """Train the plain softmax-CE language model of a recipe on the text, digits as tokens.

    With ``ntl_weight > 0`` the loss is ``CE + ntl_weight * NTL``: the Number Token Loss
    (``ntloss.NTLoss``, the Wasserstein distance between the predicted distribution over the digit
    tokens and the true digit, on positions whose next token is a digit; :data:`NTL_WEIGHT` is
    its authors' weight).

    Args:
        train_texts: training texts.
        recipe: backbone and budget (its causal settings are not used).
        ntl_weight: weight of the Number Token Loss (0: plain cross-entropy).
        base: ``(model, tokenizer)`` to continue training (copied), or None for a fresh backbone
            and a tokenizer trained on ``train_texts``.

    Returns:
        ``(model, tokenizer, train_seconds)``.

    Raises:
        ValueError: a negative ``ntl_weight``.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, tok, seconds = train_text_baseline(texts, tiny)
        >>> type(model).__name__, "<NUM>" in tok.get_vocab()  # digits stay digits
        ('Qwen2ForCausalLM', False)
    """
    from transformers import DataCollatorForLanguageModeling

    if not ntl_weight >= 0.0:
        raise ValueError(f"ntl_weight must be >= 0, got {ntl_weight!r}")
    model, tok = _fresh_or_copy(train_texts, recipe, base, None)
    rows = [{"input_ids": tok(t + tok.eos_token)["input_ids"]} for t in train_texts]
    collator = DataCollatorForLanguageModeling(tok, mlm=False)
    loss = _ntl_loss(tok, ntl_weight) if ntl_weight > 0 else None
    seconds = _run_trainer(model, rows, collator, recipe, loss)
    return model.eval(), tok, seconds


def pretrain_text_backbone(texts: Sequence[str], recipe: Recipe) -> tuple[Any, Any]:
    """A backbone pretrained with plain cross-entropy on ``texts``, and its tokenizer.

    The stand-in for a real pretrained decoder: a tokenizer trained on ``texts`` (digits stay
    digits) and the recipe's backbone trained on them for ``recipe.max_steps`` steps. Pass the
    pair as ``base=`` to :func:`train_causal` (through ``from_base``) or
    :func:`train_text_baseline` (continued cross-entropy) to fine-tune it on other text.

    Args:
        texts: the pretraining texts.
        recipe: backbone and pretraining budget.

    Returns:
        ``(model, tokenizer)``.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> model, tok = pretrain_text_backbone([f"{i} cats and {i + 1} dogs." for i in range(8)],
        ...                                     tiny)
        >>> model2, ntok, _ = train_causal(["x 1, y 2.", "x 2, y 4."], tiny, base=(model, tok))
        >>> model2.config.base_config.hidden_size, "<NUM>" in tok.get_vocab()  # tok unchanged
        (16, False)
    """
    model, tok, _ = train_text_baseline(texts, recipe)
    return model, tok


class TargetRegressor(torch.nn.Module):
    """A pointwise regression head on the causal model's inputs: what a user would attach.

    The backbone reads the text with the numeric tokenizer (numbers as ``<NUM>`` + their value,
    as in :class:`~cauchylin_hf.model.CauchyLMForCausalLM`); a linear layer on the final hidden
    state at the position before the target number predicts the target's value-space
    ``t = g(y)``, trained by squared error (no language-model loss, no interval).

    Args:
        causal: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` whose ``encode`` gives the
            hidden states (its decision heads are not used).
        init_t: the initial bias (the training targets' mean ``t``).

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> causal = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), tiny_tokenizer())
        >>> reg = TargetRegressor(causal, init_t=2.0)
        >>> reg.head.bias.item()
        2.0
    """

    def __init__(self, causal: Any, init_t: float = 0.0) -> None:
        super().__init__()
        self.causal = causal
        self.head = torch.nn.Linear(causal.config.hidden_size, 1)
        with torch.no_grad():
            self.head.bias.fill_(float(init_t))

    def forward(
        self,
        input_ids: torch.Tensor,
        numeric_values: torch.Tensor,
        attention_mask: torch.Tensor,
        target_index: torch.Tensor,
        target_t: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """The predicted ``t`` at ``target_index`` of each row, and the mean squared error.

        Args:
            input_ids: ``[B, S]`` numeric-tokenizer ids.
            numeric_values: ``[B, S]`` the numbers at ``<NUM>`` inputs.
            attention_mask: ``[B, S]``.
            target_index: ``[B]`` the position whose next token is the target ``<NUM>``.
            target_t: ``[B]`` the target's ``t`` (for the loss), or None.

        Returns:
            ``{"prediction": [B]}`` and, with ``target_t``, ``"loss"`` (first, for the Trainer).
        """
        hidden, _ = self.causal.encode(input_ids, numeric_values, attention_mask, use_cache=False)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        pred = self.head(hidden[rows, target_index].to(self.head.weight.dtype))[:, 0]
        if target_t is None:
            return {"prediction": pred}
        return {
            "loss": torch.nn.functional.mse_loss(pred, target_t.to(pred.dtype)),
            "prediction": pred,
        }


def _target_rows(ntok: NumericTokenizer, texts: Sequence[str], space: str) -> list[dict[str, Any]]:
    """Encoded texts with the position before their last ``<NUM>`` and its ``t``."""
    from cauchylin.value_space import to_value_space

    rows = []
    for text in texts:
        enc = ntok(text)
        ids = enc["input_ids"]
        where = [i for i, k in enumerate(ids) if k == ntok.num_token_id]
        if not where or where[-1] == 0:
            raise ValueError(f"no number after the first token in {text[:60]!r}")
        j = where[-1]
        t = to_value_space(torch.tensor(float(enc["numeric_values"][j])), space)
        rows.append(
            {
                "input_ids": ids,
                "numeric_values": enc["numeric_values"],
                "target_index": j - 1,
                "target_t": float(t),
            }
        )
    return rows


def _pad_id(tokenizer: NumericTokenizer) -> int:
    pad = tokenizer.pad_token_id
    return 0 if pad is None else int(pad)


def _collate_targets(pad_id: int) -> Any:
    def collate(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        vals = torch.zeros(len(rows), width)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[i, :n] = torch.tensor(r["input_ids"])
            vals[i, :n] = torch.tensor(r["numeric_values"], dtype=torch.float32)
            mask[i, :n] = 1
        out = {"input_ids": ids, "numeric_values": vals, "attention_mask": mask}
        out["target_index"] = torch.tensor([r["target_index"] for r in rows])
        if "target_t" in rows[0]:
            out["target_t"] = torch.tensor([r["target_t"] for r in rows])
        return out

    return collate


def train_mse_head(
    train_texts: Sequence[str], recipe: Recipe
) -> tuple[TargetRegressor, NumericTokenizer, float]:
    """Train a :class:`TargetRegressor` (a pointwise MSE head) with the recipe's budget.

    The backbone, tokenizer and numeric inputs are those of :func:`train_causal` (the same
    ``from_base`` with the recipe's settings); the loss is the squared error of the target's
    value-space ``t`` only.

    Args:
        train_texts: training texts (each ending with its target number).
        recipe: backbone, budget and settings.

    Returns:
        ``(regressor, numeric_tokenizer, train_seconds)``.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> reg, ntok, _ = train_mse_head(texts, tiny)
        >>> mse_head_predictions(reg, ntok, ["x 3, y 6."])["true"].tolist()
        [6.0]
    """
    base_model, tok = _fresh_or_copy(train_texts, recipe, None, "<NUM>")
    ntok = NumericTokenizer(tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        settings = {"freeze_backbone": False, **recipe.settings}
        causal = CauchyLMForCausalLM.from_base(base_model, ntok, **settings)
        assert isinstance(causal, CauchyLMForCausalLM)  # return_tokenizer is False
        rows = _target_rows(ntok, train_texts, causal.config.value_space)
        init = statistics.fmean(r["target_t"] for r in rows)
        reg = TargetRegressor(causal, init_t=init)
    seconds = _run_trainer(reg, rows, _collate_targets(_pad_id(ntok)), recipe)
    return reg.eval(), ntok, seconds


@torch.no_grad()
def mse_head_predictions(
    regressor: TargetRegressor, tokenizer: NumericTokenizer, texts: Sequence[str]
) -> dict[str, torch.Tensor]:
    """A :class:`TargetRegressor`'s target numbers (``g^{-1}`` of the predicted ``t``).

    Args:
        regressor: the trained regressor.
        tokenizer: its numeric tokenizer.
        texts: held-out texts.

    Returns:
        ``{"median": [N], "true": [N]}`` (float64; the point prediction under "median").

    Raises:
        ValueError: a text without a number after its first token.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> reg, ntok, _ = train_mse_head([f"x {i}, y {2 * i}." for i in range(1, 9)], tiny)
        >>> out = mse_head_predictions(reg, ntok, ["x 3, y 6.", "x 5, y 10."])
        >>> out["true"].tolist(), out["median"].dtype
        ([6.0, 10.0], torch.float64)
    """
    from cauchylin.value_space import from_value_space

    regressor.eval()
    space = regressor.causal.config.value_space
    rows = _target_rows(tokenizer, texts, space)
    collate = _collate_targets(_pad_id(tokenizer))
    preds = []
    for start in range(0, len(rows), 64):
        batch = collate(
            [{k: v for k, v in r.items() if k != "target_t"} for r in rows[start : start + 64]]
        )
        preds.append(regressor(**batch)["prediction"])
    pred = from_value_space(torch.cat(preds).double(), space)
    true = torch.tensor([split_at_target(t)[1] for t in texts], dtype=torch.float64)
    return {"median": pred, "true": true}


@torch.no_grad()
def baseline_predictions(
    model: Any, tokenizer: Any, texts: Sequence[str], *, fallback: float, max_new_tokens: int = 12
) -> tuple[torch.Tensor, float]:
    """The plain model's target numbers: greedy continuation of the text before each target.

    Args:
        model: the trained text model.
        tokenizer: its tokenizer.
        texts: held-out texts.
        fallback: the prediction when the continuation does not start with a number (the
            training median, say).
        max_new_tokens: tokens generated per prompt.

    Returns:
        ``(predictions [N] float64, share of continuations that started with a number)``.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, tok, _ = train_text_baseline(texts, tiny)
        >>> pred, parsed = baseline_predictions(model, tok, ["x 3, y 6."], fallback=7.0)
        >>> pred.shape, 0.0 <= parsed <= 1.0  # 2 steps: the continuation is noise
        (torch.Size([1]), True)
    """
    prompts = [split_at_target(t)[0] for t in texts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    preds, parsed = [], 0
    try:
        for start in range(0, len(prompts), 64):
            enc = tokenizer(prompts[start : start + 64], return_tensors="pt", padding=True)
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
            conts = tokenizer.batch_decode(
                out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
            )
            for c in conts:
                numbers = find_numbers(c)
                if numbers and not c[: numbers[0].start].strip():
                    preds.append(numbers[0].value)
                    parsed += 1
                else:
                    preds.append(fallback)
    finally:
        tokenizer.padding_side = side
    return torch.tensor(preds, dtype=torch.float64), parsed / max(len(prompts), 1)


@torch.no_grad()
def sampled_predictions(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    fallback: float,
    samples: int = 32,
    levels: Sequence[float] = (),
    seed: int = 0,
    max_new_tokens: int = 12,
) -> dict[str, Any]:
    """The regression-aware reading of a text model: the median of sampled numbers, and intervals.

    ``samples`` continuations of the text before each target are drawn from the model's own
    distribution (temperature 1, no top-k or nucleus cut); the number each starts with is read.
    The prediction is the median of those numbers and the central interval of coverage ``c`` runs
    between their ``(1 - c)/2`` and ``(1 + c)/2`` sample quantiles (linear interpolation), so
    a text model's coverage compares with the causal model's. A text whose samples write no
    number is predicted ``fallback`` with an empty interval at it.

    Args:
        model: the trained text model.
        tokenizer: its tokenizer.
        texts: held-out texts.
        fallback: the prediction when no sample starts with a number.
        samples: ``K``, continuations per text.
        levels: interval coverages in ``(0, 1)``.
        seed: seed of the sampling.
        max_new_tokens: tokens generated per continuation.

    Returns:
        ``{"median": [N], "true": [N], "lower": [N, L], "upper": [N, L], "parsed": share of
        samples that wrote a number}``.

    Raises:
        ValueError: ``samples < 1`` or a level outside ``(0, 1)``.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, tok, _ = train_text_baseline(texts, tiny)
        >>> out = sampled_predictions(model, tok, ["x 3, y 6."], fallback=7.0, samples=4,
        ...                           levels=(0.5,))
        >>> out["median"].shape, out["lower"].shape, 0.0 <= out["parsed"] <= 1.0
        (torch.Size([1]), torch.Size([1, 1]), True)
    """
    samples = positive_int("samples", samples)
    lv = [float(c) for c in levels]
    if any(not 0.0 < c < 1.0 for c in lv):
        raise ValueError(f"levels must lie in (0, 1), got {levels!r}")
    prompts = [split_at_target(t)[0] for t in texts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    medians, lowers, uppers, parsed = [], [], [], 0
    per_call = max(1, 512 // samples)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for start in range(0, len(prompts), per_call):
                enc = tokenizer(
                    prompts[start : start + per_call], return_tensors="pt", padding=True
                )
                out = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    num_return_sequences=samples,
                    pad_token_id=tokenizer.pad_token_id,
                )
                conts = tokenizer.batch_decode(
                    out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
                )
                for i in range(len(conts) // samples):
                    values = []
                    for c in conts[i * samples : (i + 1) * samples]:
                        numbers = find_numbers(c)
                        if numbers and not c[: numbers[0].start].strip():
                            values.append(numbers[0].value)
                    parsed += len(values)
                    if not values:
                        medians.append(fallback)
                        lowers.append([fallback] * len(lv))
                        uppers.append([fallback] * len(lv))
                        continue
                    v = torch.tensor(values, dtype=torch.float64)
                    medians.append(float(v.median()) if len(values) % 2 else float(v.quantile(0.5)))
                    lowers.append([float(v.quantile((1 - c) / 2)) for c in lv])
                    uppers.append([float(v.quantile((1 + c) / 2)) for c in lv])
    finally:
        tokenizer.padding_side = side
    n = len(prompts)
    return {
        "median": torch.tensor(medians, dtype=torch.float64),
        "true": torch.tensor([split_at_target(t)[1] for t in texts], dtype=torch.float64),
        "lower": torch.tensor(lowers, dtype=torch.float64).reshape(n, len(lv)),
        "upper": torch.tensor(uppers, dtype=torch.float64).reshape(n, len(lv)),
        "parsed": parsed / max(n * samples, 1),
    }


@torch.no_grad()
def text_accuracy(model: Any, tokenizer: Any, texts: Sequence[str], *, causal: bool) -> float:
    """Next-token accuracy on the held-out text tokens that are not numbers.

    For the causal model the decision is the standard mode's (``argmax_k P_k``) and positions
    whose next token is ``<NUM>`` are left out; for the text model it is ``argmax`` of the logits
    and positions whose next token holds a digit are left out.

    Args:
        model: either model.
        tokenizer: its tokenizer (numeric for the causal model).
        texts: held-out texts.
        causal: which kind of model.

    Returns:
        The accuracy in ``[0, 1]``.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, ntok, _ = train_causal(texts, tiny)
        >>> 0.0 <= text_accuracy(model, ntok, ["x 3, y 6."], causal=True) <= 1.0
        True
    """
    right = total = 0
    for start in range(0, len(texts), 64):
        chunk = list(texts[start : start + 64])
        if causal:
            enc = tokenizer(chunk, padding=True, return_tensors="pt")
            hidden, _ = model.encode(
                enc["input_ids"], enc["numeric_values"], enc["attention_mask"], use_cache=False
            )
            _, act = model.heads(hidden[:, :-1], "standard")
            pred = act.predict()
            skip = enc["input_ids"][:, 1:] == model.config.num_token_id
        else:
            enc = tokenizer(
                [t + tokenizer.eos_token for t in chunk], padding=True, return_tensors="pt"
            )
            pred = model(**enc).logits[:, :-1].argmax(-1)
            digit = torch.tensor(
                [
                    any(ch.isdigit() for ch in tokenizer.convert_ids_to_tokens(i))
                    for i in range(len(tokenizer))
                ]
            )
            skip = digit[enc["input_ids"][:, 1:]]
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()
        keep = mask[:, 1:] & mask[:, :-1] & ~skip
        right += int(((pred == ids[:, 1:]) & keep).sum())
        total += int(keep.sum())
    return right / max(total, 1)


def causal_predictions(
    model: Any,
    tokenizer: NumericTokenizer,
    texts: Sequence[str],
    levels: Sequence[float],
    *,
    calibrated: bool = True,
) -> dict[str, Any]:
    """The causal model's target numbers: the regression head's median and central intervals.

    Args:
        model: the trained causal model.
        tokenizer: its numeric tokenizer.
        texts: held-out texts.
        levels: interval coverages.
        calibrated: the model's conformal intervals where it has them (else the Cauchy ones).

    Returns:
        ``{"median", "true", "lower", "upper", "loc", "scale", "calibrated"}`` for the target of
        each text (``loc``/``scale``: ``loc_Y``/``scale_Y`` in the value space, ``calibrated``
        ``[N, L]`` bool), and ``"log_score"`` / ``"pit"`` ``[N]``: the log density of each true
        target and its PIT value under the model's Cauchy predictive
        (:mod:`cauchylin.value_space`).

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, ntok, _ = train_causal(texts, tiny)
        >>> out = causal_predictions(model, ntok, ["x 3, y 6.", "x 4, y 8."], (0.5, 0.9))
        >>> out["true"].tolist(), tuple(out["lower"].shape), tuple(out["log_score"].shape)
        ([6.0, 8.0], (2, 2), (2,))
    """
    from cauchylin.value_space import value_cdf, value_log_density

    preds = number_predictions(model, tokenizer, texts, levels=levels, calibrated=calibrated)
    tgt = preds.is_target
    p = preds.prediction
    assert p.calibrated is not None
    true = preds.true[tgt]
    space = model.config.value_space
    return {
        "median": p.median[tgt],
        "true": true,
        "lower": p.lower[tgt],
        "upper": p.upper[tgt],
        "loc": p.loc[tgt],
        "scale": p.scale[tgt],
        "calibrated": p.calibrated[tgt],
        "log_score": value_log_density(true, p.loc[tgt], p.scale[tgt], space),
        "pit": value_cdf(true, p.loc[tgt], p.scale[tgt], space),
    }


@torch.no_grad()
def hidden_at_targets(
    model: Any, tokenizer: NumericTokenizer, texts: Sequence[str]
) -> torch.Tensor:
    """The final hidden state ``z`` at the position that predicts each text's target (last number).

    What a linear readout of the model's own features sees: a ridge regression fitted on these
    at the training texts is the ceiling of what any readout of ``z`` can read.

    Args:
        model: a :class:`~cauchylin_hf.model.CauchyLMForCausalLM` (or the ``causal`` of a
            :class:`TargetRegressor`).
        tokenizer: its numeric tokenizer.
        texts: texts that each end with their target number.

    Returns:
        ``[N, H]`` float64.

    Raises:
        ValueError: a text without a number after its first token.

    Example:
        >>> from cauchylin_hf.testing import tiny_base_model, tiny_tokenizer
        >>> model, ntok = CauchyLMForCausalLM.from_base(
        ...     tiny_base_model("qwen2"), tiny_tokenizer(), return_tokenizer=True)
        >>> tuple(hidden_at_targets(model, ntok, ["x 3, y 6.", "x 4, y 8."]).shape)
        (2, 32)
    """
    model.eval()
    rows = _target_rows(tokenizer, texts, model.config.value_space)
    collate = _collate_targets(_pad_id(tokenizer))
    out = []
    for start in range(0, len(rows), 64):
        batch = collate(rows[start : start + 64])
        hidden, _ = model.encode(
            batch["input_ids"], batch["numeric_values"], batch["attention_mask"], use_cache=False
        )
        at = torch.arange(hidden.shape[0])
        out.append(hidden[at, batch["target_index"]].double())
    return torch.cat(out)


@dataclass
class Scores:
    """Held-out scores of one model on one table (``nan`` where a score does not apply).

    Attributes:
        mae: mean absolute error of the target number.
        mdae: median absolute error.
        spearman: rank correlation with the truth.
        coverage: ``{level: share of targets inside the central interval}`` (causal model).
        text_accuracy: next-token accuracy on the text tokens that are not numbers.
        train_seconds: training wall time.
        extra: anything else (e.g. the share of parsed continuations).

    Example:
        >>> s = Scores(2.0, 1.0, 0.9, {0.5: 0.48}, 0.97, 12.5)
        >>> s.coverage[0.5], s.extra
        (0.48, {})
    """

    mae: float
    mdae: float
    spearman: float
    coverage: dict[float, float]
    text_accuracy: float
    train_seconds: float
    extra: dict[str, float] = field(default_factory=dict)


def score(
    pred: torch.Tensor,
    true: torch.Tensor,
    *,
    text_accuracy: float,
    train_seconds: float,
    lower: torch.Tensor | None = None,
    upper: torch.Tensor | None = None,
    levels: Sequence[float] = (),
    extra: dict[str, float] | None = None,
) -> Scores:
    """Scores of target-number predictions.

    Args:
        pred: ``[N]`` predictions.
        true: ``[N]`` true numbers.
        text_accuracy: the model's text-token accuracy.
        train_seconds: its training time.
        lower: ``[N, L]`` interval starts (or None).
        upper: ``[N, L]`` interval ends.
        levels: the ``L`` coverages.
        extra: more numbers to keep.

    Returns:
        :class:`Scores`.

    Example:
        >>> import torch
        >>> s = score(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 3.0, 3.0]),
        ...           text_accuracy=1.0, train_seconds=0.0)
        >>> s.mae, s.mdae, round(s.spearman, 3)
        (0.6666666666666666, 1.0, 0.866)
    """
    err = (pred.double() - true.double()).abs()
    coverage = {}
    if lower is not None and upper is not None:
        coverage = {
            float(c): interval_coverage(true, lower[:, j], upper[:, j])
            for j, c in enumerate(levels)
        }
    return Scores(
        mae=float(err.mean()),
        mdae=float(statistics.median(err.tolist())),
        spearman=rank_correlation(pred.double(), true.double()),
        coverage=coverage,
        text_accuracy=text_accuracy,
        train_seconds=train_seconds,
        extra=dict(extra or {}),
    )


def training_median(texts: Sequence[str]) -> float:
    """The median target number of the training texts (the constant baseline).

    Args:
        texts: training texts.

    Returns:
        The median.

    Example:
        >>> training_median(["a 1, b 10.", "a 2, b 30.", "a 3, b 20."])
        20.0
    """
    return float(statistics.median(split_at_target(t)[1] for t in texts))
