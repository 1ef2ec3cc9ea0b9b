"""Weights and KV caches in 2 MiB pages (runtime/weight_memory.py): the arena's buffers are aligned, apart, advised
MADV_HUGEPAGE where the system takes the advice (checked in /proc/self/smaps: THPeligible), outlive the arena, and
small ones stay in ordinary memory; a KV cache's buffers read as zeros, their whole huge pages advised and their tail
not; the native-q8 and int8 engines keep the weights their kernels stream in those mappings and compute exactly what
the same engine computes in ordinary 4 KiB pages, with caches in either."""

import gc
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from eagle_trt.runtime import weight_memory
from eagle_trt.runtime.weight_memory import (
    ALIGN_BYTES,
    ARENA_MIN_BYTES,
    HUGE_PAGE_BYTES,
    WeightArena,
)


def _mapping_of(address: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping that holds `address`."""
    fields, inside = {}, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            if inside:
                break
            inside = lo <= address < hi
            fields = {"range": head}
        elif inside:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    assert inside, f"no mapping holds {address:#x}"
    return fields


def _advised(address: int) -> bool:
    return _mapping_of(address).get("THPeligible") == "1"


def test_large_buffers_are_aligned_apart_and_advised():
    arena = WeightArena()
    sizes = [ARENA_MIN_BYTES, 3 * HUGE_PAGE_BYTES + 5, 1 << 20, ARENA_MIN_BYTES + 1]
    buffers = [arena.empty(n) for n in sizes]
    spans = sorted((b.ctypes.data, b.ctypes.data + b.nbytes) for b in buffers)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))  # no two overlap
    for b, n in zip(buffers, sizes):
        assert b.nbytes == n and b.dtype == np.uint8 and b.ctypes.data % ALIGN_BYTES == 0
        b[:] = 7  # touch every page
        assert _advised(b.ctypes.data) == arena.advise
    assert buffers[0].ctypes.data % HUGE_PAGE_BYTES == 0  # the first buffer of a mapping starts a huge page
    assert arena.advise == weight_memory.huge_pages_advised()


def test_this_machine_takes_the_advice():
    """Linux with transparent huge pages on `madvise` (this project's machines): the arena is not a no-op here."""
    enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    assert enabled.exists() and "[never]" not in enabled.read_text()
    assert weight_memory.huge_pages_advised()


def test_small_buffers_stay_in_ordinary_memory_and_copies_keep_values():
    arena = WeightArena()
    small = arena.empty(ARENA_MIN_BYTES - 1)
    assert small.base is None  # its own allocation (np.empty), not a slice of a mapping
    source = np.random.default_rng(0).standard_normal((300, 129)).astype(np.float32)  # [300, 129] 155 KB
    copy = arena.copy(source)
    assert copy.dtype == source.dtype and copy.shape == source.shape and copy.flags.c_contiguous
    assert np.array_equal(copy, source) and not np.shares_memory(copy, source)


def test_buffers_outlive_the_arena():
    arena = WeightArena()
    buffer = arena.copy(np.arange(1 << 16, dtype=np.int32))  # [65536] 256 KB
    del arena
    gc.collect()
    assert int(buffer[12345]) == 12345 and _advised(buffer.ctypes.data) == weight_memory.huge_pages_advised()


def test_kv_caches_read_as_zeros_and_only_their_whole_huge_pages_are_advised():
    from eagle_trt.runtime.model import KVCache

    cache = KVCache(30, 3, 2100, 64, torch.float16, "cpu")  # [30, 3, 2100, 64] float16: 23.1 MiB a buffer
    nbytes = cache.k.numel() * 2
    whole = nbytes // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    for buf in (cache.k, cache.v):
        assert buf.shape == (30, 3, 2100, 64) and buf.is_contiguous() and not buf.any()
        assert buf.data_ptr() % HUGE_PAGE_BYTES == 0
        buf.view(-1)[-1] = 1.5  # the tail's last slot: written and read back
        assert float(buf.view(-1)[-1]) == 1.5 and float(buf.sum()) == 1.5
        assert _advised(buf.data_ptr()) and _advised(buf.data_ptr() + whole - 1)
        assert not _advised(buf.data_ptr() + whole)  # the tail (< 2 MiB) in ordinary pages: no half-used huge page
    assert cache.k.data_ptr() != cache.v.data_ptr()
    small = KVCache(1, 3, 130, 64, torch.float16, "cpu")  # a draft's: 49 KB, ordinary memory
    assert not small.k.any() and small.k.shape == (1, 3, 130, 64)
    plain = KVCache(2, 1, 8, 4, torch.float64, "cpu", huge_pages=False)
    assert not plain.k.any() and plain.k.dtype == torch.float64


@pytest.fixture(scope="module")
def prompt():
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_prompt, mtbench_prompts
    from eagle_trt.demo_model import materialize_demo_gguf_base

    tok = AutoTokenizer.from_pretrained(materialize_demo_gguf_base())
    return encode_prompt(tok, mtbench_prompts()[1].text, True)[:40]


def _load(dtype: str, huge: bool, monkeypatch):
    from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base
    from eagle_trt.runtime import EagleDecoder

    base = materialize_demo_gguf_base() if dtype.startswith("native") else materialize_demo_base()
    with monkeypatch.context() as m:
        if not huge:
            m.setattr(weight_memory, "huge_pages_advised", lambda: False)
        return EagleDecoder.load(base, None, tree="chain:1", dtype=dtype)


def _streamed_addresses(decoder, dtype: str) -> list[int]:
    """The addresses of the weights the kernels stream: native's layer linears, int8's torch-side int8 weights."""
    if dtype.startswith("native"):
        layers = decoder.base.native.layers
        return [getattr(layer, f).data for layer in layers for f in ("q", "gate", "down")]
    from eagle_trt.runtime.linears import Int8Linear

    return [w.data_ptr() for m in decoder.base.modules() if isinstance(m, Int8Linear)
            for w in (m.qweight_t, m.native) if w is not None]


@pytest.mark.parametrize("dtype", ["native-q8", "int8"])
def test_engine_weights_lie_in_huge_pages_and_compute_the_same_bits(dtype, prompt, monkeypatch):
    from eagle_trt.kernels.cpu_build import cpu_supports_native
    from eagle_trt.runtime.model import BaseCall

    if dtype == "native-q8" and cpu_supports_native(q8=True):
        pytest.skip(cpu_supports_native(q8=True))
    huge, ordinary = _load(dtype, True, monkeypatch), _load(dtype, False, monkeypatch)
    addresses = _streamed_addresses(huge, dtype)
    assert addresses and all(_advised(a) for a in addresses)
    # (the ordinary engine's buffers may lie in advised memory too: numpy advises its allocations of 4 MiB and more,
    # and the heap hands such ranges out again once freed; which of them do is the placement luck the arena removes)
    outs = []
    for decoder, cache_len in ((huge, 64), (ordinary, 64), (huge, 4096)):  # 4096 slots: a cache in huge pages
        cache = decoder.base.new_cache(cache_len)
        with torch.inference_mode():
            outs.append(decoder.base.forward_packed([BaseCall(torch.tensor(prompt), torch.arange(len(prompt)), 0,
                                                              cache=cache)])[0])  # (logits [40, V], hidden [40, H])
    assert _advised(cache.k.data_ptr())
    assert all(torch.equal(outs[0][0], o[0]) and torch.equal(outs[0][1], o[1]) for o in outs[1:])
    assert huge.generate_all(prompt, 12).token_ids == ordinary.generate_all(prompt, 12).token_ids
