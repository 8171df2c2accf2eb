"""The service's memory trimmer (dr_core/service/memory.py): glibc's malloc_trim called on a timer, what it gave back
counted; nothing where the C library has no malloc_trim."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dr_core.service import memory
from dr_core.service.memory import Trimmer, find_malloc_trim, resident_bytes

GLIBC = find_malloc_trim() is not None


def test_a_trim_is_counted_with_the_resident_set_before_and_after():
    calls = []
    t = Trimmer(60, trim=lambda: calls.append(1) or 1)
    first, second = t.trim_now(), t.trim_now()
    assert len(calls) == 2 and t.trims == 2
    for done in (first, second):
        assert done["rss_before"] > 0 and done["rss_after"] > 0 and done["seconds"] >= 0
        assert done["released"] == max(0, done["rss_before"] - done["rss_after"])
    assert t.released_bytes == first["released"] + second["released"] and t.last == second


def test_the_thread_trims_every_interval_until_closed():
    calls = []
    t = Trimmer(0.01, trim=lambda: calls.append(1) or 1).start()
    deadline = time.monotonic() + 10
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    t.close()
    assert len(calls) >= 3
    stopped = len(calls)
    time.sleep(0.05)
    assert len(calls) == stopped  # closed: no more trims


def test_without_malloc_trim_it_says_so_once_and_does_nothing(monkeypatch):
    monkeypatch.setattr(memory, "find_malloc_trim", lambda: None)
    said = []
    t = Trimmer(0.01, said.append).start()
    assert not t.available and t.trim_now() == {} and t.trims == 0
    assert len(said) == 1 and "no malloc_trim" in said[0]
    t.close()


def test_an_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        Trimmer(0)


def test_resident_bytes_follows_this_process():
    before = resident_bytes()
    block = b"\x01" * (64 << 20)  # written: resident
    assert before > 10 * 2**20 and resident_bytes() > before + 48 * 2**20
    del block


FRAGMENTED = """
import sys
from dr_core.service.memory import Trimmer, resident_bytes
chunks = [bytearray(4000) for _ in range(100_000)]  # about 400 MB of heap chunks, under the mmap threshold
pin = bytearray(4000)  # allocated last: the heap's top stays in use, so free() alone cannot shrink it
del chunks
before = resident_bytes()
done = Trimmer(60).trim_now()
print(before, done["rss_after"], done["released"])
"""


@pytest.mark.skipif(not GLIBC, reason="this C library has no malloc_trim")
def test_glibc_gives_freed_heap_memory_back_only_when_trimmed():
    out = subprocess.run([sys.executable, "-c", FRAGMENTED], capture_output=True, text=True, check=True).stdout
    before, after, released = (int(x) for x in out.split())
    assert before > 300 * 2**20  # free() kept the freed chunks resident
    assert released > 300 * 2**20 and after < before - 300 * 2**20
