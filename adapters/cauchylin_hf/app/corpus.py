"""A synthetic numeric corpus and the small byte-level BPE tokenizer of the embedded demo model.

Sentences state prices, quantities, measurements and simple relations between numbers, e.g.
``"3 boxes of 12 eggs hold 36 eggs."`` or ``"The price rose from 4.50 to 5.00 dollars, up 0.50."``.
Every template has a relation a model can learn (a sum, a difference, a product, a unit
conversion, an average), so the last number of most sentences is predictable from the earlier ones.
Generation is deterministic under a seed and uses only :mod:`random`.

:func:`train_corpus_tokenizer` trains a byte-level BPE tokenizer on the text between numbers (the
numbers become ``<NUM>`` in :class:`~cauchylin_hf.tokenizer.NumericTokenizer`, so digits need no
merges) and returns a ``PreTrainedTokenizerFast`` with ``<pad>``, ``<bos>``, ``<eos>`` and ``<NUM>``
special tokens. No download is involved; training takes well under a second.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from cauchylin._validation import integer

from ..numbers import format_number, split_numbers

__all__ = [
    "TEMPLATES",
    "TRAINED_RUN",
    "TRAINED_TEXT",
    "CorpusSplits",
    "generate_sentences",
    "make_splits",
    "train_corpus_tokenizer",
]

_NAMES = ("Ann", "Ben", "Cara", "Dan", "Eva", "Finn", "Gus", "Hana", "Ivan", "Jo", "Kim", "Leo")
_ITEMS = ("apples", "pears", "books", "pens", "cards", "stamps", "shells", "coins")
_GOODS = ("coat", "lamp", "chair", "bike", "watch", "kettle", "radio", "desk")


def _money(x: float) -> str:
    """Prices with two decimals, as people write them (``4.50``)."""
    return f"{x:.2f}"


def _eggs(r: random.Random) -> str:
    a, b = r.randint(2, 12), r.choice((4, 6, 8, 10, 12, 20, 24))
    return f"{a} boxes of {b} eggs hold {a * b} eggs."


def _price_change(r: random.Random) -> str:
    p1 = r.randint(100, 2000) / 100
    d = r.randint(1, 40) * 0.25
    if r.random() < 0.5 or p1 <= d:
        return f"The price rose from {_money(p1)} to {_money(p1 + d)} dollars, up {_money(d)}."
    return f"The price fell from {_money(p1)} to {_money(p1 - d)} dollars, down {_money(d)}."


def _buy_more(r: random.Random) -> str:
    name, item = r.choice(_NAMES), r.choice(_ITEMS)
    a, b = r.randint(1, 50), r.randint(1, 50)
    return f"{name} had {a} {item} and bought {b} more, so {name} now has {a + b} {item}."


def _give_away(r: random.Random) -> str:
    name, item = r.choice(_NAMES), r.choice(_ITEMS)
    a = r.randint(2, 60)
    b = r.randint(1, a - 1)
    return f"{name} had {a} {item} and gave away {b}, leaving {a - b}."


def _area(r: random.Random) -> str:
    length, width = r.randint(2, 30), r.randint(2, 30)
    return (
        f"The board is {length} cm long and {width} cm wide, "
        f"so its area is {length * width} square cm."
    )


def _conversion(r: random.Random) -> str:
    kind = r.randrange(4)
    if kind == 0:
        k = r.randint(1, 40) / 2
        return f"{format_number(k)} km is {format_number(k * 1000)} m."
    if kind == 1:
        h = r.randint(2, 24)
        return f"{h} hours is {h * 60} minutes."
    if kind == 2:
        kg = r.randint(1, 40) / 4
        return f"{format_number(kg)} kg is {format_number(kg * 1000)} g."
    m = r.randint(1, 99)
    return f"{m} m is {m * 100} cm."


def _temperature(r: random.Random) -> str:
    t1 = r.randint(-15, 30)
    t2 = t1 + r.choice((-1, 1)) * r.randint(1, 12)
    word = "rose" if t2 > t1 else "fell"
    return f"The temperature {word} from {t1} to {t2} degrees, a change of {t2 - t1}."


def _speed(r: random.Random) -> str:
    v, t = r.choice((40, 50, 60, 80, 90, 100, 120)), r.randint(1, 6)
    return f"A train at {v} km/h travels {v * t} km in {t} hours."


def _average(r: random.Random) -> str:
    a, b = r.randint(1, 99), r.randint(1, 99)
    return f"The average of {a} and {b} is {format_number((a + b) / 2)}."


def _discount(r: random.Random) -> str:
    good = r.choice(_GOODS)
    p = r.randint(10, 200)
    pct = r.choice((10, 20, 25, 30, 40, 50))
    return (
        f"A {good} priced at {p} dollars is {pct} percent off, "
        f"so it costs {_money(p * (100 - pct) / 100)} dollars."
    )


def _unit_price(r: random.Random) -> str:
    n, c = r.randint(2, 12), r.randint(5, 300) / 100
    return f"A pack of {n} pens costs {_money(n * c)} dollars, {_money(c)} each."


def _total(r: random.Random) -> str:
    a, b = r.randint(0, 40), r.randint(0, 40)
    return f"There are {a} red and {b} blue balls, {a + b} in total."


def _measurement(r: random.Random) -> str:
    kind = r.randrange(3)
    if kind == 0:
        return f"The bag weighs {format_number(r.randint(5, 250) / 10)} kg."
    if kind == 1:
        return f"The river is {r.randint(2, 40)} m deep and {r.randint(10, 300)} m wide."
    return f"The parcel measures {r.randint(5, 60)} by {r.randint(5, 60)} cm."


TEMPLATES: dict[str, Callable[[random.Random], str]] = {
    "eggs": _eggs,
    "price_change": _price_change,
    "buy_more": _buy_more,
    "give_away": _give_away,
    "area": _area,
    "conversion": _conversion,
    "temperature": _temperature,
    "speed": _speed,
    "average": _average,
    "discount": _discount,
    "unit_price": _unit_price,
    "total": _total,
    "measurement": _measurement,
}
"""Template name -> sentence generator (takes a ``random.Random``, returns one sentence)."""


def _template_list(templates: Sequence[str] | None) -> list[Callable[[random.Random], str]]:
    if templates is None:
        return list(TEMPLATES.values())
    if isinstance(templates, str) or not isinstance(templates, Sequence) or not templates:
        raise ValueError(f"templates must be a non-empty list of names, got {templates!r}")
    unknown = [t for t in templates if t not in TEMPLATES]
    if unknown:
        raise ValueError(f"templates has unknown names {unknown}; known: {sorted(TEMPLATES)}")
    return [TEMPLATES[t] for t in templates]


def _check_count(n: int, name: str, minimum: int) -> None:
    integer(name, n, minimum=minimum)


def generate_sentences(n: int, seed: int = 0, templates: Sequence[str] | None = None) -> list[str]:
    """Generate ``n`` sentences, each from a template drawn uniformly at random.

    Args:
        n: number of sentences (>= 0).
        seed: the seed; the same ``(n, seed, templates)`` always gives the same list, and a longer
            list starts with the shorter one.
        templates: names from :data:`TEMPLATES` to draw from (default all).

    Returns:
        ``n`` sentences (duplicates possible).

    Raises:
        ValueError: for a negative ``n`` or an unknown template name.

    Example:
        >>> for sentence in generate_sentences(2, seed=1):
        ...     print(sentence)
        Jo had 17 pears and bought 8 more, so Jo now has 25 pears.
        A train at 120 km/h travels 480 km in 4 hours.
        >>> generate_sentences(3, seed=1)[:2] == generate_sentences(2, seed=1)
        True
    """
    _check_count(n, "n", 0)
    makers = _template_list(templates)
    rng = random.Random(seed)
    return [rng.choice(makers)(rng) for _ in range(n)]


class CorpusSplits(NamedTuple):
    """Train and held-out sentences; no held-out sentence occurs in the training split.

    Attributes:
        train: the training sentences (repeats possible).
        heldout: the held-out sentences, all distinct.

    Example:
        >>> splits = CorpusSplits(train=["1 m is 100 cm."], heldout=["2 m is 200 cm."])
        >>> train, heldout = splits  # a NamedTuple unpacks
        >>> splits.heldout, len(train)
        (['2 m is 200 cm.'], 1)
    """

    train: list[str]
    heldout: list[str]


def make_splits(
    n_train: int = 2000,
    n_heldout: int = 200,
    seed: int = 0,
    templates: Sequence[str] | None = None,
) -> CorpusSplits:
    """Make a training split and a disjoint held-out split of generated sentences.

    The held-out split takes the first ``n_heldout`` distinct sentences of the seeded stream; the
    training split takes the following sentences that are not held out (repeats within the
    training split are kept, as in real text).

    Args:
        n_train: training sentences (>= 1).
        n_heldout: held-out sentences (>= 0), all distinct.
        seed: the seed (deterministic).
        templates: names from :data:`TEMPLATES` (default all).

    Returns:
        ``CorpusSplits(train, heldout)``.

    Raises:
        ValueError: for bad counts or template names, or when the templates cannot produce enough
            distinct held-out sentences.

    Example:
        >>> splits = make_splits(100, 10, seed=0)
        >>> len(splits.train), len(splits.heldout), set(splits.train) & set(splits.heldout)
        (100, 10, set())
    """
    _check_count(n_train, "n_train", 1)
    _check_count(n_heldout, "n_heldout", 0)
    makers = _template_list(templates)
    rng = random.Random(seed)
    heldout: list[str] = []
    seen: set[str] = set()
    tries = 0
    while len(heldout) < n_heldout:
        tries += 1
        if tries > 100 * n_heldout + 1000:
            raise ValueError(
                f"n_heldout={n_heldout}: the templates do not give that many distinct sentences"
            )
        s = rng.choice(makers)(rng)
        if s not in seen:
            seen.add(s)
            heldout.append(s)
    train: list[str] = []
    tries = 0
    while len(train) < n_train:
        tries += 1
        if tries > 100 * n_train + 1000:
            raise ValueError("the held-out split covers almost every sentence; lower n_heldout")
        s = rng.choice(makers)(rng)
        if s not in seen:
            train.append(s)
    return CorpusSplits(train, heldout)


TRAINED_RUN = 256
"""The longest run of characters without a space (or of spaces) that tokenizer training reads
as one word; a longer run is read in pieces of this length. BPE training takes time quadratic
in the length of a word (a 3 MB word ran for minutes), and no token of a vocabulary of a few
thousand is that long, so the merges learnt stay those of ordinary words; encoding reads the
whole word as usual."""

TRAINED_TEXT = 65_536
"""The characters of each text that tokenizer training reads (its start): a text longer is far
longer than a model's context, and training on the whole of a few-megabyte text takes minutes."""

