"""The comma or stop after a line's last word, which the detector left out.

RapidOCR's detector boxes a run of text by its letters; a small mark set a little
apart after the last one ("BALAKONG," in a wide-spaced till font, a faint stop
after "LUMPUR") is often outside the box, so the recogniser never sees it. In a
header that mark is what separates an address's parts, and an address is
compared as printed. So where a run has blank paper after it and a mark of a comma's or a
stop's size lies in the blank just right of it (`mark_beside`), the run is read
again with that blank in its crop, and the mark is taken if it is all the
second reading adds (`added_mark`): the letters stay as first read.

A run with only paper (or scattered specks: a halftone background) beside it is
not read again; on the sample receipts 17 runs of 1,170 were, at no measurable
cost.

Everything here works on RapidOCR's input (`rapidocr._model_input`: BGR pixels)
and on boxes in its pixels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.extraction.document import Word

if TYPE_CHECKING:
    import numpy

# How far right of a run's box a dropped mark is looked for, and the crop read again
# reaches, in the run's heights: the marks the sample receipts lost lie 0.2-0.5 beyond
# it, and the next word of a line is further than `NEXT_RUN`.
GAP = 0.6
# Another run starting within this many heights right of a run, on its line (a label and
# its value, table cells): no mark was dropped between them, and a crop reaching past the
# blank would read that run's letters.
NEXT_RUN = 3.0
# A mark: darker than the blank's paper by this much (of 255: a faint stop measured
# 40-50), at least `MARK_AREA` of a squared line height (a comma 0.02, a speck of a
# halftone background a pixel or two), at most `MARK_SIZE` of a line height each way,
# and apart from the letter before it.
INK = 35
MARK_AREA = 0.008
MARK_SIZE = (0.4, 0.6)  # width, height
MARKS = ",."


def room_after(run: Word, runs: list[Word]) -> bool:
    """Whether no other run starts within `NEXT_RUN` heights right of `run` on its line."""
    height = run.y1 - run.y0
    middle = (run.y0 + run.y1) / 2
    return not any(other is not run and run.x1 - 0.2 * height <= other.x0 < run.x1 + NEXT_RUN * height
                   and other.y0 < middle < other.y1 for other in runs)


def mark_beside(pixels: numpy.ndarray, run: Word) -> bool:
    """Whether a mark of a comma's or a stop's size lies in the blank right of `run`
    (a box in `pixels`' own coordinates): from its middle height to a little under
    its foot, where those marks sit."""
    import cv2
    import numpy as np

    height = run.y1 - run.y0
    bottom, right = pixels.shape[:2]
    x0, x1 = int(run.x1 + 0.1 * height), min(right, int(run.x1 + GAP * height) + 1)
    y0, y1 = max(0, int(run.y0 + 0.4 * height)), min(bottom, int(run.y1 + 0.25 * height) + 1)
    if x1 - x0 < 2 or y1 - y0 < 2:
        return False
    grey = pixels[y0:y1, x0:x1].min(axis=2)
    ink = (grey < np.median(grey) - INK).astype(np.uint8)
    if not ink.any():
        return False
    _, _, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    least = max(3.0, MARK_AREA * height * height)
    widest, tallest = MARK_SIZE[0] * height, MARK_SIZE[1] * height
    return any(area >= least and width <= widest and tall <= tallest and left > 0
               for left, _, width, tall, area in stats[1:])


def crop_box(pixels: numpy.ndarray, run: Word) -> tuple[int, int, int, int]:
    """The box (x0, y0, x1, y1) of `pixels` that `run` is read again from: its own
    with a margin, and the blank right of it."""
    height = run.y1 - run.y0
    bottom, right = pixels.shape[:2]
    return (max(0, int(run.x0 - 0.3 * height)), max(0, int(run.y0 - 0.15 * height)),
            min(right, int(run.x1 + GAP * height) + 1), min(bottom, int(run.y1 + 0.15 * height) + 1))


def added_mark(first: str, again: str) -> str | None:
    """The mark the second reading `again` adds at the end of `first`, or None where it
    reads anything else otherwise (letters read twice differ: the first reading stands)."""
    if len(again) == len(first) + 1 and again.startswith(first) and again[-1] in MARKS:
        return again[-1]
    return None
