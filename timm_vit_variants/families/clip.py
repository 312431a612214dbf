"""CLIP image towers (OpenAI, OpenCLIP, MetaCLIP, DFN, CLIPA, DataComp): rows and tags from ``clip_models``, and the
routes of their formats: OpenAI's TorchScript archives and state dicts, open_clip's state dicts and towers on a timm
trunk, transformers' ``clip`` folders. The readers stay in ``checkpoints.openclip``, ``openclip_timm`` and
``hf_clip``.
"""
import os
from ..checkpoints.hf_clip import CLIP_MODEL_TYPES, HFClipCheckpoint
from ..checkpoints.openclip import OpenAICLIPCheckpoint, OpenCLIPCheckpoint, is_openai_clip
from ..checkpoints.openclip_config import open_clip_config_path
from ..checkpoints.openclip_timm import TRUNK, OpenCLIPTimmCheckpoint
from ..checkpoints.routes import Probe, Refuse, Route
from ..checkpoints.torchscript_store import TorchScriptStore
from ..clip_models import CLIP_ROWS, clip_default_cfgs, clip_tag_args
from ..errors import ViTVariantsError
from ..model_table import ModelEntry
from .registry import Family

__all__ = ['FAMILY']

_NO_CLIP_ARCHIVE = Refuse(lambda p: ViTVariantsError(
    'a TorchScript archive without a CLIP image tower (no visual.conv1.weight among its '
    f'{len(p.names)} tensors)', path=p.path, key='visual.conv1.weight'))


def _open_clip_trunk(probe: Probe) -> bool:
    """Whether a source is an open_clip tower on a timm trunk, to be read with open_clip's head."""
    if probe.prefix not in ('', TRUNK) or not any(n.startswith(TRUNK) for n in probe.names):
        return False
    return not probe.prefix or os.path.isfile(open_clip_config_path(probe.path))


def _torchscript(p: Probe) -> bool:
    return isinstance(p.store, TorchScriptStore)


def _clip_file(url: str) -> bool:
    """An OpenAI CLIP ``.pt`` (also MetaCLIP's) or an open_clip Hub file (``open_clip_*``), by its name."""
    return url.endswith('.pt') or os.path.basename(url).startswith('open_clip_')


FAMILY = Family(
    'clip',
    rows={name: ModelEntry(*row) for name, row in CLIP_ROWS.items()},
    cfgs=clip_default_cfgs(),
    routes=(
        # OpenAI's TorchScript archives, before any other store's rows
        Route(500., lambda p: _torchscript(p) and 'visual.conv1.weight' in p.names, OpenAICLIPCheckpoint),
        Route(600., _torchscript, _NO_CLIP_ARCHIVE),
        Route(1600., lambda p: p.model_type in CLIP_MODEL_TYPES, HFClipCheckpoint),
        # open_clip towers on a timm trunk (visual.trunk.*): with their open_clip_config.json, else unless the trunk
        # alone is asked for (--prefix visual.trunk.: read as a timm state dict)
        Route(2100., _open_clip_trunk, OpenCLIPTimmCheckpoint),
        # open_clip's layout: OpenAI's state dict (its scalars), else OpenCLIP's
        Route(2900., lambda p: 'visual.conv1.weight' in p.names and is_openai_clip(p.names), OpenAICLIPCheckpoint),
        Route(3000., lambda p: 'visual.conv1.weight' in p.names, OpenCLIPCheckpoint),
    ),
    tag_args=clip_tag_args,
    reads_url=_clip_file,
)
