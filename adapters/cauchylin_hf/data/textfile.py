"""Reading a data file: UTF-8, or UTF-16/UTF-32 with a byte-order mark, and its texts.

The one decoder of the bytes of every data file (:func:`read_text_file` whole, :func:`open_text`
a line at a time; the tables of :mod:`cauchylin_hf.data.table` are read through them too), and
the reader of a file of texts: plain text, one per line, or JSON lines (:func:`read_texts`,
:func:`line_text`). It uses the standard library only, so the command line reads a data file
(its encoding, its JSON lines, its texts) before it imports torch
(:mod:`cauchylin_hf.app.checks`).
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "JSONL_SUFFIXES",
    "check_binary",
    "check_text",
    "line_text",
    "open_text",
    "read_text_file",
    "read_texts",
]

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


def _encoding(head: bytes) -> str:
    """The encoding a file's first bytes name by their byte-order mark (UTF-8 without one)."""
    return next((name for bom, name in _BOMS if head.startswith(bom)), "utf-8-sig")


def open_text(path: str | os.PathLike[str]) -> TextIO:
    """A data file opened to be read as text a line at a time, in the encoding its byte-order
    mark names (UTF-8 without one; a UTF-8 mark is dropped), with ``newline=""`` (as the ``csv``
    module wants it).

    The whole file is never read: a byte that is not text raises ``UnicodeDecodeError`` where
    it is read (:func:`read_text_file` then names the line and the conversion).

    Args:
        path: the file.

    Returns:
        The open text file (close it: use it in a ``with`` block).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a file that is not text (:func:`check_binary`).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = path.write_bytes("x,y\\n1,2\\n".encode("utf-16"))
        >>> with open_text(path) as f:
        ...     f.readline()
        'x,y\\n'
    """
    p = Path(path)
    with p.open("rb") as f:
        head = f.read(16)
    check_binary(head, p)
    return p.open(encoding=_encoding(head), newline="")


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
    encoding = _encoding(data)
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


JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
"""The suffixes of files whose lines are JSON records (a ``.json`` file may also hold one array)."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, where: str) -> None:
    """Refuse a text that holds a lone surrogate (a character no tokenizer can encode).

    A lone surrogate (U+D800 to U+DFFF) is half of a UTF-16 pair: what a text cut by UTF-16
    units leaves of an emoji (valid JSON: ``"\\ud83d"``), or how Python keeps a byte that is
    not UTF-8 in a command-line argument (U+DC80 to U+DCFF). It cannot be written as UTF-8, and
    the tokenizers library fails on it with a ``TypeError``.

    Args:
        text: the text.
        where: where it comes from (``"data.jsonl:12"``, ``"--prompt 1"``), named in the error.

    Raises:
        ValueError: ``text`` holds a lone surrogate (the message gives the character and its
            position).

    Example:
        >>> check_text("3 eggs \\U0001f95a", "text 1")  # a whole emoji: fine
        >>> check_text("3 eggs \\ud83e", "data.jsonl:2")
        Traceback (most recent call last):
        ...
        ValueError: data.jsonl:2: character 8 is a lone surrogate '\\ud83e', half of a UTF-16 pair (a text cut in the middle of an emoji?): no tokenizer can read it; remove it or restore the whole character
    """
    found = _SURROGATE.search(text)
    if found is None:
        return
    code = ord(found.group())
    what = (
        f"a byte that is not UTF-8 (0x{code - 0xDC00:02x}, as Python keeps it in a command-line "
        "argument), or half of a UTF-16 pair"
        if 0xDC80 <= code <= 0xDCFF
        else "half of a UTF-16 pair (a text cut in the middle of an emoji?)"
    )
    raise ValueError(
        f"{where}: character {found.start() + 1} is a lone surrogate {found.group()!r}, {what}: "
        "no tokenizer can read it; remove it or restore the whole character"
    )


def _record_text(record: Any, text_field: str, where: str) -> str:
    """The text of one JSON record (an object with ``text_field``, or a bare string)."""
    if isinstance(record, str):
        check_text(record, where)
        return record
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if text_field not in record:
        raise ValueError(
            f"{where}: the record has no field {text_field!r} (fields: {sorted(record)}): each "
            f"record holds its text under {text_field!r}, or is a JSON string (in Python, "
            "read_texts(path, text_field=...) reads another field)"
        )
    text = record[text_field]
    if not isinstance(text, str):
        raise ValueError(
            f"{where}: field {text_field!r} must be a string, got {type(text).__name__}"
        )
    check_text(text, where)
    return text


def read_texts(path: str | os.PathLike[str], *, text_field: str = "text") -> list[str]:
    """Read the texts of a dataset file.

    Format by suffix:

    * ``.jsonl`` / ``.ndjson``: one JSON record per line, the text in ``record[text_field]`` (a
      record may also be a bare JSON string);
    * ``.json``: the same line by line, or one JSON array of such records for the whole file;
    * anything else: plain text, one example per line.

    The file is UTF-8 or UTF-16/UTF-32 with a byte-order mark (:func:`read_text_file`); a UTF-8
    byte-order mark is dropped. Blank lines are skipped.

    Args:
        path: the file.
        text_field: the JSON field holding the text.

    Returns:
        The texts, in file order.

    Raises:
        FileNotFoundError: when ``path`` does not exist or is not a file.
        ValueError: for a file that is not text (:func:`read_text_file`), a line that is not
            valid JSON (or nested too deeply to parse), a record that is neither an object nor
            a string, a record without ``text_field`` or whose field is not a string, a text
            with a lone surrogate (``"\\ud83d"``, half an emoji:
            :func:`~cauchylin_hf.tokenizer.check_text`), or a file with no texts at all; the
            message names the file and line (or array index).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "tiny.jsonl"
        >>> _ = path.write_text('{"text": "3 eggs."}\\n\\n"4 pens."\\n')
        >>> read_texts(path)
        ['3 eggs.', '4 pens.']
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"dataset file not found: {str(p)!r}")
    texts = _read_texts(p, text_field)
    if not texts:
        raise ValueError(f"dataset file {str(p)!r} is empty: it holds no texts")
    return texts


def _read_texts(p: Path, text_field: str) -> list[str]:
    suffix = p.suffix.lower()
    texts: list[str] = []
    content = read_text_file(p)
    if suffix == ".json":
        if content.lstrip().startswith("["):
            try:
                records = json.loads(content)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
            except RecursionError:
                raise ValueError(f"{p}: the JSON is nested too deeply to parse") from None
            return [_record_text(r, text_field, f"{p}[{i}]") for i, r in enumerate(records)]
    jsonl = suffix in JSONL_SUFFIXES
    # newline=None: "\r\n" and "\r" end lines too, as reading the file in text mode does
    for lineno, line in enumerate(io.StringIO(content, newline=None), start=1):
        text = line_text(line, jsonl=jsonl, text_field=text_field, where=f"{p}:{lineno}")
        if text is not None:
            texts.append(text)
    return texts


def line_text(line: str, *, jsonl: bool, text_field: str = "text", where: str) -> str | None:
    r"""The text of one line of a dataset file, as :func:`read_texts` reads it.

    Args:
        line: the line (its end of line may be there).
        jsonl: the line is a JSON record (an object with ``text_field``, or a bare string);
            otherwise it is the text itself.
        text_field: the JSON field holding the text.
        where: the file and line, for error messages (``"data.jsonl:12"``).

    Returns:
        The text, or None for a blank line.

    Raises:
        ValueError: as :func:`read_texts`, naming ``where``.

    Example:
        >>> line_text('{"text": "3 eggs."}\n', jsonl=True, where="t.jsonl:1")
        '3 eggs.'
        >>> line_text("  \n", jsonl=False, where="t.txt:2") is None
        True
    """
    if not line.strip():
        return None
    if not jsonl:
        return line.rstrip("\r\n")
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg})") from exc
    except RecursionError:
        raise ValueError(f"{where}: the JSON is nested too deeply to parse") from None
    return _record_text(record, text_field, where)
