"""Where a label goes on a plot: the spot around its point that covers the fewest marks and no
other label. Both renderers place the figure model's labels with it, each measuring the text and
mapping data to pixels its own way (plotly estimates, matplotlib measures the laid-out figure).
"""

from __future__ import annotations

import dataclasses

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels, y up


@dataclasses.dataclass(frozen=True)
class Spot:
    """Where a label goes: ``anchors[anchor]`` moved by (dx, dy) pixels (y up), aligned by ha/va."""

    anchor: int
    dx: float
    dy: float
    ha: str  # left | right | center
    va: str  # top | bottom | center
    box: Box


def _box(x: float, y: float, width: float, height: float, ha: str, va: str) -> Box:
    x0 = {"left": x, "right": x - width, "center": x - width / 2}[ha]
    y0 = {"bottom": y, "top": y - height, "center": y - height / 2}[va]
    return x0, y0, x0 + width, y0 + height


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


ARROW_SPOTS = (  # (dx, dy, ha, va) in points: beside the point first, then further away
    (30, -36, "left", "top"),
    (-30, -36, "right", "top"),
    (30, 36, "left", "bottom"),
    (-30, 36, "right", "bottom"),
    (40, 0, "left", "center"),
    (-40, 0, "right", "center"),
    (30, -90, "left", "top"),
    (-30, -90, "right", "top"),
    (30, 90, "left", "bottom"),
    (-30, 90, "right", "bottom"),
    (60, -150, "left", "top"),
    (-60, -150, "right", "top"),
    (60, 150, "left", "bottom"),
    (-60, 150, "right", "bottom"),
    (60, -220, "left", "top"),
    (-60, -220, "right", "top"),
    # further along the axis, for a point in a crowd (several configurations of one PPL)
    (110, 50, "left", "bottom"),
    (110, -50, "left", "top"),
    (-110, 50, "right", "bottom"),
    (-110, -50, "right", "top"),
    (180, 100, "left", "bottom"),
    (180, -100, "left", "top"),
    (-180, 100, "right", "bottom"),
    (-180, -100, "right", "top"),
)


# right beside the point, clear of its bar, no arrow: where a small label (a configuration's trial
# and figure) goes when one of them covers no other label
CLOSE_SPOTS = (
    (8, 0, "left", "center"),
    (-8, 0, "right", "center"),
    (8, -6, "left", "top"),
    (-8, -6, "right", "top"),
    (8, 6, "left", "bottom"),
    (-8, 6, "right", "bottom"),
)


def choose_spot(
    anchors: list[tuple[float, float]],
    size: tuple[float, float],
    obstacles: list[tuple[float, float]],
    area: Box,
    taken: list[Box],
    spots: tuple[tuple[float, float, str, str], ...] = ARROW_SPOTS,
    scale: float = 1.0,
    reach: bool = False,
) -> Spot:
    """The spot, around any of ``anchors``, whose label box covers the fewest ``obstacles``.

    Everything in pixels, y up; ``spots`` are offsets times ``scale``. A box
    that leaves ``area`` or covers a label already placed (``taken``) comes
    last; ties go to the earlier anchor and spot. The box checked is a few
    pixels larger than the text; with ``reach``, against ``taken`` it spans
    the arrow to the anchor too.
    """
    width, height = size[0] + 8, size[1] + 6
    best: tuple[tuple[float, int, int], Spot] | None = None
    for which, (ax, ay) in enumerate(anchors):
        for index, (dx, dy, ha, va) in enumerate(spots):
            dx, dy = dx * scale, dy * scale
            box = _box(ax + dx, ay + dy, width, height, ha, va)
            inside = box[0] >= area[0] and box[1] >= area[1] and box[2] <= area[2] and box[3] <= area[3]
            covered = sum(1 for x, y in obstacles if box[0] <= x <= box[2] and box[1] <= y <= box[3])
            span = (min(box[0], ax), min(box[1], ay), max(box[2], ax), max(box[3], ay)) if reach else box
            score = covered + (0 if inside else 1000) + 500 * sum(_overlaps(span, t) for t in taken)
            rank = (score, index, which)
            if best is None or rank < best[0]:
                best = (rank, Spot(anchor=which, dx=dx, dy=dy, ha=ha, va=va, box=box))
    assert best is not None
    return best[1]


def choose_label_spot(
    anchors: list[tuple[float, float]],
    size: tuple[float, float],
    obstacles: list[tuple[float, float]],
    area: Box,
    taken: list[Box],
    *,
    close: bool,
    scale: float = 1.0,
) -> tuple[Spot, bool]:
    """(spot, beside): a ``close`` label right beside its point (no arrow) where such a spot stays
    inside ``area`` and covers no label in ``taken``; else, and for every other label, the best
    spot for an arrow whose text and arrow cover no label already placed (``choose_spot``)."""
    if close:
        spot = choose_spot(anchors, size, obstacles, area, taken, CLOSE_SPOTS, scale)
        box = spot.box
        inside = box[0] >= area[0] and box[1] >= area[1] and box[2] <= area[2] and box[3] <= area[3]
        if inside and not any(_overlaps(box, t) for t in taken):
            return spot, True
    return choose_spot(anchors, size, obstacles, area, taken, ARROW_SPOTS, scale, reach=True), False
