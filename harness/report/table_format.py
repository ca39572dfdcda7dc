"""Rendering a header row and text cells as a Markdown or HTML table, escaped for each."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Literal

TableFormat = Literal["md", "html"]
TABLE_FORMATS = ("md", "html")
_WHITESPACE = re.compile(r"\s+")


def check_format(fmt: str) -> None:
    if fmt not in TABLE_FORMATS:
        raise ValueError(f"table format {fmt!r} is not one of {', '.join(TABLE_FORMATS)}")


def markdown_cell(text: str) -> str:
    """One-line Markdown cell: whitespace runs collapsed, ``|`` and backslash escaped."""
    one_line = _WHITESPACE.sub(" ", text).strip()
    return one_line.replace("\\", "\\\\").replace("|", "\\|")


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    fmt: str,
    row_classes: Sequence[str] | None = None,
) -> str:
    """Table text; ``row_classes`` (HTML only) sets a CSS class per row, e.g. "failed"."""
    check_format(fmt)
    if fmt == "md":
        lines = [
            "| " + " | ".join(markdown_cell(header) for header in headers) + " |",
            "|" + "|".join("---" for _ in headers) + "|",
        ]
        lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    head = "".join(f"<th>{html.escape(header)}</th>" for header in headers)
    body_rows = []
    for index, row in enumerate(rows):
        css_class = row_classes[index] if row_classes else ""
        class_attribute = f' class="{html.escape(css_class)}"' if css_class else ""
        cells = "".join(f"<td>{html.escape(cell)}</td>" for cell in row)
        body_rows.append(f"<tr{class_attribute}>{cells}</tr>")
    body = "\n".join(body_rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n"
