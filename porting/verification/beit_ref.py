"""The BEiT references: timm's ``Beit`` for unilm files and timm ``beit*`` weights, transformers' own ``BeitModel`` /
``Data2VecVisionModel`` (and their ``ForImageClassification``) for transformers folders.

- **unilm and timm files** (``beit_outputs``): timm's ``Beit`` built with the file's arguments (per-block tables, or
  timm's ``use_shared_rel_pos_bias`` for a pretraining file's shared one), the file loaded through timm's own
  ``beit.checkpoint_filter_fn`` (``{'model': ...}`` unwrapped, ``relative_position_index`` dropped), strictly, after
  the masked-image-modelling parts (``mask_token``, ``lm_head``, ``cls_pt_*``) are dropped as our reader drops them.
  At the source geometry nothing else is shared. At a target geometry:
  - the tables: BEiT's rule (``rel_pos_resample='beit'``) is ``relpos_resize.beit_resize_table``, the reproduction
    of unilm's ``interp2d`` cubic resize that the converter uses too, so the check shares it (tests/test_beit.py
    shows it equal to unilm's own outputs at three grids); timm's rule (``'timm'``) is timm's own filter's resize,
    shared with nothing;
  - the absolute table: BEiT's ``interpolate_pos_embed`` (bicubic, ``align_corners=False``, no antialias, [CLS]
    kept: ``deit3_ref.deit_table``, a transcription shared with the converter), since timm's filter antialiases;
  - BEiT's rule knows square grids only, so a non-square target under it has no reference.
- **transformers folders** (``hf_beit_outputs``): ``from_pretrained`` at the source geometry. transformers resizes
  the tables bilinearly at run time, which is neither BEiT's rule nor timm's, so a target geometry has none.
"""
from functools import partial
from pathlib import Path
from typing import Dict, Optional

import torch
import torch.nn as nn

from timm_vit_variants.checkpoints.beit import MIM_ONLY
from timm_vit_variants.checkpoints.files import read_json
from timm_vit_variants.checkpoints.hf_beit import BEIT_MODEL_TYPES
from timm_vit_variants.parts import Learned, RelPos
from timm_vit_variants.relpos_resize import beit_resize_table

from .deit3_ref import deit_table
from .hf_ref import declared_class, hf_config, hf_model_type, transformers_module
from .result import Check, NoReference, Outputs
from .timm_ref import single_weight_file, timm_weights

__all__ = ['beit_outputs', 'hf_beit_outputs', 'is_hf_beit', 'is_timm_beit']

_SHARED = 'rel_pos_bias.relative_position_bias_table'
_TABLE = 'relative_position_bias_table'


def is_timm_beit(check: Check) -> bool:
    """Whether the source is a timm folder of an architecture timm's ``Beit`` builds (its ``config.json``'s
    ``architecture``; timm's ``beit3_*`` are ``VisionTransformer``s), not one of ours."""
    import timm
    from timm.models.beit import Beit

    config = Path(check.path) / 'config.json'
    if not config.is_file():
        return False
    arch = read_json(str(config)).get('architecture')
    return isinstance(arch, str) and timm.is_model(arch) and \
        timm.models.model_entrypoint(arch).__module__ == Beit.__module__


def _weights(path: Path, key: Optional[str]) -> Dict[str, torch.Tensor]:
    """The file's tensors (a folder's single weight file), its training checkpoint's entry ``key`` (the converter's)."""
    path = single_weight_file(path) if path.is_dir() else path
    return {k: v for k, v in timm_weights(path, key).items() if not MIM_ONLY.match(k)}


