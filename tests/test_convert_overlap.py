"""The conversion's overlapped I/O: writes behind in a thread (``output.WriteBehind``), and the .npz CRC-32 read-ahead."""
import os

import numpy as np
import pytest

import checkpoint_fixtures as F
from porting.output import WriteBehind
from timm_vit_variants.checkpoints.npz_store import NpzStore


def test_writes_behind_land_at_their_offsets_and_call_back(tmp_path):
    path = tmp_path / 'out.bin'
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    chunks = [bytes([i]) * (1 << 16) for i in range(5)]
    written = []
    writes = WriteBehind(depth=2)
    try:
        for i in (3, 0, 4, 1, 2):  # any order: each at its own offset
            writes.write(fd, memoryview(chunks[i]), i << 16, then=lambda i=i: written.append(i))
        writes.flush()
    finally:
        os.close(fd)
    assert path.read_bytes() == b''.join(chunks)
    assert written == [3, 0, 4, 1, 2]  # each callback after its own write, in order


def test_a_failed_write_is_raised_in_the_caller_and_later_ones_dropped(tmp_path):
    fd = os.open(tmp_path / 'ro.bin', os.O_RDONLY | os.O_CREAT, 0o644)  # pwrite on it fails: EBADF
    called = []
    writes = WriteBehind(depth=1)
    try:
        first = writes.write(fd, memoryview(b'x' * 10), 0, then=lambda: called.append('first'))
        with pytest.raises(OSError):
            writes.wait(first)
        with pytest.raises(OSError):  # the same failure, again, until the caller gives up
            writes.write(fd, memoryview(b'y'), 0)
        with pytest.raises(OSError):
            writes.flush()
        writes.abort()  # nothing in flight, nothing raised
    finally:
        os.close(fd)
    assert called == [] and os.path.getsize(tmp_path / 'ro.bin') == 0


def test_npz_read_ahead_checks_every_member_once_with_the_values_unchanged(tmp_path):
    arrays = F.bigvision_arrays('learn', 'tok')
    src = F.write_npz(tmp_path, 'bv.npz', arrays)
    store = NpzStore(str(src))
    try:
        order = sorted(store.names())
        store.read_ahead(order)
        for name in order:
            assert np.array_equal(store.tensor(name).numpy(), arrays[name])
        assert set(store._crc) == set(order) and all(f.done() and f.exception() is None for f in store._crc.values())
    finally:
        store.close()
