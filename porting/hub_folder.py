"""The Hub folder: the one module that describes, saves and reads one.

::

    OUT/
      model.safetensors            # or model-0000i-of-0000N.safetensors + model.safetensors.index.json
      config.json                  # timm's Hub format, written from the model's SimpleViTConfig
      README.md                    # the model card (porting.card)

The weights are written by ``safetensors_writer.py`` (pre-allocated files, one tensor resident at a time).
``config.json`` keeps ``num_classes`` at the top level and every other constructor argument in
``model_args``, which both timm (``local-dir:``, ``hf-hub:``) and transformers' ``TimmWrapper`` read.
Folders are read back through the plugin's own safetensors store (sharded ones too), so reading needs no copy
either.
"""
import functools
import json
import os
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import timm
import torch
from timm.models import load_pretrained

from timm_vit_variants import SimpleVisionTransformer, SimpleViTConfig, architecture_for
from timm_vit_variants.cfgs import pretrained_cfg as default_pretrained_cfg
from timm_vit_variants.checkpoints.files import CONFIG_FILE, read_json, weight_files
from timm_vit_variants.checkpoints.stores import SafetensorsStore
from timm_vit_variants.config import DATA_CONFIG_KEYS, PREPROCESSING_KEYS, is_family_architecture
from timm_vit_variants.model_table import MODELS
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits
from timm_vit_variants.simple_vit import WEIGHT_DTYPES, checkpoint_filter_fn, pretrained_cfg_for

from .output import atomic_folder
from .redact import redact
from .safetensors_writer import SafetensorsWriter
from .sizes import DEFAULT_MAX_SHARD_SIZE, parse_size as parse_size_text

__all__ = [
    'CARD_FILE', 'DEFAULT_MAX_SHARD_SIZE', 'parse_size', 'config_dict', 'write_config',
    'check_config_fields', 'read_config', 'write_card', 'save_pretrained_folder',
    'build_as_timm', 'load_folder', 'folder_dtype', 'check_dtype_name', 'DTYPES_BY_NAME',
]

CARD_FILE = 'README.md'
DTYPES_BY_NAME = WEIGHT_DTYPES  # the dtypes a folder's weights may be written in


def parse_size(text: Union[str, int]) -> int:
    """'5GB', '500MB', '1.5GiB' or a byte count as an int number of bytes (Hub convention: GB = 10**9)."""
    try:
        return parse_size_text(text)
    except ValueError as e:
        raise ViTVariantsError(str(e)) from None


def check_dtype_name(name: Any) -> str:
    """``name`` if it is a dtype a folder may hold ('float32', 'bfloat16', 'float16'), else a ViTVariantsError."""
    if name not in DTYPES_BY_NAME:
        raise ViTVariantsError(f'dtype must be one of {", ".join(DTYPES_BY_NAME)}, got {name!r}', key='dtype')
    return name


# -- config.json -------------------------------------------------------------------------------------------

def _json_safe(value: Any) -> Any:
    return [_json_safe(v) for v in value] if isinstance(value, (tuple, list)) else value


def config_dict(
        config: SimpleViTConfig,
        *,
        data_config: Optional[Dict[str, Any]] = None,
        label_names: Optional[Sequence[str]] = None,
        architecture: Optional[str] = None,
        conversion: Optional[Dict[str, Any]] = None,
        dtype: str = 'float32',
) -> Dict[str, Any]:
    """``config.json`` for a model built from ``config``: timm's Hub format, readable by TimmWrapper too.

    ``num_classes`` appears at the top level (and in ``pretrained_cfg``) only: transformers passes it
    to ``create_model`` itself and refuses a second copy in ``model_args``. ``conversion`` (where the
    weights came from, how they were checked) goes under a top-level ``conversion`` key, which timm's
    and transformers' loaders ignore and ``export`` and ``verify`` read. A ``dtype`` other than float32 (the
    weights' dtype) is a ``model_args`` entry, so timm's ``local-dir:`` and ``hf-hub:`` build the model in it.
    """
    architecture = architecture or architecture_for(config)
    model_args = {k: _json_safe(v) for k, v in config.to_flat().items() if v is not None and k != 'num_classes'}
    if dtype != 'float32':
        model_args['dtype'] = check_dtype_name(dtype)
    pretrained_cfg = {k: _json_safe(v) for k, v in pretrained_cfg_for(config, architecture).items()}
    pretrained_cfg.update({k: _json_safe(v) for k, v in (data_config or {}).items()
                           if k in DATA_CONFIG_KEYS and v is not None})
    out: Dict[str, Any] = {
        'architecture': architecture,
        'num_classes': config.num_classes,
        'num_features': config.embed_dim,
    }
    if config.head.pool.kind:
        out['global_pool'] = config.head.pool.kind
    labels = list(label_names or [])
    if labels and len(labels) == config.num_classes:
        out['label_names'] = [str(n) for n in labels]
    out['model_args'] = model_args
    out['pretrained_cfg'] = pretrained_cfg
    if conversion:
        out['conversion'] = conversion
    return out


