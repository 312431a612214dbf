"""The transformers reference of a CLIP-layout folder (CLIP's, or a model's in ``CLIP_LAYOUTS``): the class the
folder declares, with the output its projection or classifier reads."""
from typing import Dict, Optional

import torch

from timm_vit_variants.checkpoints.hf_clip import CLIP_LAYOUTS, CLIP_MODEL_TYPES, clip_layout

from .hf_ref import classified, forward_seen, hf_config, hf_model_type, load, transformers_at
from .result import Check, Outputs

__all__ = ['is_hf_clip', 'hf_clip_outputs']


def is_hf_clip(check: Check) -> bool:
    """Whether the source is a CLIP-layout folder (``CLIP_MODEL_TYPES``)."""
    return hf_model_type(check) in CLIP_MODEL_TYPES


def hf_clip_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The folder's class: the un-normalised tokens and its image output (``*VisionModel``: the pooled [CLS] after
    ``post_layernorm``; ``*VisionModelWithProjection``: ``image_embeds``; the two-tower ``*Model``:
    ``get_image_features``), with the pooled [CLS] its projection reads."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    resize = check.target is not None
    _, (stem, *_) = clip_layout(cfg.get('model_type'))
    model, name = load(transformers, folder, cfg, stem + ('Model' if cfg.get('model_type') in CLIP_LAYOUTS else
                                                          'VisionModel'))
    name += ' with interpolate_pos_encoding' if resize else ''
    inputs = dict(pixel_values=x, interpolate_pos_encoding=resize)
    kind = type(model).__name__[len(stem):]
    if kind == 'ForImageClassification':
        return classified(model, name, **inputs)
    if kind == 'VisionModel':
        with torch.no_grad():
            out = model(**inputs)
        return Outputs(out.last_hidden_state, out.pooler_output, name + ' (pooler_output: the normed [CLS])')
    if kind == 'VisionModelWithProjection':
        out, seen = forward_seen(lambda: model(**inputs), {'head': model.visual_projection})
        return Outputs(out.last_hidden_state, out.image_embeds, name, pre_logits=seen['head'][0])
    out, seen = forward_seen(lambda: model.get_image_features(**inputs),
                             {'tower': model.vision_model, 'head': model.visual_projection})
    return Outputs(seen['tower'][1][0], getattr(out, 'pooler_output', out),
                   name + '.get_image_features', pre_logits=seen['head'][0])
