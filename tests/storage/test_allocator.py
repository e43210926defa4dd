"""The space allocator: first fit or the end of the file, small blocks never straddle a page,
freed space reusable only once released, and a free-space walk's gaps adopted minus what changed
meanwhile. (Its use in real files is tested through the mount: test_mount_write.py.)"""

from __future__ import annotations

import random

import pytest

from h5fs.errors import H5fsError
from h5fs.storage.allocator import LARGE, META, PAGE, RAW, Allocator, _place


def test_end_of_file_and_alignment():
    a = Allocator(1001)
    assert a.allocate(10) == 1008            # 8-byte aligned
    assert a.allocate(PAGE - 100) == PAGE    # at 1024 it would straddle 4096: the next page
    assert a.eoa == 2 * PAGE - 100
    assert a.extents() == [(1001, 7), (1018, PAGE - 1018)]   # what alignment skipped is free


def test_raw_data_packs_across_page_boundaries():
    """Chunks always go to fresh space (never rewritten in place): only 8-byte alignment, so
    small ones pack without the gaps a metadata block leaves before a page boundary."""
    raw, meta = Allocator(1001), Allocator(1001)
    for a in (raw, meta):
        assert a.allocate(3000, raw=True) == 1008
    assert raw.allocate(200, raw=True) == 4008              # across 4096, as it may
    assert meta.allocate(200) == PAGE                       # a metadata block starts the next page
    assert raw.extents() == [(1001, 7)] and meta.extents() == [(1001, 7), (4008, PAGE - 4008)]


def test_freed_space_waits_for_release_then_merges_and_is_reused():
    a = Allocator(0)
    x, y, z = a.allocate(64), a.allocate(64), a.allocate(64)
    a.free(x, 64)
    a.free(y, 64)
    assert a.allocate(32) == 192             # pending frees are not reusable yet
    a.release()
    assert a.extents() == [(0, 128)]         # merged
    assert a.allocate(100) == 0
    assert a.extents() == [(100, 28)]
    a.free(z, 64)
    a.release()
    assert a.extents() == [(100, 92)]        # merged with the neighbour freed before
    with pytest.raises(H5fsError):
        a.add_free(120, 8)                   # already free


def test_snapshot_restore_undoes_a_transaction():
    a = Allocator(100)
    saved = a.snapshot()
    a.allocate(50)
    a.free(0, 8)
    a.restore(saved)
    assert a.eoa == 100 and a.extents() == [] and a.pending == []


@pytest.mark.parametrize("walked", (False, True))
def test_restore_takes_back_the_graves_of_a_failed_transaction(walked):
    """A transaction that freed a header's last link and then failed leaves the header live:
    it is no grave (kept out of reuse), and the walk's verdict never lists it to be zeroed."""
    a = Allocator(10000)
    if not walked:
        a.hold_frees()   # a mount's start: frees wait for the walk
    saved = a.snapshot()
    a.bury(4096, 8, {4096})
    a.restore(saved)
    if not walked:
        a.release_held([(4096, 200, 0, 4096)])   # the walk met the header before that transaction
    assert a.graves == [] and a.to_zero == [] and a.unverified == []


def test_restore_after_splits_and_merges_gives_back_the_same_extents():
    """The snapshot is a log of the pools' changes, undone in reverse: whatever a transaction
    carved, merged or grew, restore leaves the extents, the end of allocation and the pending
    frees exactly as they were; only the last snapshot can be restored."""
    a = Allocator(0)
    blocks = [a.allocate(size) for size in (40, 100, 24, 300, 64, 8)]
    for at, size in zip(blocks[::2], (40, 24, 64)):
        a.free(at, size)
    a.release()
    a.free(blocks[1], 100)
    before = (a.extents(), a.eoa, list(a.pending))
    saved = a.snapshot()
    a.allocate(16)                     # carves the first hole
    a.allocate(5000)                   # the end of the file, with an alignment gap
    a.add_free(blocks[3], 300)         # merges two holes and a block
    a.allocate(350)                    # carves the merged extent
    a.free(blocks[5], 8)
    a.restore(saved)
    assert (a.extents(), a.eoa, list(a.pending)) == before
    old = a.snapshot()
    a.snapshot()
    with pytest.raises(H5fsError):
        a.restore(old)


