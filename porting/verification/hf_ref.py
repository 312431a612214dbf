"""The transformers reference: the class the source folder declares (``config.json``'s ``architectures[0]``, the one
the readers accept) ``.from_pretrained`` on the folder, and the output that class returns: a classifier's logits, a
model's pooled output or embeddings, with its tokens."""
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn

from timm_vit_variants.checkpoints.detect import WRAPPED_PREFIXES
from timm_vit_variants.checkpoints.files import read_json
from timm_vit_variants.checkpoints.hf_beit import BEIT_MODEL_TYPES
from timm_vit_variants.checkpoints.hf_clip import CLIP_LAYOUTS, CLIP_MODEL_TYPES, clip_layout
from timm_vit_variants.memory import release_after_use

from .beit_ref import hf_beit_outputs
from .result import Check, NoReference, Outputs
from .streamed import as_float32

__all__ = ['hf_outputs', 'is_timm_wrapper_folder', 'timm_wrapper_outputs']

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
        stem = 'Data2VecVision' if cfg['model_type'] == 'data2vec-vision' else 'Beit'
        default = stem + ('ForImageClassification' if check.source.num_classes else 'Model')
        return hf_beit_outputs(_declared_class(_transformers(), cfg, default), folder, check, x)
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
        model, name = _load(transformers, folder, cfg, 'DINOv3ViTModel')
        with torch.no_grad():
            out = model(pixel_values=x)
        return Outputs(out.last_hidden_state, out.pooler_output, name)
    if cfg.get('model_type') in ('siglip', 'siglip_vision_model'):
        return _siglip(transformers, folder, cfg, x, target is not None)
    if cfg.get('model_type') in CLIP_MODEL_TYPES:
        return _clip(transformers, folder, cfg, x, target is not None)
    if cfg.get('model_type') == 'deit':
        return _deit(transformers, folder, cfg, x, target is not None)
    cls = _declared_class(transformers, cfg, 'ViTForImageClassification' if check.source.num_classes else 'ViTModel')
    classify = cls.__name__.endswith('ForImageClassification')
    # A bare ViTModel's pooler (Dense + tanh) is our pre-logits layer when the reader found one.
    kwargs = {'add_pooling_layer': bool(check.source.head.rep_size)} if cls is transformers.ViTModel else {}
    model = _run_in_float32(cls.from_pretrained(str(folder), attn_implementation='eager', **kwargs).eval())
    pooled = None
    resize = {'interpolate_pos_encoding': True} if target is not None else {}
    with torch.no_grad():
        if classify:
            tower = model.ijepa if hasattr(model, 'ijepa') else model.vit
            feats = tower(pixel_values=x, **resize).last_hidden_state
            logits = model(pixel_values=x, **resize).logits
        else:
            out = model(pixel_values=x, **resize)
            feats, logits, pooled = out.last_hidden_state, None, getattr(out, 'pooler_output', None)
    name = f'transformers {cls.__name__}.from_pretrained' + (' with interpolate_pos_encoding' if resize else '')
    return Outputs(feats, logits, name, pre_logits=pooled)


def is_timm_wrapper_folder(path: str) -> bool:
    """Whether ``path`` is a folder transformers' ``TimmWrapperModel`` (or its classifier) saved: a timm model that
    the timm reader reads under ``timm_model.``."""
    config = Path(path) / 'config.json'
    return config.is_file() and read_json(str(config)).get('model_type') in WRAPPED_PREFIXES


