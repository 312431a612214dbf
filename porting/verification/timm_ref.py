"""The timm reference: timm's own ``VisionTransformer`` and loaders, for timm sources and as the network the
Google ``.npz`` and target-geometry references run in."""
import zipfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_vit_variants.checkpoints.files import SINGLE_WEIGHT_FILES
from timm_vit_variants.errors import ViTVariantsError

from .result import NoReference, Outputs
from .streamed import as_float32, materialize

__all__ = ['pair', 'grid', 'fit_input', 'timm_equivalent', 'naflex_vit', 'PreLogitsHead', 'TimmReference',
           'timm_weights', 'timm_model']

# How timm's NaFlexVit resizes its table per image, for each of our resample rules that it can express.
_NAFLEX_INTERP = {'flexi': 'bilinear', 'timm': 'bicubic'}

# Input-side options and the values timm's VisionTransformer can express ('linear' is 'conv' computed as a matmul).
_TIMM_INPUT_SIDE = {'patch_embed': ('conv', 'linear'), 'patch_norm': (None,),
                    'grid_mode': ('pad', 'strict', 'crop'), 'pos_embed': ('sincos', 'learn', 'none'),
                    'global_pool': ('avg', 'token', 'map', '')}


def pair(v: Any) -> Tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[-1]))


def grid(model_args: Dict[str, Any]) -> Tuple[int, int]:
    """The token grid of ``model_args``: ceil division where the model pads, floor where it crops."""
    (h, w), (ph, pw) = pair(model_args.get('img_size', 224)), pair(model_args.get('patch_size', 16))
    if model_args.get('grid_mode') in ('crop', 'strict'):
        return h // ph, w // pw
    return -(-h // ph), -(-w // pw)


def fit_input(x: torch.Tensor, model_args: Dict[str, Any]) -> torch.Tensor:
    """``x`` padded right/bottom or cropped to whole patches, as the model of ``model_args`` treats its input."""
    (gh, gw), (ph, pw) = grid(dict(model_args, img_size=tuple(x.shape[-2:]))), pair(model_args.get('patch_size', 16))
    if model_args.get('grid_mode') in ('crop', 'strict'):
        return x[..., :gh * ph, :gw * pw]
    return F.pad(x, (0, gw * pw - x.shape[-1], 0, gh * ph - x.shape[-2]))


def timm_equivalent(model_args: Dict[str, Any], num_classes: Optional[int] = None) -> nn.Module:
    """A timm ``VisionTransformer`` computing the same function as ``SimpleVisionTransformer(**model_args)``.

    big_vision 'gap' (norm all tokens, then average) is timm's ``fc_norm=False`` + ``global_pool='avg'``;
    'map' is timm's own ``AttentionPoolLatent``; 'crop' is timm's VALID patch conv at the nominal size;
    a table without a cls slot is ``no_embed_class=True``; a sin-cos table becomes a learned one. timm has
    no pre-logits layer: give ``num_classes=0`` and apply ``explicit_head``. Built on the meta device and
    left uninitialised (every parameter is loaded afterwards; one that is not makes the comparison fail
    loudly), which saves seconds of random init on large models.
    """
    from timm.models.vision_transformer import VisionTransformer

    beyond = [f'{name}={model_args[name]!r}' for name, same in _TIMM_INPUT_SIDE.items()
              if model_args.get(name, same[0]) not in same]
    if beyond:
        raise NoReference(f"timm's VisionTransformer has no equivalent of {', '.join(beyond)}")
    if model_args.get('patch_bias', True) == model_args.get('pre_norm', False):
        raise NoReference("timm's patch conv has a bias exactly when there is no pre-norm (norm_pre)")
    from timm.layers import Mlp, SwiGLUPacked

    embed_dim = model_args['embed_dim']
    mlp_dim = model_args.get('mlp_dim') or 4 * embed_dim
    swiglu = model_args.get('mlp_layer') == 'swiglu_packed'
    hidden = 2 * mlp_dim if swiglu else mlp_dim  # SwiGLUPacked's fc1 holds both halves
    pos = model_args.get('pos_embed', 'sincos')
    class_token = bool(model_args.get('class_token', False))
    with torch.device('meta'):
        model = VisionTransformer(
            img_size=pair(model_args.get('img_size', 224)),
            patch_size=pair(model_args.get('patch_size', 16)),
            in_chans=model_args.get('in_chans', 3),
            num_classes=model_args.get('num_classes', 0) if num_classes is None else num_classes,
            global_pool=model_args.get('global_pool', 'avg'),
            embed_dim=embed_dim,
            depth=model_args['depth'],
            num_heads=model_args['num_heads'],
            mlp_ratio=(hidden + 0.5) / embed_dim,  # timm takes int(dim * ratio): this lands on the width exactly
            mlp_layer=SwiGLUPacked if swiglu else Mlp,
            init_values=model_args.get('init_values'),
            reg_tokens=model_args.get('reg_tokens', 0),
            qkv_bias=model_args.get('qkv_bias', True),
            class_token=class_token,
            pos_embed='none' if pos == 'none' else 'learn',
            no_embed_class=not (model_args.get('pos_embed_cls_slot', False) and class_token),
            fc_norm=bool(model_args.get('fc_norm', False)),
            pre_norm=bool(model_args.get('pre_norm', False)),
            act_layer=model_args.get('act_layer', 'gelu_tanh'),
            norm_layer=partial(nn.LayerNorm, eps=model_args.get('norm_eps', 1e-6)),
        )
    if model.blocks[0].mlp.fc1.out_features != hidden:
        raise ViTVariantsError(f'timm cannot express an MLP width of {mlp_dim} for width {embed_dim}')
    if not model_args.get('head_bias', True) and isinstance(model.head, nn.Linear):  # a CLIP projection
        model.head = nn.Linear(model.head.in_features, model.head.out_features, bias=False, device='meta')
    return materialize(model).eval()  # the heap, or streamed a scratch mapping



def naflex_vit(model_args: Dict[str, Any]) -> nn.Module:
    """timm's ``NaFlexVit`` with the dimensions of ``model_args``, its table resized per image as our rule does
    (``'flexi'``: bilinear, antialiased, half-pixel, big_vision's rule; ``'timm'``: bicubic, antialiased).
    Built on the meta device, uninitialised, as ``timm_equivalent``."""
    from timm.models.naflexvit import NaFlexVit, NaFlexVitCfg

    rule = model_args.get('pos_embed_resample', 'flexi')
    if rule not in _NAFLEX_INTERP:
        raise NoReference(f"timm's NaFlexVit has no {rule!r} table resize")
    embed_dim = model_args['embed_dim']
    cfg = NaFlexVitCfg(
        patch_size=pair(model_args.get('patch_size', 16)),
        embed_dim=embed_dim,
        depth=model_args['depth'],
        num_heads=model_args['num_heads'],
        mlp_ratio=((model_args.get('mlp_dim') or 4 * embed_dim) + 0.5) / embed_dim,
        qkv_bias=model_args.get('qkv_bias', True),
        act_layer=model_args.get('act_layer', 'gelu_tanh'),
        global_pool=model_args.get('global_pool', 'map'),
        pos_embed_grid_size=grid(model_args),
        pos_embed_interp_mode=_NAFLEX_INTERP[rule],
        class_token=bool(model_args.get('class_token', False)),
    )
    with torch.device('meta'):
        model = NaFlexVit(cfg, in_chans=model_args.get('in_chans', 3), num_classes=model_args.get('num_classes', 0),
                          img_size=pair(model_args.get('img_size', 224)))
    eps = model_args.get('norm_eps', 1e-6)
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.eps = eps
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
                out.mixed_pooled = self.model.forward_head(laid['patches'], patch_valid=mixed['patch_valid'])
        return out


def timm_weights(file: Path) -> Dict[str, torch.Tensor]:
    """A timm weight file as tensors viewing the file where the format allows (safetensors, zip pickles)."""
    from timm.models import clean_state_dict, load_state_dict

    if file.suffix == '.safetensors':
        from safetensors import safe_open

        with safe_open(str(file), framework='pt') as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    if zipfile.is_zipfile(file):
        from timm_vit_variants._timm_compat import mapped_torch_load

        with mapped_torch_load():
            return clean_state_dict(load_state_dict(str(file)))  # timm's own unwrapping of training checkpoints
    return clean_state_dict(load_state_dict(str(file)))


def timm_model(path: str, model_args: Dict[str, Any]) -> TimmReference:
    """timm's network, built from config.json (``local-dir:``) or as the equivalent VisionTransformer.

    The weights are assigned, not copied, into a meta-device model, so the reference costs the file
    once in memory rather than a state dict plus a model.
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
        with torch.device('meta'):
            model = timm.create_model(f'local-dir:{folder}', pretrained=False)
        state, name = timm_weights(files[0]), "timm.create_model('local-dir:...') + its weights"
    else:
        state = timm_weights(folder)
        if 'embeds.proj.weight' in state:  # a NaFlexVit state dict
            model, name = naflex_vit(model_args), 'timm NaFlexVit + timm load_state_dict'
        else:
            name = 'timm VisionTransformer + timm load_state_dict'
            if model_args.get('rep_size'):
                head = PreLogitsHead.pop_from(state)
            model = timm_equivalent(model_args, num_classes=0 if head is not None else None)
    model.load_state_dict(state, strict=True, assign=True)
    if hasattr(model, 'init_non_persistent_buffers'):  # a computed table, left on the meta device
        model.init_non_persistent_buffers()
    if any(p.dtype != torch.float32 for p in model.parameters()):  # half-precision weights run upcast, as ours do
        model, name = as_float32(model), f'{name} (weights upcast to float32)'
    return TimmReference(model.eval(), name, head, naflex=hasattr(model, 'embeds'))
