"""Memory in 2 MiB pages: the buffers a CPU step streams through (weights, and KV caches), placed where Linux can
back them with transparent huge pages.

Why: a native-q8 decode step of SmolLM2 streams ~75 MB of weights. In 4 KiB pages that is ~19 thousand pages a step
(TLB misses, and the hardware prefetchers stop at every page boundary), and where those pages land changes from load
to load: two identical engines loaded one after the other in one process ran up to 20 % apart. (numpy advises huge
pages for its own allocations of 4 MiB and more, and the heap hands such ranges out again once freed, so some of a
layer's 0.3-1 MB buffers land in them by luck.) Linux backs an anonymous mapping advised MADV_HUGEPAGE with 2 MiB
pages wherever transparent huge pages are `always` or `madvise` (the usual default). Measured on SmolLM2 Q4_1
native-q8, plain decoding, against engines in ordinary memory in the same process (scripts/weight_pages.py): one
thread +14 % at batch 1 and +7 % at batch 8, two threads +7 % and +4 %; int8 +10 % at batch 1 (docs/native_cpu.md).
Where the advice does not exist or is refused (other systems, THP `never`), the arena hands out ordinary memory: the
same bytes, the same results, only the page size differs.
"""

from __future__ import annotations

import ctypes
import mmap
from functools import cache

import numpy as np

HUGE_PAGE_BYTES = 2 << 20
ARENA_MIN_BYTES = 1 << 16  # smaller buffers (norm vectors, biases) stay in ordinary memory
CHUNK_BYTES = 32 << 20  # one mapping holds many buffers; its untouched tail is never resident
ALIGN_BYTES = 64  # every buffer starts on a cache line (the kernels' vector loads)


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


@cache
def huge_pages_advised() -> bool:
    """Whether this system takes the MADV_HUGEPAGE advice at all (Linux with THP `always` or `madvise`); read once
    (every KV cache made asks)."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


class WeightArena:
    """Hands out 64-byte-aligned byte buffers from 2 MiB-aligned anonymous mappings advised MADV_HUGEPAGE. A buffer
    keeps its mapping alive (numpy's base chain), so the arena itself may go once its buffers are referenced."""

    def __init__(self):
        self.advise = huge_pages_advised()
        self._chunk: np.ndarray | None = None  # [bytes] the mapping now being filled
        self._offset = 0

    def empty(self, nbytes: int) -> np.ndarray:
        """`nbytes` uninitialised bytes [nbytes] uint8, in huge-page memory when large enough."""
        if nbytes < ARENA_MIN_BYTES or not self.advise:
            return np.empty(nbytes, np.uint8)
        if self._chunk is None or self._offset + nbytes > self._chunk.nbytes:
            self._chunk, self._offset = self._map(max(CHUNK_BYTES, _round_up(nbytes, HUGE_PAGE_BYTES))), 0
        out = self._chunk[self._offset:self._offset + nbytes]
        self._offset = _round_up(self._offset + nbytes, ALIGN_BYTES)
        return out

    def copy(self, array: np.ndarray) -> np.ndarray:
        """A C-contiguous copy of `array` (same dtype and shape) in the arena's memory."""
        out = self.empty(array.nbytes).view(array.dtype).reshape(array.shape)
        out[...] = array
        return out

    @staticmethod
    def _map(nbytes: int) -> np.ndarray:
        """[nbytes] uint8 on a 2 MiB boundary of a fresh mapping, all of it advised (chunks are whole huge pages)."""
        return _aligned_mapping(nbytes, nbytes)


def _aligned_mapping(nbytes: int, advised_bytes: int) -> np.ndarray:
    """[nbytes] uint8 zeros starting on a 2 MiB boundary of a fresh anonymous mapping, its first `advised_bytes`
    advised MADV_HUGEPAGE before any page is touched (so the first touch faults in a whole huge page). Unmapped when
    the last reference goes."""
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(mapping, np.uint8)
    start = (-whole.ctypes.data) % HUGE_PAGE_BYTES
    if advised_bytes:
        try:
            mapping.madvise(mmap.MADV_HUGEPAGE, start, advised_bytes)
        except OSError:  # refused (e.g. a kernel without THP): ordinary pages, same contents
            pass
    return whole[start:start + nbytes]


def zeroed_pages(nbytes: int) -> np.ndarray:
    """[nbytes] uint8 zeros in an anonymous mapping of its own (a fresh mapping reads as zeros and pages come in on
    first touch, so slots never written cost no memory), its whole 2 MiB pages advised MADV_HUGEPAGE and the tail in
    ordinary pages (no huge page half used). Unmapped when the last reference goes. For KV caches on the CPU
    (runtime.model.KVCache): a step reads every layer's keys and values of a request in order, and in 4 KiB pages the
    prefetchers stop at each page boundary (measured in docs/native_cpu.md, "KV caches in 2 MiB pages")."""
    if not hasattr(mmap, "MADV_HUGEPAGE") or nbytes < HUGE_PAGE_BYTES:
        return np.zeros(nbytes, np.uint8)
    return _aligned_mapping(nbytes, nbytes // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES if huge_pages_advised() else 0)


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim) after weights moved into the arena: the
    copies they left behind would otherwise stay resident. Elsewhere (no glibc): nothing."""
    process = ctypes.CDLL(None)  # the symbols already loaded (libc's among them): no library search at start-up
    if hasattr(process, "malloc_trim"):
        process.malloc_trim(0)
