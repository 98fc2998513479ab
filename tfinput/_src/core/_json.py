"""Reading a JSON document given as a file path or as the JSON text itself."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def load(
    path_or_text: str | os.PathLike[str], error: type[Exception], what: str
) -> tuple[Any, str]:
    """Parse ``path_or_text``: JSON text if it starts with ``{``, else a file path.

    Returns:
      ``(data, source)`` where source names the file (or ``<string>``) for messages.

    Raises:
      error: the file cannot be read, or is not valid JSON (naming the file).
    """
    text = str(path_or_text)
    source = "<string>"
    if not text.lstrip().startswith("{"):
        source = text
        try:
            text = Path(path_or_text).read_text()
        except OSError as e:
            raise error(f"cannot read {what} file {source}: {e.strerror}") from e
    try:
        return json.loads(text), source
    except json.JSONDecodeError as e:
        raise error(f"{source}: not valid JSON: {e}") from e
