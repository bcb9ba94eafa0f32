"""Decoding a data file: UTF-8, or UTF-16/UTF-32 with a byte-order mark.

The one reader of the bytes of every data file (:func:`cauchylin_hf.data.read_texts`,
:func:`cauchylin_hf.app.tables.read_table`). It uses the standard library only, so the command
line checks a file's encoding before it imports torch (:mod:`cauchylin_hf.app.checks`).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["check_header", "read_text_file"]

_BOMS = (  # byte-order marks, longest first (UTF-32's starts like UTF-16's)
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
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
        ValueError: bytes that are not text of that encoding (Latin-1, Windows-1252), or NUL
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
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    convert = f"{p.name} > {p.stem}.utf8{p.suffix})"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        head = data[:200]
        wide = head.count(0) * 4 > len(head)  # UTF-16 of Latin text: about every other byte
        hint = (
            "it looks like UTF-16 without a byte-order mark"
            if wide
            else "it may be Latin-1 or Windows-1252"
        )
        source = "utf-16le" if wide else "latin1"
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
            "UTF-32 without a byte-order mark; save it as UTF-8 (e.g. iconv -f utf-16le -t "
            f"utf-8 {convert}"
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
    seen: set[str] = set()
    repeated = sorted({n for n in cells if n in seen or seen.add(n)})  # linear in the columns
    if repeated:
        raise ValueError(f"{path}: the header repeats the column names {repeated}")
    return cells
