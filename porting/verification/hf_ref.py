"""The transformers reference: ``ViTForImageClassification`` / ``ViTModel`` or ``SiglipVisionModel`` /
``SiglipModel`` ``.from_pretrained`` on the source folder."""
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch

from timm_vit_variants.checkpoints.files import read_json
from timm_vit_variants.checkpoints.hf_beit import BEIT_MODEL_TYPES
from timm_vit_variants.memory import release_after_use

from .beit_ref import hf_beit_outputs
from .result import Check, NoReference, Outputs
from .streamed import as_float32

__all__ = ['hf_outputs']

# Each transformers DINOv2 model's own table resize, as our rule: without antialias ('hf'), with it ('timm').
_DINOV2_RULES = {'dinov2': 'hf', 'dinov2_with_registers': 'timm'}


def hf_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """transformers itself; at a target geometry only through its own ``interpolate_pos_encoding`` (SigLIP 2:
    its own per-image table resize)."""
    folder = Path(check.path) if Path(check.path).is_dir() else Path(check.path).parent
    cfg = read_json(str(folder / 'config.json')) if (folder / 'config.json').is_file() else {}
    if str(cfg.get('model_type')).startswith('siglip2'):
        return _siglip2(_transformers(), folder, cfg, check, x, mixed)
    if cfg.get('model_type') in BEIT_MODEL_TYPES:
        return hf_beit_outputs(_transformers(), folder, cfg, check, x)
    target = check.target
    dinov3 = cfg.get('model_type') == 'dinov3_vit'  # RoPE: no table to resize
    check.require_own_resize('transformers', None if dinov3 else _DINOV2_RULES.get(cfg.get('model_type'), 'hf'),
                             "transformers'")
    if target is not None and target.grid_mode != 'crop' and \
            any(s % p for s, p in zip(target.img_size, target.patch_size)):
        raise NoReference('transformers drops the pixels the patch does not divide, where this model pads them')
    transformers = _transformers()
    if cfg.get('model_type') in _DINOV2_RULES:
        return _dinov2(transformers, folder, cfg, x)
    if cfg.get('model_type') == 'dinov3_vit':
        model = _run_in_float32(
            transformers.DINOv3ViTModel.from_pretrained(str(folder), attn_implementation='eager').eval())
        with torch.no_grad():
            out = model(pixel_values=x)
        return Outputs(out.last_hidden_state, out.pooler_output, 'transformers DINOv3ViTModel.from_pretrained')
    if cfg.get('model_type') in ('siglip', 'siglip_vision_model'):
        return _siglip(transformers, folder, cfg, x, target is not None)
    if cfg.get('model_type') in ('clip', 'clip_vision_model'):
        return _clip(transformers, folder, cfg, x, target is not None)
    classify = any('ForImageClassification' in a for a in cfg.get('architectures') or [])
    cls = transformers.ViTForImageClassification if classify else transformers.ViTModel
    # A bare ViTModel's pooler (Dense + tanh) is our pre-logits layer when the reader found one.
    kwargs = {} if classify else {'add_pooling_layer': bool(check.source.rep_size)}
    model = _run_in_float32(cls.from_pretrained(str(folder), attn_implementation='eager', **kwargs).eval())
    pooled = None
    resize = {'interpolate_pos_encoding': True} if target is not None else {}
    with torch.no_grad():
        if classify:
            feats = model.vit(pixel_values=x, **resize).last_hidden_state
            logits = model(pixel_values=x, **resize).logits
        else:
            out = model(pixel_values=x, **resize)
            feats, logits, pooled = out.last_hidden_state, None, out.pooler_output
    name = f'transformers {cls.__name__}.from_pretrained' + (' with interpolate_pos_encoding' if resize else '')
    return Outputs(feats, logits, name, pre_logits=pooled)


def _dinov2(transformers: Any, folder: Path, cfg: Dict[str, Any], x: torch.Tensor) -> Outputs:
    """A DINOv2 folder: its model resizes the table itself at every input size; the pooler is the normed [CLS]."""
    cls = transformers.Dinov2WithRegistersModel if cfg['model_type'] == 'dinov2_with_registers' else \
        transformers.Dinov2Model
    model = _run_in_float32(cls.from_pretrained(str(folder), attn_implementation='eager').eval())
    with torch.no_grad():
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output, f'transformers {cls.__name__}.from_pretrained')


def _run_in_float32(model: Any) -> Any:
    """A loaded model in float32 (half precision upcast onto a scratch mapping), each layer's weight pages handed
    back once it has run: transformers views a safetensors file in place, so the reference holds about one layer."""
    model = as_float32(model)
    release_after_use(m for m in model.modules() if next(m.children(), None) is None)
    return model


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise NoReference('transformers is not installed') from None
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()  # the reference's load messages are not ours to print
    return transformers