def beit_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """A unilm BEiT file or timm ``Beit`` weights run by timm's ``Beit`` at the geometry checked (no NaFlex batch)."""
    from timm.models.beit import Beit, checkpoint_filter_fn

    source, runs_at, target = check.source, check.runs_at, check.target
    rows, cols = runs_at.grid_size
    ape = source.position(Learned) is not None
    rule = runs_at.position(RelPos).resample
    if target is not None:
        check.require_own_resize('BEiT', 'deit' if ape else None, owner="BEiT's")
        if rule == 'beit' and rows != cols:
            raise NoReference(f"BEiT's table resize defines square grids only, and {rows}x{cols} is not one")
    state = _weights(Path(check.path), check.weights_key)
    shared = _SHARED in state
    (ph, pw), dim = runs_at.patch_size, source.embed_dim
    model = Beit(img_size=(rows * ph, cols * pw), patch_size=(ph, pw), in_chans=source.in_chans,
                 num_classes=source.num_classes, global_pool='avg' if source.head.fc_norm else 'token', embed_dim=dim,
                 depth=source.depth, num_heads=source.num_heads, qkv_bias=source.block.qkv_bias,
                 mlp_ratio=(source.block.mlp_dim + 0.5) / dim,
                 norm_layer=partial(nn.LayerNorm, eps=source.block.norm_eps),
                 init_values=source.block.init_values, use_abs_pos_emb=ape, use_rel_pos_bias=not shared,
                 use_shared_rel_pos_bias=shared, use_fc_norm=source.head.fc_norm)
    name = "timm Beit + timm's beit checkpoint_filter_fn"
    if target is not None:
        src_grid = source.grid_size
        if rule == 'beit':
            for key in [k for k in state if k.endswith(_TABLE)]:
                state[key] = beit_resize_table(state[key].float(), src_grid, (rows, cols))
            name += (", the tables resized by BEiT's rule as reproduced here (relpos_resize, shared with the "
                     "converter; equal to unilm's interp2d in tests/test_beit.py)")
        else:
            name += ", the tables resized by timm's own filter (linear)"
        if ape:
            state['pos_embed'] = deit_table(state['pos_embed'], rows, prefix=1)
            name += ", the absolute table as BEiT's interpolate_pos_embed (bicubic, no antialias; transcribed, shared)"
    state = checkpoint_filter_fn(state, model)
    model.load_state_dict(state, strict=True)
    model = model.float().eval()
    x = x[..., :rows * ph, :cols * pw]
    with torch.no_grad():
        feats = model.forward_features(x)
        logits = model.forward_head(feats)
    return Outputs(feats, logits, name)


def is_hf_beit(check: Check) -> bool:
    """Whether the source is a transformers BEiT or data2vec-vision folder."""
    return hf_model_type(check) in BEIT_MODEL_TYPES


def hf_beit_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """transformers' own BEiT / data2vec-vision class (the one the folder declares), at the source geometry only: its
    tokens and its logits, or its pooled output where it has a pooling layer."""
    folder, cfg = hf_config(check)
    stem = 'Data2VecVision' if cfg['model_type'] == 'data2vec-vision' else 'Beit'
    cls = declared_class(transformers_module(), cfg,
                         stem + ('ForImageClassification' if check.source.num_classes else 'Model'))
    if check.target is not None:
        raise NoReference('transformers resizes the relative position tables bilinearly at run time, which is '
                          "neither BEiT's rule nor timm's")
    # a *Model pools (its pooling layer: the mean's norm, or [CLS]) exactly when the folder was read with pooling
    pooling = {} if cls.__name__.endswith('ForImageClassification') else \
        {'add_pooling_layer': bool(check.source.head.pool.kind)}
    model = cls.from_pretrained(str(folder), attn_implementation='eager', **pooling).float().eval()
    backbone = next((getattr(model, n) for n in ('data2vec_vision', 'beit') if hasattr(model, n)), model)
    with torch.no_grad():
        out = backbone(pixel_values=x)
        logits = model(pixel_values=x).logits if backbone is not model else out.pooler_output
    return Outputs(out.last_hidden_state, logits, f'transformers {cls.__name__}.from_pretrained')
