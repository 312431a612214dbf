"""Where a training process sits (device, rank, world size), and DistributedDataParallel as DDP accepts it on CPU.

timm's ``train.py`` passes ``device_ids=[device]``, which DDP refuses for a CPU module; ``wrap_ddp`` passes
``None`` there (gloo) and ``[index]`` on a GPU (nccl).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
from timm.utils.distributed import init_distributed_device_so

__all__ = ['DistEnv', 'setup_distributed', 'wrap_ddp']


@dataclass
class DistEnv:
    """Where this process sits: its device, rank and world size."""
    device: torch.device
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    distributed: bool = False

    @property
    def is_primary(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str) -> DistEnv:
    """Join the torchrun process group if one is set up in the environment (gloo on CPU, nccl on CUDA)."""
    info = init_distributed_device_so(device=device)
    return DistEnv(
        device=torch.device(info['device']), rank=info['global_rank'], local_rank=info['local_rank'],
        world_size=info['world_size'], distributed=info['distributed'])


def wrap_ddp(model: nn.Module, env: DistEnv) -> nn.Module:
    """DistributedDataParallel with the device_ids DDP accepts: None for CPU modules, [index] for GPUs."""
    if not env.distributed:
        return model
    device_ids = [env.device.index] if env.device.type == 'cuda' else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
