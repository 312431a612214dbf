"""Where output may go, and how it gets there.

The rules, in the order they are checked:
  * OUT is compared with every source after resolving links and ``..`` (``os.path.realpath``):
    OUT may not be a source, contain one, or lie inside a source folder, even with ``--overwrite``.
  * An existing OUT is replaced only with ``--overwrite``, and then only when it is an empty folder,
    a folder holding nothing but what vit-port writes (with a ``simple_vit`` ``config.json``), or a
    symlink, which is replaced as a link and never followed into its target.
  * Output is built in a hidden sibling ``.OUT.vit-port-partial-XXXX`` and renamed into place; an old
    OUT is moved aside to ``.OUT.vit-port-old-XXXX`` and deleted only once the new one is in place.
    Both hold an ``flock`` while in use, so a later run on the same OUT removes those a killed run
    left behind and never touches those of a run still going. It removes only what vit-port makes (a
    folder of vit-port's file names, or a partial export file of ours); anything else so named is
    reported and left alone, and nothing that is not a regular file or folder is opened.
  * Signals are held only over the renames of our own entries, never while waiting for a lock; a
    lock another process holds is waited for a bounded time, then reported. Once vit-port received a
    stop signal, even one something swallowed, OUT is not put in place (``porting.stopping``).
  * A full disk or any other write failure ends in one ``ViTVariantsError``, with nothing left behind.

``WriteBehind`` is how large files are written: ``pwrite``s run in a thread of their own, so the copy
into the page cache overlaps the caller's reads, checks and CRC-32s of the next tensor.
"""
import errno
import fcntl
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from collections import deque
from typing import Any, Callable, Deque, Iterator, List, Optional, Sequence, Tuple, Union

from timm_vit_variants.checkpoints.files import CONFIG_FILE, INDEX_FILES, SINGLE_WEIGHT_FILES, read_json
from timm_vit_variants.config import is_family_architecture
from timm_vit_variants.errors import ViTVariantsError

from .stopping import check as check_stop, completed, held

__all__ = ['PARTIAL', 'OLD', 'check_output', 'atomic_folder', 'atomic_file', 'pwrite_all', 'WriteBehind']

PARTIAL = 'vit-port-partial'
OLD = 'vit-port-old'
# Every name vit-port writes into an output folder.
_OUR_NAMES = re.compile('|'.join(map(re.escape, ('README.md', CONFIG_FILE, SINGLE_WEIGHT_FILES[0], INDEX_FILES[0])))
                        + r'|model-\d{5}-of-\d{5}\.safetensors')
# How long to wait for a lock another run holds on OUT's folder (the renames it guards take milliseconds).
_LOCK_PATIENCE = 30.0
# The first bytes of what export writes into a partial file: an ONNX model (protobuf field 1, ir_version) or
# a torch.export archive (zip).
_PARTIAL_MAGIC = (b'\x08', b'PK\x03\x04')

PathLike = Union[str, os.PathLike]


def _entry(path: PathLike) -> Path:
    """The directory entry ``path`` names: its parent resolved, its own last component kept (a link stays a link)."""
    absolute = os.path.abspath(os.path.expanduser(os.fspath(path)))
    return Path(os.path.realpath(os.path.dirname(absolute))) / os.path.basename(absolute)


def _refuse_source_clash(out: Path, source: PathLike) -> None:
    src_entry = _entry(source)
    src_real = Path(os.path.realpath(src_entry))
    for src in {src_entry, src_real}:
        if out == src or out in src.parents:
            raise ViTVariantsError(f'the output would replace or contain the source {str(source)!r}; choose an OUT '
                                   'outside it (--overwrite never allows this)', path=str(out))
    if src_real.is_dir() and src_real in out.parents:
        raise ViTVariantsError(f'the output lies inside the source folder {str(source)!r}; choose an OUT outside '
                               'it', path=str(out))