def test_first_fit_matches_a_scan_of_every_extent():
    """Size classes only shorten the search: the block goes where a scan of every free extent
    in address order would put it (many tiny extents, metadata blocks that may not straddle a
    page, raw blocks that may), through random allocations, frees and restores."""
    rng = random.Random(7)

    def scanned(extents: list[tuple[int, int]], size: int, raw: bool) -> int | None:
        for start, have in extents:
            at = -(-start // 8) * 8 if raw else _place(start, size)
            if at + size <= start + have:
                return at
        return None

    a, live = Allocator(0), []
    for step in range(3000):
        if live and rng.random() < 0.45:
            at, size = live.pop(rng.randrange(len(live)))
            a.free(at, size)
            if rng.random() < 0.5:
                a.release()
            continue
        size, raw = rng.choice([5, 13, 16, 29, 100, 139, 700, 4000, 9000]), rng.random() < 0.3
        expected = scanned(a.extents(), size, raw)
        saved = a.snapshot()
        at = a.allocate(size, raw)
        assert at == expected if expected is not None else at >= a.eoa - size - 8, step
        if rng.random() < 0.1:
            a.restore(saved)
            continue
        live.append((at, size))
    assert len(a.extents()) > 50   # the scans above had many extents to pass over


def test_adopt_keeps_out_what_changed_during_the_walk():
    a = Allocator(1000)
    end = a.watch()
    assert end == 1000
    b = a.allocate(100)                      # at 1000: beyond the walk's end anyway
    a.free(200, 50)                          # freed during the walk: pending, not adopted twice
    adopted = a.reuse_gaps([(0, 100), (180, 100), (900, 100)])
    assert adopted == 100 + 30 + 20 + 100
    a.release()
    assert a.extents() == [(0, 100), (180, 100), (900, 100)]
    assert b == 1000


def test_split_pools_take_their_own_kind_first():
    """Files persisting free space without paging: metadata and raw data pools (the managers of
    slots 0 and 2); each kind takes its own first, then the other's; frees go to their kind."""
    a = Allocator(10000, split=True)
    a.load(META, [(1000, 100)])
    a.load(RAW, [(2000, 100)])
    assert a.allocate(64, raw=True) == 2000
    assert a.allocate(64) == 1000
    assert a.allocate(32, raw=True) == 2064      # the rest of the raw pool
    assert a.allocate(32, raw=True) == 1064      # then the metadata pool
    a.free(3000, 50, raw=True)
    a.free(4000, 50)
    a.release()
    assert a.pool(RAW) == [(2096, 4), (3000, 50)] and a.pool(META) == [(1096, 4), (4000, 50)]
    with pytest.raises(H5fsError):
        a.add_free(3010, 8)                      # already free in the other pool


def test_paged_large_requests_are_page_aligned():
    """A page or more: page aligned from the large pool (the part before the page stays free)
    or from a page-aligned end of file, whose last page's rest becomes a large section."""
    P = 512
    a = Allocator(4 * P, page=P)
    a.load(LARGE, [(P + 100, 2 * P)])            # [612, 1636): one whole page, at 1024
    assert a.allocate(P) == 2 * P
    assert a.pool(LARGE) == [(P + 100, P - 100), (3 * P, 100)]
    assert a.allocate(P + 1) == 4 * P            # no room: the end of the file
    assert a.eoa == 6 * P and a.pool(LARGE)[-1] == (5 * P + 1, P - 1)


def test_paged_small_requests_keep_pages_of_one_kind():
    P = 512
    a = Allocator(2 * P, page=P)
    m = a.allocate(100)                          # a new metadata page
    r = a.allocate(100, raw=True)                # a new raw data page
    assert (m, r) == (2 * P, 3 * P) and a.kinds == {2: META, 3: RAW}
    assert a.allocate(50) == 2 * P + 104         # 8-byte aligned, in the metadata page
    assert a.allocate(300, raw=True) == 3 * P + 104
    assert a.pool(META) == [(2 * P + 100, 4), (2 * P + 154, P - 154)]
    # a freed small block goes to its page's pool whatever the caller says; merged within the page
    a.free(3 * P + 104, 300)
    a.release()
    assert a.pool(RAW) == [(3 * P + 100, P - 100)]
    # a page wholly free returns to the large pool (and merges there)
    a.free(3 * P, 100, raw=True)
    a.release()
    assert a.pool(RAW) == [] and 3 * P not in a.kinds and a.pool(LARGE) == [(3 * P, P)]


def test_paged_sections_do_not_merge_across_pages():
    P = 512
    a = Allocator(4 * P, page=P)
    a.load(META, [(P - 64, 64)])
    a.free(P, 64)                                # the next page, metadata too
    a.release()
    assert a.pool(META) == [(P - 64, 64), (P, 64)]


def test_after_previews_frees_without_releasing():
    a = Allocator(1000, split=True)
    a.load(META, [(0, 8)])
    assert a.after([(8, 8, False), (100, 50, True)]) == {META: [(0, 16)], RAW: [(100, 50)]}
    assert a.extents() == [(0, 8)]


def test_paged_adoption_takes_whole_pages_only():
    P = 512
    a = Allocator(8 * P, page=P)
    a.watch()
    assert a.reuse_gaps([(100, 3 * P)]) == 2 * P      # [100, 1636): pages 1 and 2
    assert a.pool(LARGE) == [(P, 2 * P)]


def test_meets_free_agrees_with_a_scan_of_every_free_extent():
    """`meets_free` (bisect per pool, then the pending frees) answers as a scan of the listed
    extents and the pending ones does, for ranges touching, straddling and missing them."""
    rnd = random.Random(7)
    for split in (False, True):
        a = Allocator(0, split=split)
        blocks = [(a.allocate(size, raw=raw), size) for size, raw in
                  ((rnd.randrange(8, 300), rnd.random() < 0.5) for _ in range(200))]
        for address, size in rnd.sample(blocks, 80):
            a.free(address, size)
        a.release()
        for address, size in rnd.sample(blocks, 40):
            if not any(s < address + size and address < s + n for s, n in a.extents()):
                a.free(address, size)   # pending: not reusable yet, but free
        free = a.extents() + a.pending
        for _ in range(2000):
            start, length = rnd.randrange(0, a.eoa), rnd.randrange(1, 400)
            expected = any(s < start + length and start < s + n for s, n in free)
            assert a.meets_free(start, length) == expected, (start, length)