_LONG_RUN = re.compile(rf"\S{{{TRAINED_RUN + 1},}}|\s{{{TRAINED_RUN + 1},}}")


def _training_pieces(segment: str) -> Iterator[str]:
    """A text between numbers as the tokenizer trainer reads it: runs longer than
    :data:`TRAINED_RUN` cut into pieces of that length (empty pieces dropped)."""
    if len(segment) <= TRAINED_RUN:
        if segment:
            yield segment
        return
    start = 0
    for run in _LONG_RUN.finditer(segment):
        if run.start() > start:
            yield segment[start : run.start()]
        text = run.group()
        for i in range(0, len(text), TRAINED_RUN):
            yield text[i : i + TRAINED_RUN]
        start = run.end()
    if start < len(segment):
        yield segment[start:]


def train_corpus_tokenizer(
    texts: Iterable[str] | None = None,
    vocab_size: int = 1024,
    *,
    num_token: str | None = "<NUM>",
    min_frequency: int = 2,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """Train the demo model's byte-level BPE tokenizer on a corpus, locally.

    The tokenizer is GPT-2 style (byte-level pre-tokenizer without a prefix space, byte-level
    decoder, no normalizer), so it round-trips any text. Special tokens, in id order: ``<pad>``
    (0), ``<bos>`` (1), ``<eos>`` (2), then ``num_token`` (3) unless None. ``<bos>`` is prepended
    when ``add_special_tokens=True``; ``<eos>`` is not appended automatically (append
    ``tokenizer.eos_token`` to training texts). Merges are learned from the text between numbers
    only, since :class:`~cauchylin_hf.tokenizer.NumericTokenizer` turns numbers into ``<NUM>``;
    a word longer than :data:`TRAINED_RUN` characters is read in pieces of that length, and of a
    text longer than :data:`TRAINED_TEXT` characters only its start is read, so training takes
    time linear in the length of the texts and bounded for each text.

    Args:
        texts: training texts; default the training split of ``make_splits(2000, 0, seed=0)``.
        vocab_size: the largest vocabulary (>= 260 + specials); a small template corpus stops
            earlier, when every word is one token.
        num_token: the ``<NUM>`` special token, or None to leave it out.
        min_frequency: the least count of a pair to merge.
        model_max_length: the tokenizer's ``model_max_length``.

    Returns:
        A ``PreTrainedTokenizerFast`` with ``bos_token``, ``eos_token`` and ``pad_token`` set and
        ``padding_side="right"``.

    Raises:
        ValueError: for a ``vocab_size`` too small for the byte alphabet and special tokens, an
            empty corpus, or texts that are not strings.

    Example:
        >>> tok = train_corpus_tokenizer(vocab_size=512)
        >>> tok.decode(tok("3 boxes of 12 eggs.")["input_ids"], skip_special_tokens=True)
        '3 boxes of 12 eggs.'
    """
    specials = ["<pad>", "<bos>", "<eos>"] + ([num_token] if num_token is not None else [])
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab_size = integer("vocab_size", vocab_size)
    if vocab_size < len(alphabet) + len(specials):
        raise ValueError(
            f"vocab_size must be >= {len(alphabet) + len(specials)} (256 bytes + special tokens), "
            f"got {vocab_size}"
        )
    _check_count(min_frequency, "min_frequency", 1)
    _check_count(model_max_length, "model_max_length", 1)
    if texts is None:
        texts = make_splits(2000, 0, seed=0).train
    segments: list[str] = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"texts[{i}] must be a str, got {type(t).__name__}")
        head = t[:TRAINED_TEXT]  # the start of a text far longer than any context is enough
        segments.extend(piece for seg in split_numbers(head)[0] for piece in _training_pieces(seg))
    if not segments:
        raise ValueError("texts is empty (or holds only numbers): nothing to train on")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(segments, trainer=trainer)
    bos_id = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        model_max_length=model_max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
