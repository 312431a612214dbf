"""The timm reference: timm's own ``VisionTransformer`` and loaders, for timm sources and as the network the
Google ``.npz`` and target-geometry references run in."""
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_vit_variants.checkpoints.files import SINGLE_WEIGHT_FILES, read_json
from timm_vit_variants.checkpoints.pickle_store import read_weights
from timm_vit_variants.config import SimpleViTConfig, grid_for, is_family_architecture
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.geometry import RESAMPLE_OFFSETS, RESAMPLE_RULES
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits
from timm_vit_variants.parts import Factorized, Learned

from .result import NoReference, Outputs
from .streamed import as_float32, materialize

__all__ = ['fit_input', 'timm_equivalent', 'naflex_vit', 'PreLogitsHead', 'TimmReference',
           'timm_weights', 'timm_model', 'rebuild_buffers', 'timm_table']


# Input-side options and the values timm's VisionTransformer can express ('linear' is 'conv' computed as a matmul).
_TIMM_INPUT_SIDE = {'patch_embed': ('conv', 'linear'), 'patch_norm': (None,),
                    'grid_mode': ('pad', 'strict', 'crop'), 'pos_embed': ('sincos', 'learn', 'none'),
                    'global_pool': ('avg', 'token', 'map', '')}


def fit_input(x: torch.Tensor, config: SimpleViTConfig) -> torch.Tensor:
    """``x`` padded right/bottom or cropped to whole patches, as the model of ``config`` treats its input."""
    (ph, pw), pads = config.patch_size, config.dynamic_img_pad
    gh, gw = grid_for(tuple(x.shape[-2:]), config.patch_size, pads)
    if not pads:
        return x[..., :gh * ph, :gw * pw]
    return F.pad(x, (0, gw * pw - x.shape[-1], 0, gh * ph - x.shape[-2]))


def timm_equivalent(config: SimpleViTConfig, num_classes: Optional[int] = None, storage: bool = True) -> nn.Module:
    """A timm ``VisionTransformer`` computing the same function as ``SimpleVisionTransformer(config)``.

    big_vision 'gap' (norm all tokens, then average) is timm's ``fc_norm=False`` + ``global_pool='avg'``;
    'map' is timm's own ``AttentionPoolLatent``; 'crop' is timm's VALID patch conv at the nominal size;
    a table without a cls slot is ``no_embed_class=True``; a sin-cos table becomes a learned one; DeiT's
    distillation token is timm's ``VisionTransformerDistilled``. timm has no pre-logits layer: give
    ``num_classes=0`` and apply ``explicit_head``. Built on the meta device and
    left uninitialised (every parameter is loaded afterwards; one that is not makes the comparison fail
    loudly), which saves seconds of random init on large models.
    """
    from timm.models import VisionTransformerDistilled
    from timm.models.vision_transformer import VisionTransformer

    if config.tokens.dist and (config.head.pool.kind != 'token' or not config.num_prefix_slots):
        raise NoReference("timm's VisionTransformerDistilled reads its two tokens with 'token' pooling and gives both "
                          'a table slot')
    flat = config.to_flat()
    beyond = [f'{name}={flat[name]!r}' for name, same in _TIMM_INPUT_SIDE.items() if flat[name] not in same]
    if beyond:
        raise NoReference(f"timm's VisionTransformer has no equivalent of {', '.join(beyond)}")
    if config.patch.bias == config.tokens.pre_norm:
        raise NoReference("timm's patch conv has a bias exactly when there is no pre-norm (norm_pre)")
    from timm.layers import Mlp, SwiGLUPacked

    embed_dim, mlp_dim = config.embed_dim, config.block.mlp_dim
    swiglu = config.block.mlp == 'swiglu_packed'
    hidden = 2 * mlp_dim if swiglu else mlp_dim  # SwiGLUPacked's fc1 holds both halves
    with torch.device('meta'):
        model = (VisionTransformerDistilled if config.tokens.dist else VisionTransformer)(
            img_size=config.img_size,
            patch_size=config.patch_size,
            in_chans=config.in_chans,
            num_classes=config.num_classes if num_classes is None else num_classes,
            global_pool=config.head.pool.kind,
            embed_dim=embed_dim,
            depth=config.depth,
            num_heads=config.num_heads,
            mlp_ratio=(hidden + 0.5) / embed_dim,  # timm takes int(dim * ratio): this lands on the width exactly
            mlp_layer=SwiGLUPacked if swiglu else Mlp,
            init_values=config.block.init_values,
            reg_tokens=config.tokens.registers,
            qkv_bias=config.block.qkv_bias,
            class_token=config.tokens.cls,
            pos_embed='none' if config.flat_pos_embed == 'none' else 'learn',
            no_embed_class=not config.num_prefix_slots,
            fc_norm=config.head.fc_norm,
            final_norm=config.head.final_norm,
            pre_norm=config.tokens.pre_norm,
            pool_include_prefix=getattr(config.head.pool, 'include_prefix', False),
            scale_attn_norm=config.block.attn_norm,
            scale_mlp_norm=config.block.mlp_norm,
            act_layer=config.block.act,
            norm_layer=partial(nn.LayerNorm, eps=config.block.norm_eps),
        )
    if model.blocks[0].mlp.fc1.out_features != hidden:
        raise ViTVariantsError(f'timm cannot express an MLP width of {mlp_dim} for width {embed_dim}')
    if not config.head.bias and isinstance(model.head, nn.Linear):  # a CLIP projection
        model.head = nn.Linear(model.head.in_features, model.head.out_features, bias=False, device='meta')
    # storage on a scratch mapping for a loader that copies into it; left on the meta device for one that assigns
    return (materialize(model) if storage else model).eval()


