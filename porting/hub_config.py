"""``config.json`` in timm's Hub format, written by timm's own ``save_config_for_hf``.

timm reads it back with ``load_model_config_from_path`` (``local-dir:``) and
``load_model_config_from_hf`` (``hf-hub:``): ``architecture`` names a registered ``simple_vit_*``
entrypoint and ``model_args`` holds every constructor argument, so the folder rebuilds the exact
model whatever the entrypoint's defaults are.
"""
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import torch.nn as nn
from timm.layers import get_act_layer
from timm.models._hub import save_config_for_hf

from timm_vit_variants import VARIANT_DIMS, SimpleVisionTransformer
from timm_vit_variants.checkpoints.files import read_json
from timm_vit_variants.errors import ViTVariantsError

from .redact import redact

__all__ = ['architecture_for', 'model_args_of', 'complete_args', 'source_pretrained_cfg', 'write_config', 'read_config']

# Activation names SimpleVisionTransformer accepts, tried in order when describing a built model.
_ACT_NAMES = ('gelu_tanh', 'gelu', 'quick_gelu', 'silu', 'relu')
# PIL resample codes used in transformers' preprocessor_config.json.
_PIL_RESAMPLE = {0: 'nearest', 1: 'lanczos', 2: 'bilinear', 3: 'bicubic'}
# Preprocessing fields copied from a timm source's pretrained_cfg.
_TIMM_DATA_KEYS = ('mean', 'std', 'interpolation', 'crop_pct', 'crop_mode', 'license')


def architecture_for(model_args: Dict[str, Any]) -> str:
    """The registered entrypoint named for the model's width/depth/heads (all args are saved anyway)."""
    dims = (model_args.get('embed_dim'), model_args.get('depth'), model_args.get('num_heads'))
    for name, (width, depth, _, heads) in VARIANT_DIMS.items():
        if dims == (width, depth, heads):
            return f'simple_vit_{name}'
    return 'simple_vit_tiny'


def _act_name(model: SimpleVisionTransformer) -> str:
    act = model.blocks[0].mlp.act if len(model.blocks) else None
    for name in _ACT_NAMES:
        cls = get_act_layer(name)
        if type(act) is cls and getattr(act, 'approximate', None) == getattr(cls(), 'approximate', None):
            return name
    raise ValueError(f'cannot name the activation {type(act).__name__} for config.json')


def model_args_of(model: SimpleVisionTransformer) -> Dict[str, Any]:
    """Every constructor argument of a built model, read back from its modules (JSON-safe)."""
    pe = model.patch_embed
    block = model.blocks[0]
    rep = model.pre_logits.fc.out_features if isinstance(getattr(model.pre_logits, 'fc', None), nn.Linear) else None
    img = list(pe.img_size)
    patch = list(pe.patch_size)
    args = dict(
        img_size=img[0] if img[0] == img[1] else img,
        patch_size=patch[0] if patch[0] == patch[1] else patch,
        in_chans=pe.in_chans,
        num_classes=model.num_classes,
        global_pool=model.global_pool,
        embed_dim=model.embed_dim,
        depth=len(model.blocks),
        num_heads=block.attn.num_heads,
        mlp_dim=block.mlp.fc1.out_features,
        qkv_bias=block.attn.qkv.bias is not None,
        class_token=model.has_class_token,
        pos_embed=model.pos_embed_type,
        pos_embed_cls_slot=model.pos_embed_cls_slot,
        rep_size=rep,
        act_layer=_act_name(model),
        norm_eps=model.norm.eps,
        dynamic_img_pad=pe.dynamic_img_pad,
    )
    if model.pos_resampler is not None:
        args['pos_embed_resample'] = model.pos_resampler.rule
    if model.pos_sincos is not None:
        args['sincos_temperature'] = model.pos_sincos.temperature
    return args


def meta_model(model_args: Dict[str, Any]) -> SimpleVisionTransformer:
    """The model on the meta device (no memory); bad arguments become ViTVariantsError."""
    try:
        return SimpleVisionTransformer(**dict(model_args, device='meta', weight_init='skip'))
    except ViTVariantsError:
        raise
    except (TypeError, ValueError) as e:
        raise ViTVariantsError(f'cannot build the model from {model_args}: {e}') from None


