"""The remote block cache (storage/remote/block_cache.py) on its own: blocks kept across opens,
checked against their CRC before first use, a torn log tail ignored, another version starting
afresh, the budget kept by evicting unpinned blocks, a busy entry leaving the second user a
private file, old entries pruned."""

from __future__ import annotations

import os

import pytest

from conftest import tmpfs
from h5fs.storage.remote.block_cache import RECORD, BlockCache

BLOCK = 4096
URL = "s3://bucket/key.h5"


def block_bytes(n: int, size: int = BLOCK) -> bytes:
    return bytes([(n * 7 + i) % 251 for i in range(size)])


def cache(d, version="v1", size=40 * BLOCK, budget=1 << 30, url=URL) -> BlockCache:
    return BlockCache(str(d), url, version, size, BLOCK, budget)


def stored(c: BlockCache, numbers) -> None:
    for n in numbers:
        c.store(n, memoryview(block_bytes(n)))


def test_blocks_survive_a_reopen_and_are_checked_first(tmp_path):
    c = cache(tmp_path)
    stored(c, [0, 3, 39])
    assert c.ready(3) and not c.ready(1)
    path = c.path
    c.close()
    c = cache(tmp_path)
    assert c.path == path
    assert not c.ready(3), "a block from an earlier open is served only once its CRC matched"
    assert c.missing(range(0, 5)) == [1, 2, 4]
    assert c.ready(0) and c.ready(3)
    assert os.pread(c.fd, BLOCK, 3 * BLOCK) == block_bytes(3)
    c.close()


def test_a_block_whose_bytes_changed_on_disk_is_fetched_again(tmp_path):
    c = cache(tmp_path)
    stored(c, [2, 5])
    data = os.path.join(c.path, "data")
    c.close()
    with open(data, "r+b") as fh:      # what a power loss can leave: the log says 2 is there
        fh.seek(2 * BLOCK + 100)
        fh.write(b"\xff" * 8)
    c = cache(tmp_path)
    assert c.missing(range(0, 6)) == [0, 1, 2, 3, 4]
    c.close()


def test_a_torn_log_tail_is_ignored(tmp_path):
    c = cache(tmp_path)
    stored(c, [1, 2])
    log = os.path.join(c.path, "log")
    c.close()
    with open(log, "ab") as fh:
        fh.write(RECORD.pack(7, 0, 1)[:9])
    c = cache(tmp_path)
    assert c.missing(range(0, 8)) == [0, 3, 4, 5, 6, 7]
    c.close()


def test_another_version_or_block_size_starts_afresh(tmp_path):
    c = cache(tmp_path)
    stored(c, [0, 1])
    c.close()
    c = cache(tmp_path, version="v2")
    assert c.missing(range(0, 2)) == [0, 1]
    assert os.path.getsize(os.path.join(c.path, "data")) == 40 * BLOCK
    assert os.stat(os.path.join(c.path, "data")).st_blocks == 0, "the old version's bytes are gone"
    c.close()


def test_the_budget_evicts_least_recently_used_unpinned_blocks(tmp_path):
    c = cache(tmp_path, size=200 * BLOCK, budget=64 * BLOCK)   # 64 blocks is the floor
    stored(c, range(64))
    c.pin(range(0, 1))          # block 0 is being read: it must stay
    c.pin(range(5, 6))
    c.unpin(range(5, 6))
    stored(c, range(64, 67))    # three more: the oldest unpinned (1, 2, 3) go
    assert c.ready(0)
    assert [n for n in range(1, 5) if not c.ready(n)] == [1, 2, 3]
    assert os.pread(c.fd, BLOCK, 1 * BLOCK) == bytes(BLOCK), "an evicted block's space is given back"
    c.unpin(range(0, 1))
    assert c.held() == 64 * BLOCK
    path = c.path
    c.close()
    c = cache(tmp_path, size=200 * BLOCK, budget=64 * BLOCK)
    assert c.path == path
    assert c.missing(range(0, 5)) == [1, 2, 3], "evictions are in the log too"
    c.close()


def test_a_busy_entry_leaves_the_second_user_a_private_file(tmp_path):
    first = cache(tmp_path)
    stored(first, [0])
    second = cache(tmp_path)
    assert second.path is None
    assert second.missing(range(0, 1)) == [0]
    stored(second, [0])
    assert os.pread(second.fd, BLOCK, 0) == block_bytes(0)
    second.close()
    first.close()


def test_without_a_directory_blocks_live_in_a_private_file(tmp_path):
    c = BlockCache(None, URL, "v1", 10 * BLOCK, BLOCK, 1 << 20)
    assert c.path is None
    stored(c, [9])
    assert os.pread(c.fd, BLOCK, 9 * BLOCK) == block_bytes(9)
    c.close()
    assert os.listdir(tmp_path) == []


def test_old_entries_are_pruned_to_fit_the_budget(tmp_path):
    budget = 200 * BLOCK
    paths = {}
    for i in range(3):
        c = cache(tmp_path, url=f"http://h/{i}.h5", size=60 * BLOCK, budget=budget)
        stored(c, range(60))
        paths[i] = c.path
        c.close()
        os.utime(os.path.join(paths[i], "meta"), (1000 + i, 1000 + i))   # 0 is the least recently used
    assert len(os.listdir(tmp_path)) == 3, "three entries of 60 blocks fit in 200"
    c = cache(tmp_path, url="http://h/new.h5", size=60 * BLOCK, budget=budget)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in (paths[1], paths[2], c.path))
    c.close()


@pytest.mark.parametrize("size", [1, BLOCK - 1, BLOCK + 1])
def test_a_short_last_block(tmp_path, size):
    c = cache(tmp_path, size=size)
    last = (size - 1) // BLOCK
    c.store(last, memoryview(block_bytes(last, size - last * BLOCK)))
    c.close()
    c = cache(tmp_path, size=size)
    assert c.missing(range(0, last + 1)) == list(range(last))
    c.close()


def test_an_entry_others_can_write_is_not_used(tmp_path):
    c = cache(tmp_path)
    stored(c, [0])
    path = c.path
    c.close()
    os.chmod(path, 0o777)    # anyone could have put blocks there
    c = cache(tmp_path)
    assert c.path is None and c.missing(range(0, 1)) == [0]
    c.close()


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: the block cache's disk fills."""
    with tmpfs(tmp_path / "small", "1m", "0700") as where:
        yield where


def test_a_full_disk_makes_room_from_the_cache_itself(small_disk):
    c = BlockCache(str(small_disk), URL, "v1", 1000 * BLOCK, BLOCK, 1 << 30)
    for n in range(400):     # 1.6 MiB through a 1 MiB disk: the oldest blocks make room
        stored(c, [n])
        assert c.ready(n)
    assert os.pread(c.fd, BLOCK, 399 * BLOCK) == block_bytes(399)
    assert 0 < c.held() <= 1 << 20
    c.close()