def _foreign_contents(folder: Path) -> List[str]:
    """What in ``folder`` vit-port did not write (empty when it may be replaced)."""
    names = sorted(os.listdir(folder))
    if not names:
        return []
    foreign = [n + ('/' if (folder / n).is_dir() else '') for n in names
               if not _OUR_NAMES.fullmatch(n) or not stat.S_ISREG(os.lstat(folder / n).st_mode)]
    if foreign:
        return foreign
    try:
        architecture = read_json(str(folder / CONFIG_FILE)).get('architecture')
    except ViTVariantsError:
        architecture = None
    if not is_family_architecture(architecture):
        return ['config.json (not a simple_vit model config)']
    return []


def _check_replaceable(out: Path) -> None:
    foreign = _foreign_contents(out)
    if foreign:
        shown = ', '.join(foreign[:5]) + (f' and {len(foreign) - 5} more' if len(foreign) > 5 else '')
        raise ViTVariantsError(
            f'--overwrite only replaces an empty folder or one written by vit-port, and this one holds {shown}; '
            'nothing was changed (move those away or choose another OUT)', path=str(out))


def check_output(out: PathLike, overwrite: bool, sources: Sequence[PathLike] = (), folder: bool = True) -> Path:
    """Validate OUT before any work; returns the location that will be written (parent links resolved)."""
    entry = _entry(out)
    for source in sources:
        _refuse_source_clash(entry, source)
    if os.path.lexists(entry):
        if not overwrite:
            raise ViTVariantsError('output already exists; pass --overwrite to replace it', path=str(entry))
        if entry.is_symlink():
            pass  # replaced as a link; its target is never touched
        elif folder and entry.is_dir():
            _check_replaceable(entry)
        elif folder or not entry.is_file():
            raise ViTVariantsError(f'output exists and is not a {"folder" if folder else "file"}; refusing to '
                                   'replace it', path=str(entry))
    parent = entry.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ViTVariantsError(f'cannot create the output: {parent} is not a directory', path=str(entry))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ViTVariantsError(f'output location is not writable ({parent})', path=str(entry))
    return entry


def _mount_point(path: Path) -> Path:
    path = Path(os.path.realpath(path))
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _write_error(e: OSError, out: Path) -> ViTVariantsError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return ViTVariantsError(f'no space left on the device holding {_mount_point(out.parent)} while writing; '
                                'nothing was written (free some space and run again)', path=str(out))
    return ViTVariantsError(f'cannot write the output: {e.strerror or e}; nothing was written', path=str(out))


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


# What tempfile.mkdtemp/mkstemp and secrets.token_hex(4) append: exactly 8 characters.
_SUFFIX = r'[a-z0-9_]{8}'