def naflex_vit(config: SimpleViTConfig) -> nn.Module:
    """timm's ``NaFlexVit`` with the dimensions of ``config``, its table resized per image as our rule does (the
    F.interpolate call of the rule's mode, corners and antialias: ``'flexi'``, big_vision's, is bilinear,
    antialiased, half-pixel), or its factorised tables. Built on the meta device, uninitialised, as
    ``timm_equivalent``."""
    from timm.models.naflexvit import NaFlexVit, NaFlexVitCfg

    factorized, learned = config.position(Factorized), config.position(Learned)
    if factorized is not None:
        table = dict(pos_embed='factorized', pos_embed_grid_size=factorized.table_grid,
                     pos_embed_ar_preserving=factorized.ar_preserving)
    else:
        rule = getattr(learned, 'resample', None)
        if rule not in RESAMPLE_RULES or rule in RESAMPLE_OFFSETS:
            raise NoReference(f"timm's NaFlexVit has no {rule!r} table resize")
        mode, corners, antialias = RESAMPLE_RULES[rule]
        table = dict(pos_embed_grid_size=config.grid_size, pos_embed_interp_mode=mode,
                     pos_embed_align_corners=bool(corners), pos_embed_antialias=antialias,
                     pos_embed_ar_preserving=learned.ar_preserving)
    cfg = NaFlexVitCfg(
        patch_size=config.patch_size,
        embed_dim=config.embed_dim,
        depth=config.depth,
        num_heads=config.num_heads,
        mlp_ratio=(config.block.mlp_dim + 0.5) / config.embed_dim,
        qkv_bias=config.block.qkv_bias,
        act_layer=config.block.act,
        global_pool=config.head.pool.kind,
        class_token=config.tokens.cls,
        **table,
    )
    with torch.device('meta'):
        model = NaFlexVit(cfg, in_chans=config.in_chans, num_classes=config.num_classes, img_size=config.img_size)
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.eps = config.block.norm_eps
    return model


@dataclass
class PreLogitsHead:
    """``head(tanh(pre_logits(pooled)))``, the layer timm does not have, in float64 numpy; kernels are (in, out)."""
    pre_kernel: np.ndarray
    pre_bias: np.ndarray
    head_kernel: Optional[np.ndarray] = None
    head_bias: Optional[np.ndarray] = None

    @classmethod
    def pop_from(cls, state: Dict[str, torch.Tensor]) -> 'PreLogitsHead':
        """Take our ``pre_logits.fc`` and ``head`` (torch Linear, (out, in)) out of a state dict."""
        def kernel(key: str) -> Optional[np.ndarray]:
            value = state.pop(key, None)
            return None if value is None else value.detach().double().numpy().T

        def bias(key: str) -> Optional[np.ndarray]:
            value = state.pop(key, None)
            return None if value is None else value.detach().double().numpy()

        return cls(kernel('pre_logits.fc.weight'), bias('pre_logits.fc.bias'), kernel('head.weight'),
                   bias('head.bias'))

    def __call__(self, pooled: torch.Tensor) -> torch.Tensor:
        out = np.tanh(pooled.numpy().astype(np.float64) @ self.pre_kernel + self.pre_bias)
        if self.head_kernel is not None:
            out = out @ self.head_kernel + self.head_bias
        return torch.from_numpy(out.astype(np.float32))


