"""HTML: block elements become lines, tables become table lines.

The standard library's tolerant parser reads what browsers would read, so a
truncated page is still a page; bytes that are not text are
``CORRUPTED_FILE``. Scripts, styles and the head are skipped. The page is
read in one pass whatever its nesting (no tree is built); its characters and
table cells are bounded like a CSV file's (``DOCUMENT_TOO_LARGE``).
"""

from __future__ import annotations

import html.parser
from pathlib import Path

from daemon.extraction.document import Document, Line, grid_page, grid_table_lines, grid_text_line
from daemon.extraction.parsers.base import ParseOptions, check_pages, too_large
from daemon.extraction.parsers.text import read_text

_BLOCK = {
    "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "fieldset", "figcaption",
    "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
    "ol", "p", "pre", "section", "ul", "caption", "title",
}
_SKIP = {"script", "style", "template", "noscript", "svg", "head"}
_MAX_TABLE_DEPTH = 32
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Blocks(html.parser.HTMLParser):
    """Collects ``str`` (a line of text) and ``list[list[str]]`` (a table) blocks."""

    def __init__(self, max_cells: int) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str | list[list[str]]] = []
        self._text: list[str] = []
        self._skip = 0
        # Stack of open tables: rows of cells, and the cell being filled.
        self._tables: list[list[list[str]]] = []
        self._cell: list[list[str]] = []
        # Tables nested deeper than _MAX_TABLE_DEPTH open none (their cells go to
        # the deepest table): a nested table's text is copied into its parent's
        # cell, and ten thousand levels would copy it ten thousand times.
        self._flattened = 0
        self._max_cells = max_cells
        self._cells = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            if tag not in _VOID:
                self._skip += 1
            return
        if tag == "table":
            if len(self._tables) >= _MAX_TABLE_DEPTH:
                self._flattened += 1
                return
            self._flush()
            self._tables.append([])
        elif tag == "tr" and self._tables:
            self._tables[-1].append([])
        elif tag in ("td", "th") and self._tables:
            self._cells += 1
            if self._cells > self._max_cells:
                raise too_large(f"the HTML page has more than {self._max_cells:,} table cells", "max_cells",
                                self._max_cells)
            if not self._tables[-1]:
                self._tables[-1].append([])
            self._cell.append([])
        elif tag in _BLOCK:
            self._newline()

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if tag == "table" and self._flattened:
            self._flattened -= 1
            return
        if tag in ("td", "th") and self._cell:
            text = " ".join("".join(self._cell.pop()).split())
            if self._tables and self._tables[-1]:
                self._tables[-1][-1].append(text)
        elif tag == "table" and self._tables:
            rows = [row for row in self._tables.pop() if any(row)]
            if self._tables and self._cell:
                # A nested table is text in its parent's cell.
                self._cell[-1].append(" ".join(" ".join(row) for row in rows))
            elif rows:
                self.blocks.append(rows)
        elif tag in _BLOCK:
            self._newline()

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._cell:
            self._cell[-1].append(data)
        else:
            self._text.append(data)

    def _newline(self) -> None:
        if self._cell:
            self._cell[-1].append(" ")
        else:
            self._flush()

    def _flush(self) -> None:
        text = " ".join("".join(self._text).split())
        self._text.clear()
        if text:
            self.blocks.append(text)

    def close(self) -> None:
        super().close()
        while self._cell:  # truncated inside a table
            self.handle_endtag("td")
        while self._tables:
            self.handle_endtag("table")
        self._flush()


def parse_html(path: Path, options: ParseOptions) -> Document:
    parser = _Blocks(options.max_cells)
    parser.feed(read_text(path, "HTML page", options))
    parser.close()
    check_pages(1, options)
    lines: list[Line] = []
    row = 0
    for block in parser.blocks:
        if isinstance(block, str):
            line = grid_text_line(row, block)
            if line is not None:
                lines.append(line)
            row += 1
        else:
            lines.extend(grid_table_lines(row, block))
            row += len(block) + 1
    return Document((grid_page(1, lines),))
