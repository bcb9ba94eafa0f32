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
* :func:`baseline_predictions` — greedy continuation of the text before each target, the first
  number written there (the training median when none is written);
* :func:`score` — MAE, median absolute error, Spearman, interval coverage, and token accuracy
  on the text tokens (the tokens that are not numbers: comparable between the two tokenizers).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from cauchylin.metrics import interval_coverage, rank_correlation

from ..model import CauchyLMForCausalLM
from ..numbers import find_numbers
from ..predict import number_predictions
from ..tokenizer import NumericTokenizer
from ..training import train
from .corpus import train_corpus_tokenizer

__all__ = [
    "Recipe",
    "Scores",
    "baseline_predictions",
    "causal_predictions",
    "corrupt_targets",
    "score",
    "split_at_target",
    "text_accuracy",
    "train_causal",
    "train_text_baseline",
    "training_median",
]


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
        learning_rate: peak learning rate (AdamW, cosine decay after 5% warm-up).
        seed: seed of the weights and the data order.
        settings: causal settings for ``from_base`` (``CauchyLMConfig`` fields) on top of the
            defaults.

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
    seed: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

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
            ``max_steps``, batch size, learning rate, cosine schedule, warm-up steps, seed.

        Example:
            >>> Recipe(max_steps=200).trainer_arguments()["warmup_steps"]  # 5% of the steps
            10
        """
        return {
            "max_steps": self.max_steps,
            "per_device_train_batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "lr_scheduler_type": "cosine",
            "warmup_steps": max(1, self.max_steps // 20),
            "seed": self.seed,
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


def train_causal(train_texts: Sequence[str], recipe: Recipe) -> tuple[Any, NumericTokenizer, float]:
    """Build and train the causal language model of a recipe.

    Args:
        train_texts: training texts.
        recipe: backbone, budget and causal settings.

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
    tok = train_corpus_tokenizer(list(train_texts), vocab_size=recipe.vocab_size)
    ntok = NumericTokenizer(tok)
    base = recipe.backbone(tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        settings = {"freeze_backbone": False, **recipe.settings}
        model = CauchyLMForCausalLM.from_base(base, ntok, **settings)
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
            **args,
        )
    return model, ntok, float(result.train_runtime)


def train_text_baseline(train_texts: Sequence[str], recipe: Recipe) -> tuple[Any, Any, float]:
    """Train the plain softmax-CE language model of a recipe on the text, digits as tokens.

    Args:
        train_texts: training texts.
        recipe: backbone and budget (its causal settings are not used).

    Returns:
        ``(model, tokenizer, train_seconds)``.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, tok, seconds = train_text_baseline(texts, tiny)
        >>> type(model).__name__, "<NUM>" in tok.get_vocab()  # digits stay digits
        ('Qwen2ForCausalLM', False)
    """
    from transformers import (
        DataCollatorForLanguageModeling,
        PrinterCallback,
        Trainer,
        TrainingArguments,
    )

    tok = train_corpus_tokenizer(list(train_texts), vocab_size=recipe.vocab_size, num_token=None)
    model = recipe.backbone(tok)
    rows = [{"input_ids": tok(t + tok.eos_token)["input_ids"]} for t in train_texts]
    collator = DataCollatorForLanguageModeling(tok, mlm=False)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
            **recipe.trainer_arguments(),
        )
        trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collator)
        trainer.remove_callback(PrinterCallback)  # silent, like train(progress=False)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return model.eval(), tok, seconds


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
    model: Any, tokenizer: NumericTokenizer, texts: Sequence[str], levels: Sequence[float]
) -> dict[str, torch.Tensor]:
    """The causal model's target numbers: the regression head's median and central intervals.

    Args:
        model: the trained causal model.
        tokenizer: its numeric tokenizer.
        texts: held-out texts.
        levels: interval coverages.

    Returns:
        ``{"median", "true", "lower", "upper"}`` for the target of each text.

    Example:
        >>> tiny = Recipe(hidden_size=16, num_layers=1, num_heads=2, vocab_size=300,
        ...           max_steps=2, batch_size=4)
        >>> texts = [f"x {i}, y {2 * i}." for i in range(1, 9)]
        >>> model, ntok, _ = train_causal(texts, tiny)
        >>> out = causal_predictions(model, ntok, ["x 3, y 6.", "x 4, y 8."], (0.5, 0.9))
        >>> out["true"].tolist(), tuple(out["lower"].shape)
        ([6.0, 8.0], (2, 2))
    """
    preds = number_predictions(model, tokenizer, texts, levels=levels)
    tgt = preds.is_target
    p = preds.prediction
    return {
        "median": p.median[tgt],
        "true": preds.true[tgt],
        "lower": p.lower[tgt],
        "upper": p.upper[tgt],
    }


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