@dataclass
class TimmReference:
    """A timm network standing for the source, plus the pre-logits layer it cannot express (if any)."""
    model: nn.Module
    name: str
    head: Optional[PreLogitsHead] = None
    naflex: bool = False  # a timm NaFlexVit, which also runs the mixed-size NaFlex batch

    def vit_state(self) -> Dict[str, torch.Tensor]:
        """The network's weights under a timm ``VisionTransformer``'s names (a ``NaFlexVit``'s Linear patch kernel as
        a conv), to rebuild it as one."""
        state = dict(self.model.state_dict())
        if not self.naflex:
            return state
        kernel = state.pop('embeds.proj.weight')
        (ph, pw), chans = self.model.embeds.patch_size, self.model.embeds.in_chans
        state['patch_embed.proj.weight'] = kernel.reshape(kernel.shape[0], ph, pw, chans).permute(0, 3, 1, 2)
        state['patch_embed.proj.bias'] = state.pop('embeds.proj.bias')
        table = state.pop('embeds.pos_embed')
        state['pos_embed'] = table.reshape(1, -1, table.shape[-1])
        return state

    def outputs(self, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
        with torch.no_grad():
            feats = self.model.forward_features(x)
            if self.head is not None:
                logits = self.head(self.model.forward_head(feats, pre_logits=True))
                return Outputs(feats, logits, self.name, note='logits via an explicit numpy '
                               "head(tanh(pre_logits(x))) (timm has no pre-logits layer)")
            # Without a classifier this is the pooled embedding (a MAP head's output, say), compared too.
            logits = self.model.forward_head(feats)
            out = Outputs(feats, logits, self.name)
            if self.naflex and mixed is not None:
                laid = self.model.forward_features(**mixed)
                out.mixed_features = laid['patches'][:, self.model.num_prefix_tokens:][mixed['patch_valid']]
                # the pooled feature before any classifier, as ours is taken (compare.our_outputs)
                out.mixed_pooled = self.model.forward_head(laid['patches'], pre_logits=True,
                                                           patch_valid=mixed['patch_valid'])
        return out


def single_weight_file(folder: Path) -> Path:
    """A folder's one weight file (the first of ``SINGLE_WEIGHT_FILES`` it holds); without one, no reference."""
    found = next((folder / n for n in SINGLE_WEIGHT_FILES if (folder / n).is_file()), None)
    if found is None:
        raise NoReference('the folder holds no single weight file (model.safetensors, pytorch_model.bin, ...)')
    return found


def timm_weights(file: Path, key: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """A weight file as tensors viewing the file where the format allows (safetensors, zip pickles); of a training
    checkpoint, the entry ``key`` the converter read (``Check.weights_key``: EMA or not, chosen once)."""
    if file.suffix == '.safetensors':
        from safetensors import safe_open

        with safe_open(str(file), framework='pt') as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    return read_weights(str(file), key)


def rebuild_buffers(model: nn.Module) -> None:
    """The computed (non-persistent) buffers a meta-built model leaves on the meta device, rebuilt on the CPU: ours
    by its own ``init_non_persistent_buffers``, timm's module by module, as timm's ``reinit_non_persistent_buffers``
    walks them (EVA's fixed zero k bias, say)."""
    if hasattr(model, 'init_non_persistent_buffers'):
        model.init_non_persistent_buffers()
        return
    for module in model.modules():
        meta = [name for name, buffer in module.named_buffers(recurse=False) if buffer.is_meta]
        if meta and hasattr(module, 'init_non_persistent_buffers'):
            for name in meta:
                setattr(module, name, torch.empty_like(getattr(module, name), device='cpu'))
            module.init_non_persistent_buffers()


def timm_model(path: str, config: SimpleViTConfig, limits: Limits = DEFAULT_LIMITS,
               weights_key: Optional[str] = None) -> TimmReference:
    """timm's network, built from config.json (``local-dir:``) or as the equivalent VisionTransformer.

    The weights are assigned, not copied, into a meta-device model, so the reference costs the file
    once in memory rather than a state dict plus a model. A simple_vit folder is built under ``limits``, the ones
    its source was opened under; a training checkpoint's weights are its entry ``weights_key``, the converter's.
    """
    import timm

    folder = Path(path)
    head = None
    if folder.is_dir():
        if not (folder / 'config.json').is_file():
            raise NoReference('timm loads a folder only through its config.json, and this folder has none')
        files = [folder / name for name in SINGLE_WEIGHT_FILES if (folder / name).is_file()]
        if not files:
            raise NoReference('timm can only load an unsharded Hub folder (config.json + model.safetensors)')
        import timm_vit_variants  # noqa: F401  (simple_vit folders need the plugin)
        ours = is_family_architecture(str(read_json(str(folder / 'config.json'), limits).get('architecture')))
        with torch.device('meta'):
            model = timm.create_model(f'local-dir:{folder}', pretrained=False, **({'limits': limits} if ours else {}))
        state, name = timm_weights(files[0], weights_key), "timm.create_model('local-dir:...') + its weights"
    else:
        state = timm_weights(folder, weights_key)
        if 'embeds.proj.weight' in state:  # a NaFlexVit state dict
            model, name = naflex_vit(config), 'timm NaFlexVit + timm load_state_dict'
        else:
            if config.head.rep_size:
                head = PreLogitsHead.pop_from(state)
            model = timm_equivalent(config, num_classes=0 if head is not None else None, storage=False)  # assigned
            name = f'timm {type(model).__name__} + timm load_state_dict'
    model.load_state_dict(state, strict=True, assign=True)
    rebuild_buffers(model)
    if any(p.dtype != torch.float32 for p in model.parameters()):  # half-precision weights run upcast, as ours do
        model, name = as_float32(model), f'{name} (weights upcast to float32)'
    return TimmReference(model.eval(), name, head, naflex=hasattr(model, 'embeds'))


def timm_table(table: torch.Tensor, source_grid: Tuple[int, int], target_grid: Tuple[int, int],
               prefix: int) -> torch.Tensor:
    """timm's own table resize (``resample_abs_pos_embed``: bicubic, antialiased), the prefix rows kept."""
    from timm.layers import resample_abs_pos_embed

    return resample_abs_pos_embed(table, list(target_grid), list(source_grid), num_prefix_tokens=prefix)
