"""An ``.npz`` archive with members appended in memory, for a reference library that needs one more array."""
import io
import zipfile
from typing import Optional

__all__ = ['ExtendedArchive']


class ExtendedArchive(io.RawIOBase):
    """A zip archive with members appended in memory: reads come from the original file, which is never
    written or copied, and only the tail (central directory onwards) lives in RAM."""

    def __init__(self, path: str) -> None:
        super().__init__()
        with zipfile.ZipFile(path) as archive:
            self._split = archive.start_dir
        self._file = open(path, 'rb')
        self._file.seek(self._split)
        self._tail = bytearray(self._file.read())
        self._pos = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._split + len(self._tail)}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast('B')
        if self._pos < self._split:
            self._file.seek(self._pos)
            n = self._file.readinto(view[:self._split - self._pos])
        else:
            chunk = self._tail[self._pos - self._split:self._pos - self._split + len(view)]
            n = len(chunk)
            view[:n] = chunk
        self._pos += n
        return n

    def write(self, data) -> int:
        if self._pos < self._split:
            raise io.UnsupportedOperation('the original archive is read-only')
        start = self._pos - self._split
        data = bytes(data)
        self._tail[start:start + len(data)] = data
        self._pos += len(data)
        return len(data)

    def truncate(self, size: Optional[int] = None) -> int:
        size = self._pos if size is None else size
        del self._tail[max(size - self._split, 0):]
        return size

    def close(self) -> None:
        self._file.close()
        super().close()