def _remove_stale(out: Path) -> List[str]:
    """Delete the partial and old siblings of OUT that a killed run left; returns what was left alone, and why.

    Only what vit-port makes is removed: a folder holding nothing but the names vit-port writes, or a
    partial export file of ours (ours by owner, mode and first bytes). Anything else that matches the
    name, or that another run still holds locked, is left as it is. Nothing that is not a regular file
    or a folder is ever opened, and nothing here waits.
    """
    pattern = re.compile(re.escape(f'.{out.name}.') + f'(?:{PARTIAL}|{OLD})-{_SUFFIX}')
    kept: List[str] = []
    try:
        names = os.listdir(out.parent)
    except OSError:
        return kept
    for name in names:
        if not pattern.fullmatch(name):
            continue
        path = out.parent / name
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            kept.append(f'{path} (not a regular file or folder)')
            continue
        try:  # O_NONBLOCK: a FIFO swapped in after the lstat cannot make the open wait
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if stat.S_ISDIR(mode) else 0))
        except OSError:
            continue
        try:
            if not _try_lock(fd):
                continue  # a run still going
            why = _not_ours(path, fd)
            if why:
                kept.append(f'{path} ({why})')
            elif stat.S_ISDIR(os.fstat(fd).st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        finally:
            os.close(fd)
    return kept


def _not_ours(path: Path, fd: int) -> str:
    """Why ``path`` (open as ``fd``) is not a leftover of vit-port's ('' when it is)."""
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        return 'owned by another user'
    if stat.S_ISDIR(info.st_mode):
        names = os.listdir(fd)
        foreign = [n for n in names if not _OUR_NAMES.fullmatch(n) or not stat.S_ISREG(
            os.stat(n, dir_fd=fd, follow_symlinks=False).st_mode)]
        return f'it holds {", ".join(sorted(foreign)[:3])}, which vit-port does not write' if foreign else ''
    if stat.S_IMODE(info.st_mode) != 0o600:  # mkstemp's mode, kept until the file is renamed into place
        return 'not a partial file of ours (its mode)'
    head = os.pread(fd, 4, 0)
    if head and not head.startswith(_PARTIAL_MAGIC):
        return 'not a partial file of ours (its first bytes)'
    return ''


@contextmanager
def _locked(path: Path, patience: Optional[float] = None) -> Iterator[int]:
    """An exclusive ``flock`` on a folder, waited for at most ``patience`` seconds (Ctrl-C stops the wait)."""
    patience = _LOCK_PATIENCE if patience is None else patience
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        deadline = time.monotonic() + patience
        while not _try_lock(fd):
            if time.monotonic() > deadline:
                raise ViTVariantsError(f'{path} has been locked by another process for {patience:g} s (another '
                                       'vit-port run writing there?); nothing was changed, run again later',
                                       path=str(path))
            time.sleep(0.05)
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _putting_in_place(out: Path) -> Iterator[None]:
    """The renames that put OUT in place: refused once a stop signal came (even one something swallowed); one that
    comes during them is left for the CLI to report, OUT then being complete."""
    with held(raise_after=False):
        check_stop()
        yield
        completed(str(out))


def _commit(tmp: Path, out: Path, overwrite: bool) -> None:
    with _locked(out.parent):
        if not os.path.lexists(out):
            with _putting_in_place(out):
                os.rename(tmp, out)
            return
        if not overwrite:
            raise ViTVariantsError('output appeared while converting; pass --overwrite to replace it', path=str(out))
        old = out.parent / f'.{out.name}.{OLD}-{secrets.token_hex(4)}'
        if out.is_symlink() or not out.is_dir():
            with _putting_in_place(out):
                _swap(tmp, out, old)
                os.unlink(old)
            return
        _check_replaceable(out)  # again: it may have changed while we converted
        with _locked(out):  # held until deleted, so no concurrent cleanup mistakes it for a leftover
            with _putting_in_place(out):
                _swap(tmp, out, old)
            shutil.rmtree(old, ignore_errors=True)


def _swap(tmp: Path, out: Path, old: Path) -> None:
    """Move OUT aside to ``old`` and ``tmp`` into its place; put OUT back if the second rename fails."""
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError:
        os.rename(old, out)
        raise


def _make_parents(out: Path) -> List[Path]:
    created: List[Path] = []
    parent = out.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    for folder in reversed(created):
        folder.mkdir()
    return created


def _remove_created(created: List[Path]) -> None:
    for folder in created:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            break


@contextmanager
def _atomic(out: PathLike, overwrite: bool, sources: Sequence[PathLike], folder: bool) -> Iterator[Path]:
    out = check_output(out, overwrite, sources, folder=folder)
    created: List[Path] = []
    tmp: Optional[Path] = None
    lock = -1
    try:
        # Ctrl-C/SIGTERM are held while our own entries are made, then land inside this try.
        with held():
            created = _make_parents(out)
        with _locked(out.parent):  # a concurrent run's cleanup never sees our partial before it is locked
            kept = _remove_stale(out)
            with held():
                if folder:
                    tmp = Path(tempfile.mkdtemp(prefix=f'.{out.name}.{PARTIAL}-', dir=out.parent))
                    lock = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
                else:
                    lock, name = tempfile.mkstemp(prefix=f'.{out.name}.{PARTIAL}-', dir=out.parent)
                    tmp = Path(name)
                fcntl.flock(lock, fcntl.LOCK_EX)  # our own new entry: nobody else holds it
        if kept:
            warnings.warn('left alone, though named like a leftover of vit-port: ' + '; '.join(kept), stacklevel=3)
        yield tmp
        os.chmod(tmp, 0o755 if folder else 0o644)  # mkdtemp/mkstemp make it private
        _commit(tmp, out, overwrite)
    except BaseException as e:
        with held(raise_after=False):  # a second Ctrl-C does not cut the cleanup short
            if tmp is not None and folder:
                shutil.rmtree(tmp, ignore_errors=True)
            elif tmp is not None and os.path.lexists(tmp):
                os.unlink(tmp)
            _remove_created(created)
        if isinstance(e, OSError):
            raise _write_error(e, out) from None
        raise
    finally:
        if lock >= 0:
            os.close(lock)


def atomic_folder(out: PathLike, overwrite: bool = False, sources: Sequence[PathLike] = ()):
    """Context manager: an empty locked temporary folder beside OUT; on success it becomes OUT, on error it vanishes."""
    return _atomic(out, overwrite, sources, folder=True)


def atomic_file(out: PathLike, overwrite: bool = False, sources: Sequence[PathLike] = ()):
    """Context manager: a temporary file path beside OUT; on success it replaces OUT, on error it vanishes."""
    return _atomic(out, overwrite, sources, folder=False)


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """All of ``data`` written at ``offset`` (``pwrite`` may write less than asked)."""
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


class WriteBehind:
    """``pwrite``s done in order by one thread, while the caller prepares the next data.

    ``write`` queues a write (its ``data`` must stay unchanged until the write is done: ``wait`` for its
    ticket before reusing a buffer); at most ``depth`` writes are queued, so at most that many buffers
    are held. The first failure is raised in the caller, by the next ``write``, ``wait`` or ``flush``;
    later writes are dropped. ``flush`` returns once every queued write is on its way to the disk
    (in the page cache), and ends the thread.
    """

    def __init__(self, depth: int = 2) -> None:
        self._depth = depth
        self._queue: Deque[Tuple[int, int, memoryview, int, Any, Optional[Callable[[], None]]]] = deque()
        self._cond = threading.Condition()
        self._issued = self._done = 0
        self._error: Optional[BaseException] = None
        self._closing = False
        self._thread: Optional[threading.Thread] = None

    def write(self, fd: int, data: memoryview, offset: int, keep: Any = None,
              then: Optional[Callable[[], None]] = None) -> int:
        """Queue ``data`` to be written at ``offset`` of ``fd`` (``keep``: an object held until then, e.g. the
        tensor ``data`` views; ``then``: called in the writing thread once it is written, e.g. to hand back the
        pages it was read from); returns the write's ticket."""
        with self._cond:
            self._raise()
            while self._issued - self._done >= self._depth and self._error is None:
                self._cond.wait()
            self._raise()
            self._issued += 1
            self._queue.append((self._issued, fd, data, offset, keep, then))
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name='vit-port-write', daemon=True)
                self._thread.start()
            return self._issued

    def wait(self, ticket: int) -> None:
        """Until write ``ticket`` (and every one before it) is done."""
        with self._cond:
            while self._done < ticket and self._error is None:
                self._cond.wait()
            self._raise()

    def flush(self) -> None:
        """Until every queued write is done (raising the first failure); the thread ends."""
        self._stop(raise_error=True)

    def abort(self) -> None:
        """Drop what is queued, wait for the write in progress, and end the thread (nothing is raised)."""
        with self._cond:
            self._queue.clear()
            self._done = self._issued
        self._stop(raise_error=False)

    def _stop(self, raise_error: bool) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._cond:
            self._closing = False
            if raise_error:
                self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                ticket, fd, data, offset, _keep, then = self._queue[0]
            try:
                if self._error is None:
                    pwrite_all(fd, data, offset)
                    if then is not None:
                        then()
            except BaseException as e:  # handed to the caller, who decides
                self._error = e
            with self._cond:
                if self._queue and self._queue[0][0] == ticket:
                    self._queue.popleft()
                self._done = max(self._done, ticket)
                self._cond.notify_all()
            del data, _keep, then