def complete_args(model_args: Dict[str, Any]) -> Dict[str, Any]:
    """Every constructor argument spelled out (defaults filled in), via a meta-device instance.

    Needed because ``config.json`` is rebuilt through a registered entrypoint whose own defaults
    (e.g. ``mlp_dim``) would otherwise replace the class defaults.
    """
    return model_args_of(meta_model(model_args))


def _json_safe(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def source_pretrained_cfg(fmt: str, path: Union[str, Path], source_config: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Preprocessing that belongs to the source weights, as timm pretrained_cfg fields.

    npz (big_vision / vit_jax) inputs are scaled to [-1, 1] (mean = std = 0.5); a timm source
    keeps its own pretrained_cfg; an HF folder's ``preprocessor_config.json`` is honoured.
    """
    cfg: Dict[str, Any] = {'mean': (0.5, 0.5, 0.5), 'std': (0.5, 0.5, 0.5)}
    source_config = source_config or {}
    if fmt == 'timm':
        timm_cfg = source_config.get('pretrained_cfg') or {}
        cfg.update({k: _json_safe(timm_cfg[k]) for k in _TIMM_DATA_KEYS if timm_cfg.get(k) is not None})
    elif fmt == 'hf':
        folder = Path(path) if Path(path).is_dir() else Path(path).parent
        proc_file = folder / 'preprocessor_config.json'
        if proc_file.is_file():
            try:
                proc = json.loads(proc_file.read_text())
            except ValueError:
                proc = {}
            if proc.get('image_mean') is not None and proc.get('image_std') is not None:
                cfg['mean'] = tuple(proc['image_mean'])
                cfg['std'] = tuple(proc['image_std'])
            if proc.get('resample') in _PIL_RESAMPLE:
                cfg['interpolation'] = _PIL_RESAMPLE[proc['resample']]
            if proc.get('do_resize', True) and not proc.get('do_center_crop', False):
                cfg['crop_pct'] = 1.0  # the ViT image processor resizes straight to the model size
    return cfg


def write_config(
        path: Union[str, Path],
        model_args: Dict[str, Any],
        *,
        architecture: Optional[str] = None,
        label_names: Optional[Sequence[str]] = None,
        pretrained_cfg: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Write ``config.json`` for a model with these constructor args; returns the written dict.

    The model is instantiated on the meta device (no memory) so that timm's exporter sees the
    same object timm will later rebuild from the file.
    """
    import timm

    architecture = architecture or architecture_for(model_args)
    model_args = {k: _json_safe(v) for k, v in model_args.items() if v is not None}
    meta = timm.create_model(architecture, device='meta', weight_init='skip', **model_args)
    meta._model_args.pop('weight_init')  # a load-time shortcut, not an architecture argument
    meta.pretrained_cfg = {k: v for k, v in meta.pretrained_cfg.items() if k not in ('tag', 'license')}
    img = model_args.get('img_size', 224)
    img = (img, img) if isinstance(img, int) else tuple(img)
    overrides = {k: v for k, v in (pretrained_cfg or {}).items() if v is not None}
    model_config: Dict[str, Any] = {'pretrained_cfg': overrides}
    labels: Optional[List[str]] = list(label_names) if label_names else None
    if labels and len(labels) == model_args.get('num_classes'):
        model_config['label_names'] = labels
    save_config_for_hf(
        meta, str(path), model_config=model_config, model_args=model_args,
        data_config={'input_size': (model_args.get('in_chans', 3), *img)})
    text = Path(path).read_text(encoding='utf-8')
    if redact(text) != text:  # a token pasted into a free-text field (license, labels) never lands on disk
        Path(path).write_text(redact(text), encoding='utf-8')
    return read_config(Path(path).parent)


def read_config(folder: Union[str, Path]) -> Dict[str, Any]:
    """The parsed ``config.json`` of a Hub folder."""
    path = Path(folder) / 'config.json'
    if not path.is_file():
        raise ViTVariantsError('no config.json: not a converted model folder', path=str(folder))
    cfg = read_json(str(path))
    if 'architecture' not in cfg:
        raise ViTVariantsError('config.json has no "architecture": not a timm Hub config', path=str(path))
    return cfg