def _patchify(x: torch.Tensor, patch: Tuple[int, int]) -> Dict[str, torch.Tensor]:
    """An NCHW batch as SigLIP 2's inputs: P-P-C flattened patches, row-major, all valid, and the grid."""
    (ph, pw), (batch, chans, height, width) = patch, x.shape
    gh, gw = height // ph, width // pw
    x = x[..., :gh * ph, :gw * pw].reshape(batch, chans, gh, ph, gw, pw)
    patches = x.permute(0, 2, 4, 3, 5, 1).reshape(batch, gh * gw, ph * pw * chans)
    return {'pixel_values': patches, 'pixel_attention_mask': torch.ones(batch, gh * gw, dtype=torch.long),
            'spatial_shapes': torch.tensor([[gh, gw]] * batch)}


def _siglip2(transformers: Any, folder: Path, cfg: Dict[str, Any], check: Check, x: torch.Tensor,
             mixed: Optional[Dict[str, torch.Tensor]]) -> Outputs:
    """A SigLIP 2 folder's vision tower on ``x`` patchified (any grid: its table is resized per image) and on
    the mixed-size NaFlex batch."""
    check.require_own_resize('transformers', 'flexi', "SigLIP 2's")
    model, name = _vision_tower(transformers, folder, cfg, 'Siglip2')
    with torch.no_grad():
        out = model(**_patchify(x, check.source.patch_size))
        result = Outputs(out.last_hidden_state, out.pooler_output, name + ' (spatial_shapes; pooler_output: the MAP '
                         'head)')
        if mixed is not None:
            grids = torch.stack([mixed['patch_coord'][i][valid].amax(0) + 1
                                 for i, valid in enumerate(mixed['patch_valid'])])
            mixed_out = model(pixel_values=mixed['patches'], pixel_attention_mask=mixed['patch_valid'].long(),
                              spatial_shapes=grids)
            result.mixed_features = mixed_out.last_hidden_state[mixed['patch_valid']]
            result.mixed_pooled = mixed_out.pooler_output
    return result


def _vision_tower(transformers: Any, folder: Path, cfg: Dict[str, Any], family: str) -> Tuple[Any, str]:
    """A SigLIP (``family='Siglip'``) or SigLIP 2 folder's vision tower, from a two-tower or a vision-only save."""
    if cfg.get('model_type') == family.lower():
        model = getattr(transformers, f'{family}Model').from_pretrained(str(folder), attn_implementation='eager')
        return _run_in_float32(model.vision_model.eval()), f'transformers {family}Model.from_pretrained(...).vision_model'
    model = getattr(transformers, f'{family}VisionModel').from_pretrained(str(folder), attn_implementation='eager')
    return _run_in_float32(model.eval()), f'transformers {family}VisionModel.from_pretrained'


def _siglip(transformers: Any, folder: Path, cfg: Dict[str, Any], x: torch.Tensor, resize: bool) -> Outputs:
    """A SigLIP folder's vision tower: post-LayerNorm tokens, and the MAP head's pooled embedding."""
    model, name = _vision_tower(transformers, folder, cfg, 'Siglip')
    with torch.no_grad():
        out = model(pixel_values=x, interpolate_pos_encoding=resize)
    name += ' with interpolate_pos_encoding' if resize else ''
    return Outputs(out.last_hidden_state, out.pooler_output, name + ' (pooler_output: the MAP head)')


def _clip(transformers: Any, folder: Path, cfg: Dict[str, Any], x: torch.Tensor, resize: bool) -> Outputs:
    """A CLIP folder's image tower: the un-normalised tokens, ``image_embeds`` where it has a projection, and the
    pooled [CLS] after ``post_layernorm``."""
    architectures = cfg.get('architectures') or []
    if cfg.get('model_type') == 'clip':
        cls = transformers.CLIPModel
    elif 'CLIPVisionModelWithProjection' in architectures:
        cls = transformers.CLIPVisionModelWithProjection
    else:
        cls = transformers.CLIPVisionModel
    model = _run_in_float32(cls.from_pretrained(str(folder), attn_implementation='eager').eval())
    vision = model.vision_model
    with torch.no_grad():
        out = vision(pixel_values=x, interpolate_pos_encoding=resize)
        if cls is transformers.CLIPModel:
            embeds = model.get_image_features(pixel_values=x, interpolate_pos_encoding=resize)
            embeds = getattr(embeds, 'pooler_output', embeds)
        elif cls is transformers.CLIPVisionModelWithProjection:
            embeds = model(pixel_values=x, interpolate_pos_encoding=resize).image_embeds
        else:
            embeds = None
    name = f'transformers {cls.__name__}.from_pretrained' + (' with interpolate_pos_encoding' if resize else '')
    return Outputs(out.last_hidden_state, embeds, name, pre_logits=out.pooler_output)
