"""The sha256 a model card and ``config.json`` record for a source, computed beside a conversion."""
import hashlib
import mmap
from pathlib import Path
from typing import Union

from timm_vit_variants.memory import mapping_address, release_pages

__all__ = ['source_sha256']


def source_sha256(path: Union[str, Path]) -> str:
    """sha256 of a file; for a folder, of every file in it (relative name, then bytes, sorted by name).

    Read through a mapping in large chunks whose pages are handed back as it goes, so hashing beside
    a conversion shares the page cache with it and adds nothing to resident memory.
    """
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob('*') if p.is_file())
    chunk = 64 << 20
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode('utf-8', 'surrogateescape') + b'\0')
        size = file.stat().st_size
        if size == 0:
            continue
        with open(file, 'rb') as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:
            address = mapping_address(mapped)
            for start in range(0, size, chunk):
                end = min(start + chunk, size)
                digest.update(memoryview(mapped)[start:end])
                release_pages(address + start, address + end)
    return digest.hexdigest()
