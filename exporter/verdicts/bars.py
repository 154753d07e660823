"""Bars of unicode block characters for a terminal report (no library, no colour): a whole split into parts, each
drawn with its own shade, and a level from 0 to 1 drawn to an eighth of a cell.

    ▕████████████████▓▓▓▓▒▒▒▒▒▒░▁▁▏   split([("█", 0.55), ("▓", 0.15), ("▒", 0.2), ("░", 0.03), ("▁", 0.07)], 30)
    ▕███████████████████████▌      ▏   level(0.78, 30)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# A cell's left eighths, empty to full: the last character of a level.
EIGHTHS = " ▏▎▍▌▋▊▉█"
LEFT, RIGHT = "▕", "▏"  # the frame: the scale of a bar shows even where it is empty


def cells(shares: Sequence[float], width: int) -> list[int]:
    """Whole cells for each share of ``width``, adding up to the shares' rounded total: each gets its share rounded
    down, and the cells left go to the largest remainders (the first of equal ones)."""
    shares = [max(0.0, share) if math.isfinite(share) else 0.0 for share in shares]
    exact = [share * width for share in shares]
    counts = [math.floor(value) for value in exact]
    left = min(width, round(sum(exact))) - sum(counts)
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for index in by_remainder[:max(0, left)]:
        counts[index] += 1
    return counts


def split(parts: Sequence[tuple[str, float]], width: int) -> str:
    """``parts`` (a fill character, a share of the whole) laid end to end in a frame of ``width`` cells."""
    counts = cells([share for _, share in parts], width)
    inside = "".join(fill * count for (fill, _), count in zip(parts, counts, strict=True))
    return f"{LEFT}{inside:<{width}}{RIGHT}"


def level(ratio: float, width: int) -> str:
    """``ratio`` (0-1, clipped) as a bar of ``width`` cells, to an eighth of a cell."""
    ratio = min(1.0, max(0.0, ratio)) if math.isfinite(ratio) else 0.0
    full, eighths = divmod(round(ratio * width * 8), 8)
    inside = "█" * full + (EIGHTHS[eighths] if eighths else "")
    return f"{LEFT}{inside:<{width}}{RIGHT}"
