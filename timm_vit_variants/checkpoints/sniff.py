"""Which reader a path needs, judged from content (zip members, safetensors header, tensor names, config.json)."""
import os
import zipfile
from typing import Iterable

from ..errors import ViTVariantsError
from .files import check_source, read_json
from .torch_files import open_store

__all__ = ['detect_format']

_ZIP_MAGIC = b'PK\x03\x04'


def _npz_flavour(path: str, names: Iterable[str]) -> str:
    names = list(names)
    if any('MultiHeadDotProductAttention_1/' in n or 'posembed_input/' in n for n in names):
        return 'vitjax'
    if any('MultiHeadDotProductAttention_0/' in n or 'Transformer/encoderblock/' in n for n in names):
        return 'bigvision'
    raise ViTVariantsError('an .npz archive without ViT encoder blocks (no MultiHeadDotProductAttention arrays)',
                           path=path, key='Transformer/encoderblock_0')


def _names_flavour(path: str, names: Iterable[str]) -> str:
    names = list(names)
    if any(n.endswith('embeddings.patch_embeddings.projection.weight') for n in names):
        return 'hf'
    if any(n.endswith('patch_embed.proj.weight') for n in names):
        return 'timm'
    raise ViTVariantsError('no ViT patch embedding among the tensors (neither timm nor transformers layout)',
                           path=path, key='patch_embed.proj.weight')


def _detect_folder(path: str) -> str:
    config_path = os.path.join(path, 'config.json')
    if os.path.isfile(config_path):
        config = read_json(config_path)
        if 'architecture' in config:
            return 'timm'
        if config.get('model_type') == 'vit':
            return 'hf'
        if 'model_type' in config:
            raise ViTVariantsError(f"model_type {config['model_type']!r} is not a transformers ViT",
                                   path=config_path, key='model_type')
    for name in ('model.safetensors', 'pytorch_model.bin', 'model.safetensors.index.json'):
        if os.path.isfile(os.path.join(path, name)):
            if name.endswith('.json'):
                return 'hf'
            return detect_format(os.path.join(path, name))
    raise ViTVariantsError('no config.json or weight file found in the folder', path=path)


def detect_format(path: 'str | os.PathLike') -> str:
    """One of FORMATS for a file or folder; raises ViTVariantsError if it is none of them."""
    path = check_source(os.fspath(path))
    if os.path.isdir(path):
        return _detect_folder(path)
    try:
        with open(path, 'rb') as fp:
            head = fp.read(4)
    except OSError as e:
        raise ViTVariantsError(f'unreadable file: {e}', path=path) from e
    if head == _ZIP_MAGIC or zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                members = archive.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise ViTVariantsError(f'truncated or corrupt zip archive: {e}', path=path) from e
        if any(m.endswith('.npy') for m in members):
            return _npz_flavour(path, (m[:-len('.npy')] for m in members))
        if not any(m.endswith('data.pkl') for m in members):
            raise ViTVariantsError('a zip archive that is neither .npz nor a torch.save file', path=path)
    store = open_store([path], unwrap=True)  # safetensors by header, otherwise a (safely loaded) pickle
    try:
        return _names_flavour(path, store.names())
    finally:
        store.close()
