"""Red ink over the print: a "PAID" or date stamp, a pen's tick or note.

A stamp across a receipt's header turns the words it crosses into other words
("BESTARIJAYA", "STATIONERY  BOOKS"), or hides a line from the detector
altogether. The print is black, blue or purple, the stamp red; and red ink is
as pale as paper in the red channel, where the print stays dark. So where a red mark
crosses the print, the band of the page from the first line it crosses to the
last is read a second time in grey with its red ink at the level of its red
channel (`lifted`), and the lines a mark crosses are taken from that reading
unless the first was clearly surer (`merged`).

A mark is told from letters printed in red or magenta (a two-colour till
printer's header) by its strokes: a stamp's ring, letters and lines, a pen's
stroke, stand taller than a line of the page's text (`marks`). A page with
no such mark across its print is read once, as before; finding out costs one
pass over its pixels.

Everything here works on RapidOCR's input, the page shrunk to at most
`rapidocr.MAX_SIDE` pixels a side in BGR order, and on boxes in its pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from daemon.extraction.document import Word

if TYPE_CHECKING:
    import numpy

# A pixel whose red channel exceeds both others by more than this (of 255) is red ink:
# a stamp's ink measures 60-150 over the others, and blue, black, grey or purple print,
# and JPEG's colour noise around them, under 20.
RED_MARGIN = 40
# Red ink is a mark over the print where its strokes (joined across a pixel's gap) stand
# taller than this many of the page's text lines: a stamp's ring, letters and date, a
# pen's tick or note measure 2 to 12; a letter printed in red or magenta, 1 at most.
MARK_HEIGHT = 1.5
# Print: a pixel darker than this (of 255) in the red channel, where red ink is pale.
DARK = 128
# A line is crossed where its box holds more than this share of a mark's ink and of print:
# one stroke of a stamp across a word is a few per cent of its box, and the strokes of
# printed letters ten to sixty.
CROSSED_MARK = 0.01
CROSSED_PRINT = 0.03
# A line read again is taken from the second reading unless the first is surer by more
# than this (recogniser's score, 0..1): where red ink crossed it, the first reading is
# the one that saw the stamp.
SURER = 0.05


def red_ink(pixels: numpy.ndarray) -> numpy.ndarray | None:
    """Where a BGR page holds red ink, or None where it has none."""
    import numpy as np

    if pixels.ndim != 3:
        return None  # a grey page has no colour to tell a stamp by
    blue, green, red = (pixels[..., channel].astype(np.int16) for channel in range(3))
    ink = red - np.maximum(blue, green) > RED_MARGIN
    return ink if ink.any() else None


def marks(ink: numpy.ndarray, line_height: float) -> numpy.ndarray | None:
    """The red `ink` that lies in strokes taller than `MARK_HEIGHT` lines of `line_height`
    pixels (a stamp, a pen), or None where there is none."""
    import cv2
    import numpy as np

    _, labels, stats, _ = cv2.connectedComponentsWithStats(cv2.dilate(ink.astype(np.uint8), np.ones((3, 3), np.uint8)))
    tall = stats[:, cv2.CC_STAT_HEIGHT] > MARK_HEIGHT * line_height
    tall[0] = False  # the background
    return tall[labels] & ink if tall.any() else None


def print_ink(pixels: numpy.ndarray) -> numpy.ndarray:
    """Where a BGR page is dark in its red channel: black, blue and purple ink, not red."""
    return pixels[..., 2] < DARK


def _share(word: Word, mask: numpy.ndarray) -> float:
    top, left = max(0, int(word.y0)), max(0, int(word.x0))
    box = mask[top : int(word.y1) + 1, left : int(word.x1) + 1]
    return float(box.mean()) if box.size else 0.0


def crossed(word: Word, mark: numpy.ndarray, printed: numpy.ndarray) -> bool:
    """Whether a mark crosses the print inside `word`'s box (pixel coordinates)."""
    return _share(word, mark) > CROSSED_MARK and _share(word, printed) > CROSSED_PRINT


def lifted(pixels: numpy.ndarray, ink: numpy.ndarray) -> numpy.ndarray:
    """The page in grey, its red `ink` at the level of its red channel: as pale as paper,
    and where it crosses black or blue print as dark as the print."""
    import numpy as np

    blue, green, red = (pixels[..., channel].astype(np.uint32) for channel in range(3))
    grey = ((red * 299 + green * 587 + blue * 114) // 1000).astype(np.uint8)
    grey[ink] = pixels[..., 2][ink]
    return np.repeat(grey[..., None], 3, axis=2)


def _overlap(a: Word, b: Word) -> bool:
    """Two runs of one line: half the lower one's height shared, and some width."""
    shared = min(a.y1, b.y1) - max(a.y0, b.y0)
    return shared > 0.5 * min(a.y1 - a.y0, b.y1 - b.y0) and min(a.x1, b.x1) > max(a.x0, b.x0)


def _score(words: Sequence[Word]) -> float:
    chars = sum(len(w.text) for w in words)
    return sum(w.conf * len(w.text) for w in words) / chars if chars else 0.0


def merged(first: list[Word], second: list[Word], first_crossed: Sequence[bool],
           second_crossed: Sequence[bool]) -> list[Word]:
    """`first` with the lines a mark crosses read from `second` (a flag per run of each
    says which runs a mark crosses).

    Runs of the two readings that overlap form a line's group (a stamp splits a line into
    pieces in one reading, not in the other). A group that a mark crosses anywhere is taken
    from `second`, unless `first`'s runs are surer by more than `SURER`; a run only
    `second` found is kept where a mark crosses it (the stamp hid it from `first`).
    """
    # Union-find over the runs of both readings: first's are 0..n-1, second's n..n+m-1.
    n = len(first)
    parent = list(range(n + len(second)))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    for j, later in enumerate(second):
        for i, earlier in enumerate(first):
            if _overlap(earlier, later):
                parent[root(n + j)] = root(i)
    groups: dict[int, tuple[list[int], list[int]]] = {}
    for index in range(len(parent)):
        mine, theirs = groups.setdefault(root(index), ([], []))
        (mine if index < n else theirs).append(index if index < n else index - n)
    out: list[Word] = []
    for mine, theirs in groups.values():
        ours = [first[i] for i in mine]
        replacements = [second[j] for j in theirs]
        crossed = any(first_crossed[i] for i in mine) or any(second_crossed[j] for j in theirs)
        if not crossed or not replacements:
            out.extend(ours)
        elif not ours or _score(ours) <= _score(replacements) + SURER:
            out.extend(replacements)
        else:
            out.extend(ours)
    return out
