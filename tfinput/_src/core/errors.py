"""The exceptions tfinput raises for bad input.

Every message names what was being read (file, feature, config field) and what was
expected versus what was found, so a user can fix the data or the schema without
reading tfinput's source.
"""

from __future__ import annotations

import difflib
import re
import traceback
from collections.abc import Iterable, Sequence


class TfinputError(Exception):
    """Base class of every error tfinput raises on purpose."""


class ConfigError(TfinputError, ValueError):
    """A pipeline, tuner or profile configuration value is invalid."""


class SchemaError(TfinputError, ValueError):
    """A schema is malformed, or does not match the files it is applied to."""


class SourceError(TfinputError, ValueError):
    """Input files cannot be found or opened (empty glob, missing file, no records)."""


class DataError(TfinputError, ValueError):
    """A record's content breaks the schema (bad id, NaN, wrong type, corrupt bytes)."""


class OutputError(TfinputError, OSError):
    """An output cannot be written to its end (a full disk): the message names the
    output and the reason, and nothing half-written is left there."""


class ResumeError(TfinputError, RuntimeError):
    """An input position cannot be saved (a source tf.data cannot checkpoint) or a
    saved one cannot be restored (another pipeline's, or not a tfinput state)."""


class ServiceError(TfinputError, RuntimeError):
    """A read through tf.data service stalled (no batch within the bound: typically a
    worker died and was not restarted on its address)."""


_ASSERT = re.compile(
    r"assertion failed: \[tfinput DataError: (.*?)\](?: \[([^\]]*)\])?(?=\s*(?:\[\[|\n|$))", re.S
)
_RAISED_INSIDE = re.compile(
    r"(?<!tfinput )\b(?:DataError|SchemaError|SourceError|ConfigError): (.*)$", re.S
)
#: A reader's error handed over from its callback as a message and raised by an assert
#: (``[DataError: ...]``): the callback raising would have TensorFlow log its traceback.
_HANDED_OVER = re.compile(
    r"assertion failed: \[(?:DataError|SchemaError|SourceError|ConfigError): (.*?)\]"
    r"(?=\s*(?:\[\[|\n|$))",
    re.S,
)
_NOISE = (
    r"\{\{function_node [^}]*\}\}\s*",
    r"Error in user-defined function passed to \S+ transformation with iterator: \S+: ",
    r"\s*\[\[\{\{node [^}]*\}\}\]\]",
    r"\s*\{\{node [^}]*\}\}",
    r"\s*\[Op:\w+\]( name: \S*)?",
    r"Name: <unknown>, ",
)


def clean_error(error: BaseException) -> str:
    """The useful sentence of a TensorFlow error (tfinput's own assert messages, parse
    errors, corrupt-record errors), without TensorFlow's graph-node noise."""
    if isinstance(error, TfinputError):
        return str(error)
    text = getattr(error, "message", None) or str(error)
    text = text.replace("\\'", "'").replace('\\"', '"')
    # A Python exception raised inside the pipeline (a reader's callback): TensorFlow
    # appends its traceback; the sentence before it is the message (tfinput's own
    # errors, raised by its readers, without their class name).
    text = text.split("\nTraceback (most recent call last):", 1)[0]
    m = _ASSERT.search(text)
    if m:
        return " ".join(p.strip() for p in m.groups() if p).strip()
    inner = _HANDED_OVER.search(text) or _RAISED_INSIDE.search(text)
    if inner:
        return inner.group(1).strip()
    for pattern in _NOISE:
        text = re.sub(pattern, "", text)
    text = " ".join(text.split())
    damaged = re.search(r"(corrupted|truncated) record at (\d+)", text)
    if damaged:
        kind, offset = damaged.groups()
        if kind == "truncated":
            what = "the file ends inside this record (a partial copy?)"
        elif int(offset) == 0:
            what = "the file does not start with a TFRecord record (another format?)"
        else:
            what = "its length or checksum does not match: the bytes are damaged"
        text = f"{kind} record at byte {int(offset):,}: {what}"
    return text or type(error).__name__


def raised_inside(error: BaseException) -> bool:
    """Whether a TensorFlow error carries one of tfinput's errors raised inside the
    pipeline (a reader's Python callback), before TensorFlow's appended traceback."""
    return bool(_RAISED_INSIDE.search(str(error).split("\nTraceback", 1)[0]))


def without_locals(error: BaseException) -> BaseException:
    """``error`` with the local variables of its traceback's finished frames cleared
    (and those of the errors chained to it); returns it.

    A TensorFlow error raised by ``next(iterator)`` holds, through its traceback, the
    frames of tf.data's iterator methods and so the iterator itself (its threads, its
    buffers). Held by whatever keeps the error (an ``except ... as e`` kept, a test's
    ``pytest.raises``), the iterator then outlives the failure and is deleted by a later
    garbage collection, which waits for its threads there. Cleared, the iterator is
    deleted as soon as its last owner lets go. The traceback's lines stay.
    """
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
    return error


def did_you_mean(key: str, candidates: Iterable[str]) -> str:
    """``"; did you mean [...]?"`` with the close matches of ``key``, or ``""``."""
    close = difflib.get_close_matches(key, list(candidates), n=3)
    return f"; did you mean {close}?" if close else ""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when empty)."""
    text = getattr(e, "message", None) or str(e)
    return text.strip().splitlines()[0] if text.strip() else type(e).__name__


def field_error(owner: str, field: str, expected: str, got: object) -> SchemaError:
    """``"{owner}.{field}: expected {expected}, got {got!r}"``: a schema field's error."""
    return SchemaError(f"{owner}.{field}: expected {expected}, got {got!r}")


def check_name(owner: str, name: object) -> None:
    if not isinstance(name, str) or not name or name != name.strip():
        raise field_error(owner, "name", "a non-empty string without surrounding spaces", name)


def check_int(
    owner: str, field: str, value: object, minimum: int, maximum: int | None = None
) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise field_error(owner, field, f"an int >= {minimum}", value)
    if maximum is not None and value > maximum:
        raise field_error(owner, field, f"an int <= {maximum}", value)


def check_choice(owner: str, field: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise field_error(owner, field, f"one of {list(choices)}", value)
