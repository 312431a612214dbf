"""What the machine can hold: an input whose cost would exceed it is refused before anything is allocated.

These are not limits on what a user may run (those are ``limits``, on what a file claims): they bound an
input's real cost by the memory there is, so the model runs whatever fits and refuses, with the input
named, what could only end in an out-of-memory kill.
"""
import os
from typing import Optional

import torch

from .errors import ViTVariantsError

try:
    import resource
except ImportError:  # not on Windows
    resource = None

__all__ = ['available_bytes', 'check_fits', 'gib']


def _meminfo_available() -> Optional[int]:
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> Optional[int]:
    try:
        with open('/sys/fs/cgroup/memory.max') as f:
            cap = f.read().strip()
        if cap == 'max':
            return None
        with open('/sys/fs/cgroup/memory.current') as f:
            return int(cap) - int(f.read().strip())
    except (OSError, ValueError):
        return None


def _address_space_room() -> Optional[int]:
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open('/proc/self/statm') as f:
            used = int(f.read().split()[0]) * os.sysconf('SC_PAGE_SIZE')
    except (OSError, ValueError, IndexError):
        return None
    return soft - used


def available_bytes(device: Optional[torch.device] = None) -> int:
    """Bytes that can still be allocated on ``device``: free accelerator memory, or for the CPU the least of
    the available RAM, the cgroup's room and the address-space limit."""
    device = torch.device('cpu') if device is None else torch.device(device)
    if device.type == 'cuda':
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type != 'cpu':
        return 1 << 62  # no way to ask: the allocator's own error stands
    rooms = [r for r in (_meminfo_available(), _cgroup_room(), _address_space_room()) if r is not None]
    if not rooms:
        rooms = [os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')]
    return max(0, min(rooms))


def check_fits(nbytes: int, what: str, device: Optional[torch.device] = None, key: Optional[str] = None) -> None:
    """Refuse, naming the input, when ``what`` would need ``nbytes`` and the device has less available."""
    room = available_bytes(device)
    if nbytes > room:
        raise ViTVariantsError(f'{what} needs {gib(nbytes)} and {gib(room)} is available; refusing before '
                               'allocating it', key=key)


def gib(nbytes: int) -> str:
    """A byte count in GiB, as the refusals word it."""
    return f'{nbytes / (1 << 30):.3g} GiB'
