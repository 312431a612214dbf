"""Handing memory back to the OS: the pages of memory-mapped weights, and freed heap.

A conversion or a verification reads weights through private file mappings (safetensors, stored
``.npz`` members, zip ``.pth``); once a tensor has been used its pages can go, and the next touch
re-reads them from the file (or the page cache). Every such release in the project goes through
``release_pages``; ``trim_heap`` returns freed heap after a large object is dropped.
"""
import contextlib
import ctypes
import gc
import itertools
import mmap
import os
import tempfile
import threading
from typing import Any, Iterable, Iterator, Tuple

import torch

__all__ = ['PAGE', 'release_pages', 'mapping_address', 'release_tensor', 'file_mapped_ranges', 'release_after_use',
           'scratch', 'releasing', 'trim_heap']

PAGE = mmap.PAGESIZE


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def release_pages(start: int, end: int) -> None:
    """``madvise(MADV_DONTNEED)`` on the whole pages inside the address range [start, end).

    Only for clean pages of a private file mapping that nothing writes, or any page of a shared file
    mapping (``scratch``): there the data is re-read from the file on the next touch; on heap memory
    it would be zeroed. Pages shared with a
    neighbouring range are kept (the range is rounded inward).
    """
    start = -(-start // PAGE) * PAGE
    end -= end % PAGE
    if end > start:
        try:
            _libc().madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), mmap.MADV_DONTNEED)
        except (OSError, AttributeError):
            pass


def mapping_address(mapping: mmap.mmap) -> int:
    """The address of a writable (e.g. ``ACCESS_COPY``) mapping, without keeping a buffer export on it."""
    view = ctypes.c_char.from_buffer(mapping)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def release_tensor(tensor: torch.Tensor) -> None:
    """``release_pages`` over the bytes of a tensor that views a private file mapping."""
    start = tensor.untyped_storage().data_ptr() + tensor.storage_offset() * tensor.element_size()
    release_pages(start, start + tensor.numel() * tensor.element_size())


def file_mapped_ranges() -> Tuple[Tuple[int, int], ...]:
    """Address ranges of this process's non-executable mappings of regular files (weights, not code): private
    ones never written, and shared ones (``scratch``), whose written pages stay in the file when released."""
    ranges = []
    try:
        with open('/proc/self/maps', 'rb') as maps:  # bytes: a mapped file's name need not be UTF-8
            for line in maps:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[1][2:3] == b'-' and parts[1][3:4] in (b'p', b's') \
                        and parts[5].startswith(b'/') and b'.so' not in parts[5]:
                    start, end = parts[0].split(b'-')
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:
        return ()
    return tuple(ranges)


def release_after_use(modules: Iterable[torch.nn.Module]) -> None:
    """After each module's forward pass, hand back the pages of its memory-mapped weights.

    A forward pass touches every page of a network's weights once; with this, a network that views
    its weight files (our folders, safetensors, zip pickles) holds about one block resident, not all
    of them. Only tensors inside private, non-executable file mappings are released; heap weights
    are left alone.
    """
    mapped = file_mapped_ranges()

    def release(module: torch.nn.Module, *_: Any) -> None:
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            begin = tensor.data_ptr()
            end = begin + tensor.numel() * tensor.element_size()
            if any(lo <= begin and end <= hi for lo, hi in mapped):
                release_tensor(tensor)

    for module in modules:
        module.register_forward_hook(release)


def scratch(nbytes: int) -> torch.Tensor:
    """``nbytes`` of uint8 backed by a shared mapping of an unlinked temporary file, not by the heap.

    What is written there lives in the page cache (and the file), so ``release_tensor`` may hand its
    pages back at any time, even while it is being written, and nothing is lost; the file goes with
    the last view. For weights that must be materialised (a reference loaded by its own loader) in
    memory bounded by what is touched at once.
    """
    fd, path = tempfile.mkstemp(prefix='vit-port-scratch-')
    try:
        os.ftruncate(fd, max(nbytes, 1))
        return torch.from_file(path, shared=True, size=max(nbytes, 1), dtype=torch.uint8)
    finally:
        os.close(fd)
        os.unlink(path)


@contextlib.contextmanager
def releasing(tensor: torch.Tensor, every: float = 0.02) -> Iterator[None]:
    """While the block runs, hand back the pages of ``tensor`` (a ``scratch``) every ``every`` seconds."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            release_tensor(tensor)

    thread = threading.Thread(target=loop, name='vit-port-release', daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        release_tensor(tensor)


def trim_heap() -> None:
    """Collect garbage and return freed heap to the OS (glibc keeps freed blocks below its mmap threshold)."""
    gc.collect()
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):
        pass
