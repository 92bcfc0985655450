"""Shared by the bad-input tests: every rejected input's message must be a row of docs/bad-input.md."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "bad-input.md"


def as_documented(message: str, path: Path | str) -> str:
    """The message with the file's path replaced by ``FILE``, as the docs table shows it."""
    return str(message).replace(str(path), "FILE")


def assert_documented(message: str) -> None:
    """The exact message (FILE for the path) is in the docs table, inside backquotes."""
    doc = DOC.read_text()
    assert f"`{message}`" in doc, f"docs/bad-input.md lacks the row:\n`{message}`"


def assert_one_plain_line(message: str) -> None:
    """One line, and numbers printed plainly (no numpy reprs such as np.float64(-10.0))."""
    assert "\n" not in message, message
    assert "np." not in message and "numpy" not in message, message
    assert "Traceback" not in message, message