def write_config(path: Union[str, Path], config: SimpleViTConfig, **kwargs: Any) -> Dict[str, Any]:
    """Write ``config.json`` (see ``config_dict``); a token pasted into a free-text field never lands on disk."""
    data = config_dict(config, **kwargs)
    Path(path).write_text(redact(json.dumps(data, indent=2)) + '\n', encoding='utf-8')
    return data


# The type of each top-level config.json field that our readers, the card and push use.
_CONFIG_FIELDS = {'model_args': dict, 'pretrained_cfg': dict, 'conversion': dict, 'label_names': list,
                  'global_pool': str}
_JSON_NAMES = {dict: 'object', list: 'array', str: 'string'}


def check_config_fields(raw: Any, path: str) -> Dict[str, Any]:
    """``raw`` (a parsed ``config.json``) when every field it sets has the type readers expect; otherwise one
    ViTVariantsError naming the file and key, so a malformed value never reaches a reader as a raw TypeError."""
    if not isinstance(raw, dict):
        raise ViTVariantsError(f'config.json holds a JSON {type(raw).__name__}, not an object', path=path)
    architecture = raw.get('architecture')
    if not isinstance(architecture, str) or not architecture:
        raise ViTVariantsError(f'"architecture" must be a model name, got {architecture!r}', path=path,
                               key='architecture')
    for key, kind in _CONFIG_FIELDS.items():
        if raw.get(key) is not None and not isinstance(raw[key], kind):
            raise ViTVariantsError(f'"{key}" must be a JSON {_JSON_NAMES[kind]}, got {raw[key]!r:.60}', path=path,
                                   key=key)
    classes = raw.get('num_classes', (raw.get('model_args') or {}).get('num_classes'))
    if classes is not None and (isinstance(classes, bool) or not isinstance(classes, int) or classes < 0):
        raise ViTVariantsError(f'"num_classes" must be a non-negative integer, got {classes!r:.60}', path=path,
                               key='num_classes')
    labels = raw.get('label_names')
    if labels is not None:
        if not all(isinstance(n, str) for n in labels):
            raise ViTVariantsError('"label_names" must be a list of strings', path=path, key='label_names')
        if classes is not None and len(labels) != classes:
            raise ViTVariantsError(f'"label_names" has {len(labels)} names for {classes} classes', path=path,
                                   key='label_names')
    return raw


def read_config(folder: Union[str, Path], limits: Limits = DEFAULT_LIMITS) -> Tuple[SimpleViTConfig, Dict[str, Any]]:
    """(the model's config, the whole parsed ``config.json``) of a simple_vit Hub folder, within ``limits``."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise ViTVariantsError('no config.json: not a converted model folder', path=str(folder))
    raw = check_config_fields(read_json(str(path), limits), str(path))
    architecture = raw['architecture']
    if not is_family_architecture(architecture):
        raise ViTVariantsError(f'config.json names {architecture!r}, not a simple_vit_* model', path=str(path),
                               key='architecture')
    args = dict(raw.get('model_args') or {})
    args.pop('dtype', None)  # the weights' dtype, not an architectural field (``folder_dtype``)
    if 'num_classes' not in args and isinstance(raw.get('num_classes'), int):
        args['num_classes'] = raw['num_classes']
    entry = MODELS.get(architecture)
    try:
        config = entry.config(**args) if entry else SimpleViTConfig.from_dict(args, path=str(path))
    except TypeError as e:
        raise ViTVariantsError(f'bad model_args: {e}', path=str(path), key='model_args') from None
    except ViTVariantsError as e:
        raise ViTVariantsError(e.reason, path=str(path), key=f'model_args.{e.key}') from None
    return config.check_limits(limits, str(path)), raw


# -- whole folders -----------------------------------------------------------------------------------------

def write_card(folder: Union[str, Path], **card_kwargs: Any) -> None:
    """Write ``README.md`` with ``porting.card.build_model_card``."""
    from .card import build_model_card

    (Path(folder) / CARD_FILE).write_text(str(build_model_card(**card_kwargs)), encoding='utf-8')


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
    by default the model's own ``pretrained_cfg`` values are kept, and a model built by the class itself (which has
    none) gets the package's defaults, not those of the registered row that labels it.
    """
    config = model.config
    architecture = architecture_for(config)
    own = getattr(model, 'pretrained_cfg', None) or {k: v for k, v in default_pretrained_cfg().items()
                                                     if k in PREPROCESSING_KEYS}
    data_cfg = {k: v for k, v in own.items() if k in DATA_CONFIG_KEYS}
    data_cfg.update(pretrained_cfg or {})
    state = model.state_dict()
    labels = list(label_names) if label_names and len(label_names) == config.num_classes else None
    with atomic_folder(out_dir, overwrite) as tmp:
        writer = SafetensorsWriter(tmp, [(n, tuple(t.shape), t.dtype) for n, t in state.items()],
                                   parse_size(max_shard_size))
        try:
            for name, tensor in state.items():
                writer.write(name, tensor.detach().cpu())
            writer.close()
        except BaseException:
            writer.abort()
            raise
        names = {name for name, dtype in DTYPES_BY_NAME.items() for t in state.values() if t.dtype == dtype}
        dtype = names.pop() if len(names) == 1 else 'float32'  # a model of mixed dtypes loads as float32
        write_config(tmp / CONFIG_FILE, config, data_config=data_cfg, label_names=labels, architecture=architecture,
                     dtype=dtype)
        write_card(tmp, architecture=architecture, model_args=config.to_flat(), num_classes=config.num_classes,
                   label_names=labels, **card_kwargs)
    return Path(os.path.abspath(out_dir))


