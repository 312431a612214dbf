"""The EVA-02 reference: timm's own ``Eva``, built as its ``eva02_*`` entries build it, at the grid checked.

BAAI's files (``{'module': ...}`` or ``{'model': ...}``) go through timm's own loading (``eva.checkpoint_filter_fn``:
``w12``/``w1``/``w2``/``ffn_ln``/``w3`` renamed, the q/v biases placed, the stored RoPE tables dropped); timm's
``eva02_*`` folders are built by timm itself (``local-dir:``). What is done by hand, because timm does it otherwise:

* a MIM pretraining file's ``mask_token`` and ``lm_head`` are dropped before timm's filter, as EVA's fine-tuning load
  drops them; timm would otherwise move the final ``norm`` into a fresh-model ``fc_norm`` (a fine-tuning start),
  which is not what the pretraining model computes;
* at the stored grid, a BAAI file's own RoPE tables (``freqs_cos``/``freqs_sin``, persistent buffers EVA's code loads
  into its one shared RoPE module, where the last block's copy is the one left) replace the ones timm computes, as
  they replace the constructor's in EVA's code: the converter reads the pretraining grid from those tables, and the
  check does not share that reading;
* at a target geometry, a BAAI file's table is resized as EVA-02's ``run_class_finetuning.py`` writes it (bicubic,
  ``align_corners=False``, no antialias, the [CLS] row kept; timm antialiases), transcribed, and handed to timm at
  that size. timm computes the RoPE for the grid itself (as EVA's constructor does), scaled to its
  ``ref_feat_shape``.

The check therefore shares with the converter the table's resize rule (transcribed in both), the pretraining grid
the RoPE positions are scaled to at another grid than the stored one (at every grid for a file without RoPE tables:
16x16, a fact of the family), and the head count, which no file records. That the whole matches EVA-02's own code
at three grids is shown by ``tests/test_eva02.py`` against outputs EVA's code wrote (tests/data/reference_eva02).
"""
from functools import partial
from pathlib import Path
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_vit_variants.checkpoints.eva02 import is_eva02_architecture
from timm_vit_variants.checkpoints.files import SINGLE_WEIGHT_FILES, read_json
from timm_vit_variants.checkpoints.pickle_store import read_weights
from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.dino_models import eva_rope_args
from timm_vit_variants.parts import Learned, Rope

from .dinov3_ref import load_eva
from .result import Check, NoReference, Outputs, ReferenceFailed
from .timm_ref import timm_weights

__all__ = ['eva02_outputs', 'eva02_table', 'eva02_timm_model']

_MIM_ONLY = ('mask_token', 'lm_head.weight', 'lm_head.bias')


def eva02_timm_model(config: SimpleViTConfig, rows: int, cols: int, dynamic: bool = False) -> nn.Module:
    """timm's ``Eva`` as its ``eva02_*`` entries build it, with ``config``'s dimensions, at rows x cols, on the meta
    device (``swiglu_mlp``; ``scale_mlp`` and split qkv for B/L; ``ref_feat_shape`` the pretraining grid)."""
    from timm.layers import LayerNorm
    from timm.models.eva import Eva

    dim, patch, ref = config.embed_dim, config.patch_size, config.position(Rope).ref_grid
    with torch.device('meta'):
        return Eva(
            img_size=(rows * patch[0], cols * patch[1]), patch_size=patch, in_chans=config.in_chans,
            num_classes=config.num_classes, global_pool=config.head.pool.kind, embed_dim=dim, depth=config.depth,
            num_heads=config.num_heads, qkv_bias=config.block.qkv_bias, qkv_fused=config.block.qkv_fused,
            mlp_ratio=(config.block.mlp_dim + 0.5) / dim,  # EvaBlock takes int(D * ratio): the exact width
            swiglu_mlp=True, scale_mlp=config.block.mlp_norm, swiglu_align_to=1 if config.block.mlp == 'swiglu' else 0,
            init_values=config.block.init_values, use_rot_pos_emb=True, ref_feat_shape=(ref, ref),
            **eva_rope_args(config.position(Rope).kind, config.position(Rope).theta),
            use_fc_norm=config.head.fc_norm, dynamic_img_size=dynamic, norm_layer=partial(LayerNorm, eps=config.block.norm_eps))


