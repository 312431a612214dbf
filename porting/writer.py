"""Hub-style output folders, written atomically.

A folder holds ``model.safetensors`` (or Hub-convention shards plus
``model.safetensors.index.json``), ``config.json`` in timm's format and a ``README.md`` model
card. Everything is written into a hidden temporary folder beside OUT and renamed into place
only when complete, so a failure never leaves a partial OUT and an existing OUT is replaced only
with ``overwrite=True``.
"""
import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from timm_vit_variants.errors import ViTVariantsError

from .hub_config import architecture_for, meta_model, model_args_of, write_config
from .shards import ShardedSafetensorsWriter, parse_size

__all__ = [
    'DEFAULT_MAX_SHARD_SIZE', 'check_output', 'atomic_folder', 'tensor_specs', 'write_card', 'file_sha256',
    'save_pretrained_folder',
]

DEFAULT_MAX_SHARD_SIZE = '5GB'


def check_output(out: Union[str, Path], overwrite: bool, sources: Sequence[Union[str, Path]] = ()) -> Path:
    """Validate OUT before any work: refuse to clobber it (or a source) and fail early if unwritable."""
    out = Path(out).expanduser().absolute()
    for src in sources:
        src = Path(src).expanduser().absolute()
        if out == src or out in src.parents:
            raise ViTVariantsError('output folder would replace the source it is converted from', path=str(out))
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise ViTVariantsError('output already exists; pass --overwrite to replace it', path=str(out))
        if not out.is_dir():
            raise ViTVariantsError('output exists and is not a folder; refusing to replace a file', path=str(out))
    parent = _existing_ancestor(out.parent)
    if not parent.is_dir():
        raise ViTVariantsError(f'cannot create the output folder: {parent} is not a directory', path=str(out))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ViTVariantsError(f'output location is not writable ({parent})', path=str(out))
    return out


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


@contextmanager
def atomic_folder(out: Union[str, Path], overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder beside OUT; on success it becomes OUT, on error it vanishes."""
    out = check_output(out, overwrite)
    created: List[Path] = []
    parent = out.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    try:
        for folder in reversed(created):
            folder.mkdir()
        tmp = Path(tempfile.mkdtemp(prefix=f'.{out.name}.', suffix='.tmp', dir=out.parent))
    except OSError as e:
        _remove_created(created)
        raise ViTVariantsError(f'cannot create the output folder: {e.strerror or e}', path=str(out)) from None
    try:
        yield tmp
        _commit(tmp, out, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_created(created)
        raise


def _remove_created(created: List[Path]) -> None:
    for folder in created:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            break


def _commit(tmp: Path, out: Path, overwrite: bool) -> None:
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the result should look like any folder
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise ViTVariantsError('output appeared while converting; pass --overwrite to replace it', path=str(out))
        old = Path(tempfile.mkdtemp(prefix=f'.{out.name}.', suffix='.old', dir=out.parent))
        os.rmdir(old)
        os.rename(out, old)
        try:
            os.rename(tmp, out)
        except OSError:
            os.rename(old, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)


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
