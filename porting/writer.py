"""Hub-style output folders, written atomically.

A folder holds ``model.safetensors`` (or Hub-convention shards plus
``model.safetensors.index.json``), ``config.json`` in timm's format and a ``README.md`` model
card, written through ``porting.output.atomic_folder`` (see there for what may be replaced).
"""
import hashlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from timm_vit_variants.errors import ViTVariantsError

from .hub_config import architecture_for, meta_model, model_args_of, write_config
from .output import atomic_folder
from .shards import ShardedSafetensorsWriter, parse_size

__all__ = ['DEFAULT_MAX_SHARD_SIZE', 'tensor_specs', 'write_card', 'file_sha256', 'save_pretrained_folder']

DEFAULT_MAX_SHARD_SIZE = '5GB'


def tensor_specs(model_args: Dict[str, Any]) -> List[Tuple[str, Tuple[int, ...], torch.dtype]]:
    """(name, shape, dtype) of every saved tensor of a model, from a meta-device instance (no memory)."""
    return [(name, tuple(t.shape), t.dtype) for name, t in meta_model(model_args).state_dict().items()]


def file_sha256(path: Union[str, Path]) -> str:
    """sha256 of a file; for a folder, of every file in it (relative name, then bytes, sorted by name)."""
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob('*') if p.is_file())
    for f in files:
        if path.is_dir():
            digest.update(str(f.relative_to(path)).encode() + b'\0')
        with open(f, 'rb') as fh:
            for block in iter(lambda: fh.read(1 << 22), b''):
                digest.update(block)
    return digest.hexdigest()


def write_card(folder: Union[str, Path], **card_kwargs: Any) -> None:
    """Write ``README.md`` with the hub helper's model-card builder (see ``porting.card``)."""
    from .card import build_model_card

    card = build_model_card(**card_kwargs)
    (Path(folder) / 'README.md').write_text(str(card))


def save_pretrained_folder(
        model: torch.nn.Module,
        out_dir: Union[str, Path],
        *,
        overwrite: bool = False,
        max_shard_size: Union[str, int] = DEFAULT_MAX_SHARD_SIZE,
        label_names: Optional[Sequence[str]] = None,
        pretrained_cfg: Optional[Dict[str, Any]] = None,
        **card_kwargs: Any,
) -> Path:
    """Save an in-memory SimpleVisionTransformer as a Hub folder (weights, config.json, README.md).

    Loadable with ``timm.create_model('local-dir:OUT', pretrained=True)`` after
    ``import timm_vit_variants`` (single-file output; see docs/porting.md for shards).
    ``card_kwargs`` go to ``build_model_card`` (e.g. ``source``, ``verification``, ``license``,
    ``base_model``, ``datasets``, ``conversion_command``, ``repo_id``).
    ``pretrained_cfg`` overrides preprocessing fields (mean, std, crop_pct, interpolation);
    by default the model's own ``pretrained_cfg`` values are kept.
    """
    model_args = model_args_of(model)
    architecture = architecture_for(model_args)
    data_cfg = {k: v for k, v in (getattr(model, 'pretrained_cfg', None) or {}).items()
                if k in ('mean', 'std', 'interpolation', 'crop_pct', 'crop_mode')}
    data_cfg.update(pretrained_cfg or {})
    state = model.state_dict()
    specs = [(name, tuple(t.shape), t.dtype) for name, t in state.items()]
    with atomic_folder(out_dir, overwrite) as tmp:
        writer = ShardedSafetensorsWriter(tmp, specs, parse_size(max_shard_size))
        try:
            for name, tensor in state.items():
                writer.write(name, tensor)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        write_config(tmp / 'config.json', model_args, architecture=architecture, label_names=label_names,
                     pretrained_cfg=data_cfg)
        write_card(tmp, architecture=architecture, model_args=model_args, num_classes=model_args['num_classes'],
                   label_names=list(label_names) if label_names and len(label_names) == model_args['num_classes']
                   else None, **card_kwargs)
    return Path(out_dir).expanduser().absolute()
