"""Modification time: old (0x000E, ASCII YYYYMMDDhhmmss UTC) and new (0x0012, seconds) messages.

Both decode to seconds since the epoch (what the model uses) and encode back from them. The old
message's text is canonical in every file libhdf5 wrote; a text the decoder normalises (a 31st
of February, a leap second) is written back as the instant it stands for. Its two trailing bytes
(and the new message's three) are reserved: written as zeros.
"""

from __future__ import annotations

import calendar
import time

from ...errors import FormatError
from ..codec import Reader, Writer


def decode_new(c: Reader) -> float:
    version = c.u8()
    if version != 1:
        raise FormatError(f"modification time message version {version}")
    c.skip(3)
    return float(c.u32())


def encode_new(w: Writer, seconds: float) -> None:
    w.fields("B3xI", 1, _whole(seconds))


def decode_old(c: Reader) -> float:
    text = c.bytes(14).decode("ascii", "replace")
    try:
        fields = (int(text[0:4]), int(text[4:6]), int(text[6:8]), int(text[8:10]), int(text[10:12]), int(text[12:14]))
        if not (1 <= fields[1] <= 12 and 1 <= fields[2] <= 31 and fields[3] < 24 and fields[4] < 60 and fields[5] < 62):
            raise ValueError
    except ValueError:
        raise FormatError(f"old modification time message: invalid time {text!r}") from None
    return float(calendar.timegm(fields + (0, 0, 0)))


def encode_old(w: Writer, seconds: float) -> None:
    t = time.gmtime(_whole(seconds))
    w.bytes(b"%04d%02d%02d%02d%02d%02d\0\0" % (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec))


def _whole(seconds: float) -> int:
    if seconds != int(seconds):
        raise ValueError(f"modification time {seconds} is not a whole number of seconds")
    return int(seconds)
