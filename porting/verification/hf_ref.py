"""The transformers reference: ``ViTForImageClassification`` / ``ViTModel.from_pretrained`` on the source folder."""
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch

from timm_vit_variants.checkpoints.files import read_json

from .result import NoReference, Outputs
from .timm_ref import pair

__all__ = ['hf_outputs']


def hf_outputs(path: str, model_args: Dict[str, Any], x: torch.Tensor,
               target: Optional[Tuple[Dict[str, Any], str]] = None) -> Outputs:
    """transformers itself; at a target geometry only through its own ``interpolate_pos_encoding``."""
    if target is not None:
        if pair(target[0].get('patch_size', 16)) != pair(model_args.get('patch_size', 16)):
            raise NoReference('transformers has no rule for a patch-size change')
        if any(s % p for s, p in zip(pair(target[0].get('img_size', 224)), pair(target[0].get('patch_size', 16)))):
            raise NoReference('transformers drops the pixels the patch does not divide, where this model pads them')
        if target[1] != 'hf':
            raise NoReference(f"the table was resized with the {target[1]!r} rule, not transformers' own")
    try:
        import transformers
    except ImportError:
        raise NoReference('transformers is not installed') from None
    transformers.utils.logging.disable_progress_bar()
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    cfg = read_json(str(folder / 'config.json')) if (folder / 'config.json').is_file() else {}
    classify = any('ForImageClassification' in a for a in cfg.get('architectures') or [])
    cls = transformers.ViTForImageClassification if classify else transformers.ViTModel
    # A bare ViTModel's pooler (Dense + tanh) is our pre-logits layer when the reader found one.
    kwargs = {} if classify else {'add_pooling_layer': bool(model_args.get('rep_size'))}
    model = cls.from_pretrained(str(folder), attn_implementation='eager', **kwargs).eval().float()
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