def timm_wrapper_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The wrapper class the folder declares, at the source geometry (it runs its timm model as built): the classifier's
    logits and its timm model's tokens, or ``TimmWrapperModel``'s tokens and pooled output."""
    if check.target is not None:
        raise NoReference("transformers' TimmWrapperModel runs its timm model as built, with no resize of its own")
    import timm_vit_variants  # noqa: F401  (a wrapped simple_vit model needs the plugin)

    folder = Path(check.path)
    cfg = read_json(str(folder / 'config.json'))
    model, name = _load(_transformers(), folder, cfg, 'TimmWrapperForImageClassification' if check.source.num_classes
                        else 'TimmWrapperModel')
    with torch.no_grad():
        if type(model).__name__.endswith('ForImageClassification'):
            return Outputs(model.timm_model.forward_features(x), model(pixel_values=x).logits, name)
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output, name)


def _dinov2(transformers: Any, folder: Path, cfg: Dict[str, Any], x: torch.Tensor) -> Outputs:
    """A DINOv2 folder: its model resizes the table itself at every input size; the pooler is the normed [CLS]."""
    model, name = _load(transformers, folder, cfg, 'Dinov2WithRegistersModel' if
                        cfg['model_type'] == 'dinov2_with_registers' else 'Dinov2Model')
    with torch.no_grad():
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output, name)


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
    """A SigLIP 2 folder's class on ``x`` patchified (any grid: its table is resized per image) and on the
    mixed-size NaFlex batch: a tower's tokens and MAP-pooled embedding, or a classifier's logits and masked mean."""
    check.require_own_resize('transformers', 'flexi', "SigLIP 2's")
    model, name = _load(transformers, folder, cfg, 'Siglip2Model' if cfg.get('model_type') == 'siglip2' else
                        'Siglip2VisionModel')
    classifier = hasattr(model, 'classifier')
    tower = model.vision_model if type(model).__name__ == 'Siglip2Model' else model

    def run(**inputs: Any) -> Outputs:
        if classifier:
            return _classified(model, name + ' on spatial_shapes', **inputs)
        with torch.no_grad():
            out = tower(**inputs)
        return Outputs(out.last_hidden_state, out.pooler_output, name + ' (spatial_shapes; pooler_output: the MAP '
                       'head)')

    result = run(**_patchify(x, check.source.patch_size))
    if mixed is not None:
        valid = mixed['patch_valid']
        grids = torch.stack([mixed['patch_coord'][i][row].amax(0) + 1 for i, row in enumerate(valid)])
        laid = run(pixel_values=mixed['patches'], pixel_attention_mask=valid.long(), spatial_shapes=grids)
        result.mixed_features = laid.features[valid]
        result.mixed_pooled = laid.logits if not classifier else laid.pre_logits
    return result


def _siglip(transformers: Any, folder: Path, cfg: Dict[str, Any], x: torch.Tensor, resize: bool) -> Outputs:
    """A SigLIP folder's class: a tower's post-LayerNorm tokens and MAP-pooled embedding, or a classifier's logits
    (and the mean its classifier reads)."""
    model, name = _load(transformers, folder, cfg, 'SiglipModel' if cfg.get('model_type') == 'siglip' else
                        'SiglipVisionModel')
    name += ' with interpolate_pos_encoding' if resize else ''
    if hasattr(model, 'classifier'):
        return _classified(model, name, pixel_values=x, interpolate_pos_encoding=resize)
    tower = model.vision_model if type(model).__name__ == 'SiglipModel' else model
    with torch.no_grad():
        out = tower(pixel_values=x, interpolate_pos_encoding=resize)
    return Outputs(out.last_hidden_state, out.pooler_output, name + ' (pooler_output: the MAP head)')


def _clip(transformers: Any, folder: Path, cfg: Dict[str, Any], x: torch.Tensor, resize: bool) -> Outputs:
    """A CLIP-layout folder's class (CLIP's, or that of a model in ``CLIP_LAYOUTS``): the un-normalised tokens and its
    image output (``*VisionModel``: the pooled [CLS] after ``post_layernorm``; ``*VisionModelWithProjection``:
    ``image_embeds``; the two-tower ``*Model``: ``get_image_features``), with the pooled [CLS] its projection reads."""
    _, (stem, *_) = clip_layout(cfg.get('model_type'))
    model, name = _load(transformers, folder, cfg, stem + ('Model' if cfg.get('model_type') in CLIP_LAYOUTS else
                                                           'VisionModel'))
    name += ' with interpolate_pos_encoding' if resize else ''
    inputs = dict(pixel_values=x, interpolate_pos_encoding=resize)
    kind = type(model).__name__[len(stem):]
    if kind == 'ForImageClassification':
        return _classified(model, name, **inputs)
    if kind == 'VisionModel':
        with torch.no_grad():
            out = model(**inputs)
        return Outputs(out.last_hidden_state, out.pooler_output, name + ' (pooler_output: the normed [CLS])')
    if kind == 'VisionModelWithProjection':
        out, seen = _forward_seen(lambda: model(**inputs), {'head': model.visual_projection})
        return Outputs(out.last_hidden_state, out.image_embeds, name, pre_logits=seen['head'][0])
    out, seen = _forward_seen(lambda: model.get_image_features(**inputs),
                              {'tower': model.vision_model, 'head': model.visual_projection})
    return Outputs(seen['tower'][1][0], getattr(out, 'pooler_output', out),
                   name + '.get_image_features', pre_logits=seen['head'][0])


def _deit(transformers: Any, folder: Path, cfg: Dict[str, Any], x: torch.Tensor, resize: bool) -> Outputs:
    """A DeiT folder's class: the normed tokens, and ``DeiTForImageClassificationWithTeacher``'s logits (the mean of
    its two classifiers)."""
    model, name = _load(transformers, folder, cfg, 'DeiTModel')
    name += ' with interpolate_pos_encoding' if resize else ''
    if type(model).__name__ == 'DeiTModel':
        with torch.no_grad():
            return Outputs(model(pixel_values=x, interpolate_pos_encoding=resize).last_hidden_state, None, name)
    out, seen = _forward_seen(lambda: model(pixel_values=x, interpolate_pos_encoding=resize), {'tower': model.deit})
    return Outputs(seen['tower'][1].last_hidden_state, out.logits, name)


def _load(transformers: Any, folder: Path, cfg: Dict[str, Any], default: str) -> Tuple[Any, str]:
    """The class the folder declares (``architectures[0]``, else ``default``) loaded from it, in float32, and its
    name: the reference is the class the folder was saved from, whose output the written folder must give."""
    cls = _declared_class(transformers, cfg, default)
    model = _run_in_float32(cls.from_pretrained(str(folder), attn_implementation='eager').eval())
    return model, f'transformers {cls.__name__}.from_pretrained'


def _declared_class(transformers: Any, cfg: Dict[str, Any], default: str) -> Any:
    """The transformers class ``config.json`` declares (``architectures[0]``), else ``default``."""
    architectures = cfg.get('architectures')
    name = architectures[0] if isinstance(architectures, list) and architectures and \
        isinstance(architectures[0], str) else default
    cls = getattr(transformers, name, None)
    if not isinstance(cls, type):
        raise NoReference(f'transformers has no class {name!r} (config.json architectures)')
    return cls


def _forward_seen(run: Callable[[], Any], modules: Dict[str, nn.Module]) -> Tuple[Any, Dict[str, Tuple[Any, Any]]]:
    """``run()`` without gradients and, from that one forward, (first input, output) of each of ``modules``: what
    a class computes inside its own forward (the pooled vector its head reads), taken as it ran."""
    seen: Dict[str, Tuple[Any, Any]] = {}

    def hook(key: str) -> Callable[..., None]:
        def record(module: nn.Module, args: tuple, out: Any) -> None:  # returns None: the output is left as it is
            seen.setdefault(key, (args[0] if args else None, out))
        return record

    handles = [module.register_forward_hook(hook(key)) for key, module in modules.items()]
    try:
        with torch.no_grad():
            out = run()
    finally:
        for handle in handles:
            handle.remove()
    return out, seen


def _classified(model: Any, name: str, **inputs: Any) -> Outputs:
    """A ``*ForImageClassification`` of a tower (SigLIP, SigLIP 2, CLIP): the tower's tokens, the logits and the mean
    its classifier reads."""
    out, seen = _forward_seen(lambda: model(**inputs), {'tower': model.vision_model, 'head': model.classifier})
    return Outputs(seen['tower'][1][0], out.logits,
                   name + ' (logits: its classifier on the mean of the tokens)', pre_logits=seen['head'][0])