def eva02_table(table: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """EVA-02's ``run_class_finetuning.py`` resize of a (1, 1 + M*M, D) table (bicubic, ``align_corners=False``, no
    antialias, the [CLS] row kept), transcribed; the stored table at its own grid."""
    count, dim = table.shape[1] - 1, table.shape[2]
    side = int(count ** 0.5)
    if side * side != count:
        raise NoReference(f"EVA-02's fine-tuning resizes only a square table; this one has {count} patch rows")
    if (rows, cols) == (side, side):
        return table
    grid = table[:, 1:].reshape(-1, side, side, dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid.float(), size=(rows, cols), mode='bicubic', align_corners=False).to(table.dtype)
    return torch.cat([table[:, :1], grid.permute(0, 2, 3, 1).flatten(1, 2)], dim=1)


def _baai_model(check: Check, rows: int, cols: int) -> Tuple[nn.Module, bool, Optional[str]]:
    """timm's Eva holding a BAAI file at rows x cols, whether the file was a MIM pretraining one, and the stored RoPE
    table it runs (at the stored grid; None: timm's own)."""
    from timm.models.eva import checkpoint_filter_fn

    stored = read_weights(check.path, check.weights_key)  # the entry the converter read
    state = {k: v for k, v in stored.items() if k not in _MIM_ONLY}
    table = eva02_table(state.pop('pos_embed'), rows, cols)
    model = eva02_timm_model(check.source, rows, cols)
    state = checkpoint_filter_fn(state, model)
    state['pos_embed'] = table
    model = load_eva(model, state)
    # EVA's load_state_dict fills its shared RoPE module from every copy in module order: the last block's stays
    own = next((k for k in (f'blocks.{check.source.depth - 1}.attn.rope.freqs_cos', 'rope.freqs_cos')
                if k in stored), None) if (rows, cols) == check.source.grid_size else None
    if own is not None:
        cos, sin = stored[own], stored[own[:-3] + 'sin']
        if cos.shape != sin.shape or 2 * cos.shape[-1] != model.rope.pos_embed.shape[-1] or \
                cos.shape[0] != model.rope.pos_embed.shape[0]:
            raise ReferenceFailed(f"EVA's code would not load the file's {own} {tuple(cos.shape)} into a "
                                  f'{rows}x{cols} model of {model.rope.pos_embed.shape[-1] // 2}-wide heads')
        model.rope.pos_embed = torch.cat([sin, cos], dim=-1).float()  # timm's [sin | cos] layout
    return model, any(k in stored for k in _MIM_ONLY), own


def eva02_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The source run by timm at the source geometry or at the target one (an EVA-02 model takes no NaFlex batch:
    ``mixed`` is not run)."""
    import timm

    source, runs_at = check.source, check.runs_at
    if source.img_size[0] != source.img_size[1] or runs_at.img_size[0] != runs_at.img_size[1]:
        raise NoReference('EVA-02 takes one integer image size: it defines no non-square grid')
    rows, cols = runs_at.grid_size
    folder = Path(check.path)
    if getattr(source.position(Learned), 'resample', None) == 'deit':  # BAAI's file
        check.require_own_resize('EVA-02', 'deit', "EVA-02's run_class_finetuning")
        model, mim, own = _baai_model(check, rows, cols)
        resized = check.target is not None
        grid = f'the {source.position(Rope).ref_grid}x{source.position(Rope).ref_grid} pretraining grid of the RoPE, '
        name = ("timm Eva (eva02_* blocks) + timm's eva checkpoint_filter_fn" +
                (', the MIM-only mask_token/lm_head dropped by hand' if mim else '') +
                (f", the file's own RoPE tables ({own[:-3]}cos/sin, as EVA's code loads them)" if own else '') +
                (", the table resized as EVA-02's run_class_finetuning (bicubic, no antialias, transcribed)"
                 if resized else '') +
                f' (shared with the converter: {"that resize, " if resized else ""}{"" if own else grid}'
                'the head count)')
    else:  # timm's eva02_* port, resized at run time by timm's own rule
        check.require_own_resize('timm', 'timm')
        if folder.is_dir():
            config = read_json(str(folder / 'config.json')) if (folder / 'config.json').is_file() else {}
            files = [folder / n for n in SINGLE_WEIGHT_FILES if (folder / n).is_file()]
            if not is_eva02_architecture(config.get('architecture')) or not files:
                raise NoReference("timm loads an eva02_* folder through its config.json and one model.safetensors")
            with torch.device('meta'):
                model = timm.create_model(f'local-dir:{folder}', pretrained=False, dynamic_img_size=True)
            name = f"timm.create_model('local-dir:...', dynamic_img_size=True) ({config['architecture']})"
        else:
            rows0, cols0 = source.grid_size
            model = eva02_timm_model(source, rows0, cols0, dynamic=True)
            name = ('timm Eva (eva02_* blocks, dynamic_img_size) + the state dict loaded strictly (shared with the '
                    f'converter: the head count and the {source.position(Rope).ref_grid}x{source.position(Rope).ref_grid} RoPE grid a '
                    'state dict does not record)')
        model = load_eva(model, timm_weights(folder if not folder.is_dir() else files[0], check.weights_key))
    x = x[..., :rows * runs_at.patch_size[0], :cols * runs_at.patch_size[1]]
    with torch.no_grad():
        feats = model.forward_features(x)
        logits = model.forward_head(feats)
    return Outputs(feats, logits, name)
