"""Decoding a data file: UTF-8, or UTF-16/UTF-32 with a byte-order mark.

The one reader of the bytes of every data file (:func:`cauchylin_hf.data.read_texts`,
:func:`cauchylin_hf.app.tables.read_table`). It uses the standard library only, so the command
line checks a file's encoding before it imports torch (:mod:`cauchylin_hf.app.checks`).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

__all__ = ["check_binary", "check_header", "field_limit_message", "read_text_file"]

_BOMS = (  # byte-order marks, longest first (UTF-32's starts like UTF-16's)
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


# Files that are not text, by their first bytes: what they are and how to get text from them.
_TO_CSV = "save it as CSV (UTF-8)"
_FORMATS = (
    (b"\x1f\x8b", "gzip-compressed", "decompress it first (gunzip -k {name})"),
    (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx or OpenDocument file is one)",
     "open it in a spreadsheet program and " + _TO_CSV + ", or unzip a zipped file"),
    (b"\xd0\xcf\x11\xe0", "an old Excel (.xls) or Office file",
     "open it in a spreadsheet program and " + _TO_CSV),
    (b"PAR1", "a Parquet file",
     "write it as CSV (e.g. pandas.read_parquet('{name}').to_csv('{stem}.csv', index=False))"),
    (b"ARROW1", "an Arrow file", "write it as CSV, or save it with datasets' save_to_disk"),
    (b"BZh", "bzip2-compressed", "decompress it first (bunzip2 -k {name})"),
    (b"\xfd7zXZ\x00", "xz-compressed", "decompress it first (unxz -k {name})"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it first (unzstd {name})"),
    (b"%PDF", "a PDF document", "export its table as CSV"),
    (b"SQLite format 3\x00", "an SQLite database", "export the table as CSV"),
)  # fmt: skip


def check_binary(head: bytes, path: str | os.PathLike[str]) -> None:
    """Refuse a file whose first bytes say it is not text (compressed, a spreadsheet, Parquet,
    ...), naming the format and how to get a text file from it.

    Args:
        head: the file's first bytes (16 are enough).
        path: the file, for the message.

    Raises:
        ValueError: a known format that is not text.

    Example:
        >>> check_binary(b"age,target\\n", "t.csv")
        >>> check_binary(b"\\x1f\\x8b\\x08\\x00", "data/t.csv.gz")
        Traceback (most recent call last):
        ...
        ValueError: data/t.csv.gz is gzip-compressed, not a text file: decompress it first (gunzip -k data/t.csv.gz)
    """
    p = Path(path)
    for magic, what, todo in _FORMATS:
        if head.startswith(magic):
            stem = str(p.with_name(p.name.split(".")[0] or p.name))
            raise ValueError(f"{p} is {what}, not a text file: {todo.format(name=p, stem=stem)}")


def _wide_source(data: bytes) -> str:
    """The encoding of text whose every character is 2 or 4 bytes (UTF-16/32 without a
    byte-order mark), by where the zero bytes of its ASCII letters fall."""
    head = data[:4000]
    zeros = [i % 4 for i, b in enumerate(head) if b == 0]
    if not zeros:
        return "utf-16le"
    share = [zeros.count(k) / len(zeros) for k in range(4)]
    if len(zeros) * 2 > len(head):  # three zero bytes in four: UTF-32
        return "utf-32le" if share[0] < 0.1 else "utf-32be"
    even = share[0] + share[2]
    return "utf-16be" if even > 0.5 else "utf-16le"


def field_limit_message(path: str | os.PathLike[str], line: int, exc: Exception) -> str:
    """The message of a table cell longer than the ``csv`` module's limit.

    Args:
        path: the table.
        line: the line where the record with that cell starts.
        exc: the ``csv.Error``.

    Returns:
        One line naming the file, the line and the limit, and what it usually is.

    Example:
        >>> field_limit_message("t.csv", 1, ValueError("field larger than field limit"))
        ... # doctest: +ELLIPSIS
        't.csv, line 1: field larger than field limit (... characters); a cell that long is usually an unclosed quote (") that swallows the lines after it'
    """
    import csv

    return (
        f"{path}, line {line}: {exc} ({csv.field_size_limit()} characters); a cell that long "
        'is usually an unclosed quote (") that swallows the lines after it'
    )


def read_text_file(path: str | os.PathLike[str]) -> str:
    """The text of a data file: UTF-8, or UTF-16/UTF-32 with a byte-order mark (as spreadsheet
    programs and Windows editors write them); a UTF-8 byte-order mark is dropped.

    Args:
        path: the file.

    Returns:
        Its text, without a byte-order mark.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a file that is not text (gzip, a spreadsheet, Parquet: :func:`check_binary`),
            bytes that are not text of that encoding (Latin-1, Windows-1252), or NUL
            characters (UTF-16 or UTF-32 without a byte-order mark, which reads as ASCII with a
            NUL after every letter, or a stray one); the message names the file, the line and
            the conversion.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.txt"
        >>> _ = path.write_bytes("3 eggs.\\n".encode("utf-8-sig"))
        >>> read_text_file(path)
        '3 eggs.\\n'
        >>> _ = path.write_bytes("3 eggs.\\n".encode("utf-16-le"))
        >>> read_text_file(path)
        Traceback (most recent call last):
        ...
        ValueError: ... holds NUL characters (the first on line 1): it looks like UTF-16 or UTF-32 without a byte-order mark; save it as UTF-8 (e.g. iconv -f utf-16le -t utf-8 t.txt > t.utf8.txt)
    """
    p = Path(path)
    data = p.read_bytes()
    check_binary(data[:16], p)
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    convert = f"{p.name} > {p.stem}.utf8{p.suffix})"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        head = data[:200]
        wide = head.count(0) * 4 > len(head)  # UTF-16 of Latin text: about every other byte
        source = _wide_source(data) if wide else "latin1"
        hint = (
            f"it looks like {source.upper().removesuffix('LE').removesuffix('BE')} "
            "without a byte-order mark"
            if wide
            else "it may be Latin-1 or Windows-1252"
        )
        raise ValueError(
            f"{p} is not {encoding.upper().removesuffix('-SIG')} text: byte 0x"
            f"{data[exc.start]:02x} at line {line} ({hint}); save it as UTF-8 (e.g. "
            f"iconv -f {source} -t utf-8 {convert}"
        ) from None
    text = text.removeprefix("\ufeff")
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        if text.count("\x00") * 5 < len(text):  # a stray NUL, not every other byte
            raise ValueError(
                f"{p} holds a NUL character on line {line}: a text file has none (binary data, "
                "or a file cut or joined by mistake?)"
            )
        raise ValueError(
            f"{p} holds NUL characters (the first on line {line}): it looks like UTF-16 or "
            f"UTF-32 without a byte-order mark; save it as UTF-8 (e.g. iconv -f "
            f"{_wide_source(data)} -t utf-8 {convert}"
        )
    return text


def check_header(cells: list[str], path: str | os.PathLike[str]) -> list[str]:
    """Check a table's header row: every column named, no name twice.

    Args:
        cells: the header's cells (stripped).
        path: the table, for the message.

    Returns:
        ``cells``.

    Raises:
        ValueError: a column without a name, or a repeated name (the message names the file).

    Example:
        >>> check_header(["age", "bmi"], "t.csv")
        ['age', 'bmi']
        >>> check_header(["age", "age"], "t.csv")
        Traceback (most recent call last):
        ...
        ValueError: t.csv: the header repeats the column names ['age']
    """
    bad = [i for i, name in enumerate(cells) if not name]
    if bad:
        raise ValueError(f"{path}: column {bad[0] + 1} of the header has no name")
    counts = Counter(cells)  # linear in the columns (a header may have many thousand)
    repeated = sorted(n for n, k in counts.items() if k > 1)
    if repeated:
        raise ValueError(f"{path}: the header repeats the column names {repeated}")
    return cells
