"""The byte ranges a `.npy` being written keeps (h5fs.fuse.handles.Spans): merged as pieces come
in any order, against a set model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from h5fs.spans import Spans


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=60))
def test_spans_merge_as_a_set_of_bytes(pieces):
    spans, model = Spans(), set()
    for start, n in pieces:
        spans.add(start, start + n)
        model |= set(range(start, start + n))
        ranges = list(spans)
        assert all(a < b for a, b in ranges)
        got = set().union(*(range(a, b) for a, b in ranges)) if ranges else set()
        assert got == model
        assert all(ranges[i][1] < ranges[i + 1][0] for i in range(len(ranges) - 1))   # merged, apart
        prefix = 0
        while prefix in model:
            prefix += 1
        assert spans.prefix() == prefix
