"""The adapter's bounded caches (fuse/lru.py): least recently used goes first, by count or by
weight, and with a time to live an item is forgotten once it is older (an HSDS mount's refresh)."""

from __future__ import annotations

import time

from h5fs.fuse.lru import Lru


def test_the_least_recently_used_goes_first():
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1          # a is now the most recent
    lru.put("c", 3)
    assert (lru.get("a"), lru.get("b"), lru.get("c")) == (1, None, 3)


def test_weights_bound_the_total_and_a_heavy_item_is_not_kept():
    lru: Lru[str, list] = Lru(5, len)
    lru.put("a", [1, 2, 3])
    lru.put("b", [1, 2])
    lru.put("c", [1])                 # 6 > 5: a goes
    assert lru.get("a") is None and lru.weight == 3
    lru.put("d", list(range(9)))      # heavier than the bound alone
    assert lru.get("d") is None and lru.weight == 3


def test_items_live_their_ttl_and_no_longer():
    lru: Lru[str, int] = Lru(10, ttl=0.2)
    lru.put("a", 1)
    assert lru.get("a") == 1
    time.sleep(0.25)
    assert lru.get("a") is None and len(lru) == 0 and lru.weight == 0
    lru.put("a", 2)                   # put again: a new life
    assert lru.get("a") == 2
    forever: Lru[str, int] = Lru(10)
    forever.put("a", 1)
    time.sleep(0.05)
    assert forever.get("a") == 1