def folder_dtype(raw: Dict[str, Any], path: Union[str, Path] = '') -> str:
    """The weights' dtype a parsed ``config.json`` records (``model_args.dtype``; float32 when absent)."""
    value = (raw.get('model_args') or {}).get('dtype', 'float32') if isinstance(raw.get('model_args'), dict) \
        else 'float32'
    try:
        return check_dtype_name(value)
    except ViTVariantsError as e:
        raise ViTVariantsError(e.reason, path=str(Path(path) / CONFIG_FILE), key='model_args.dtype') from None


def build_as_timm(folder: Union[str, Path], limits: Limits = DEFAULT_LIMITS
                  ) -> Tuple[SimpleVisionTransformer, Dict[str, Any]]:
    """(the network ``timm.create_model('local-dir:FOLDER')`` builds, on the meta device; the parsed config.json):
    timm's own factory from ``config.json`` alone, after ``read_config``'s checks and limits."""
    _, raw = read_config(folder, limits)
    return timm.create_model(f'local-dir:{os.fspath(folder)}', pretrained=False, device='meta', limits=limits), raw


def load_folder(folder: Union[str, Path], limits: Limits = DEFAULT_LIMITS,
                dtype: Union[None, str, torch.dtype] = None) -> SimpleVisionTransformer:
    """The model ``timm.create_model('local-dir:FOLDER', pretrained=True)`` gives (sharded folders too), in eval mode.

    timm's own factory builds it from ``config.json`` alone, as ``local-dir:`` does with no kwargs (on the meta
    device), and timm's own ``load_pretrained``, the step ``pretrained=True`` runs, loads the weights; the only
    difference is where the bytes come from: the parameters become views of the memory-mapped weight files
    (private, copy-on-write), so loading copies nothing and pages arrive on first use. A folder timm would load
    as another model (a head it drops, a tensor it leaves out) is refused. The model holds the dtype
    ``config.json`` records unless ``dtype`` asks for another ('float32' to compute in float32; a cast tensor is
    a copy). ``config.json`` is checked against ``limits`` before anything is built.
    """
    model, raw = build_as_timm(folder, limits)
    want = DTYPES_BY_NAME[check_dtype_name(dtype) if isinstance(dtype, str) else folder_dtype(raw, folder)] \
        if not isinstance(dtype, torch.dtype) else dtype
    cfg = dict(model.pretrained_cfg)
    if model.num_classes != cfg.get('num_classes'):
        raise ViTVariantsError(f'timm builds this folder with {model.num_classes} classes but its config.json says '
                               f'{cfg.get("num_classes")}: the stored classifier would be dropped', path=str(folder),
                               key='num_classes')
    store = SafetensorsStore(weight_files(str(folder), limits), limits)
    try:
        expected = model.state_dict()
        names = set(store.names())
        missing, extra = sorted(set(expected) - names), sorted(names - set(expected))
        if missing or extra:
            raise ViTVariantsError(f'the weights do not match config.json: {len(missing)} missing (e.g. '
                                   f'{missing[:3]}), {len(extra)} unexpected (e.g. {extra[:3]})', path=str(folder))
        state = {}
        for name, target in expected.items():
            tensor = store.tensor(name)
            if tuple(tensor.shape) != tuple(target.shape):
                raise ViTVariantsError('tensor does not fit the model', path=store.file_of(name), key=name,
                                       shapes=(tensor.shape, target.shape))
            state[name] = tensor if tensor.dtype == want else tensor.to(want)
        # timm's loader reads no file when handed the state dict (source and file cleared)
        cfg.update(source=None, file=None, url=None, hf_hub_id=None, state_dict=state)
        model.load_state_dict = functools.partial(torch.nn.Module.load_state_dict, model, assign=True)
        try:
            load_pretrained(model, pretrained_cfg=cfg, num_classes=model.num_classes, in_chans=model.config.in_chans,
                            filter_fn=checkpoint_filter_fn, strict=True)
        finally:
            del model.load_state_dict
    finally:
        store.close()  # the mappings live on, held by the parameters that view them
    model.init_non_persistent_buffers()
    return model.eval()
