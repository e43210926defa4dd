"""Modification time: old (0x000E, ASCII YYYYMMDDhhmmss UTC) and new (0x0012, seconds) messages."""

from __future__ import annotations

import calendar

from ...errors import FormatError
from ..codec import Reader


def decode_new(c: Reader) -> float:
    version = c.u8()
    if version != 1:
        raise FormatError(f"modification time message version {version}")
    c.skip(3)
    return float(c.u32())


def decode_old(c: Reader) -> float:
    text = c.bytes(14).decode("ascii", "replace")
    try:
        fields = (int(text[0:4]), int(text[4:6]), int(text[6:8]), int(text[8:10]), int(text[10:12]), int(text[12:14]))
        if not (1 <= fields[1] <= 12 and 1 <= fields[2] <= 31 and fields[3] < 24 and fields[4] < 60 and fields[5] < 62):
            raise ValueError
    except ValueError:
        raise FormatError(f"old modification time message: invalid time {text!r}") from None
    return float(calendar.timegm(fields + (0, 0, 0)))
