"""The transformers reference: the class the source folder declares (``config.json``'s ``architectures[0]``, the one
the readers accept) ``.from_pretrained`` on the folder, and the output that class returns: a classifier's logits, a
model's pooled output or embeddings, with its tokens.

``hf_outputs`` runs the ViT-layout classes; a family whose folders need their own class (SigLIP, CLIP, DINOv2, ...)
claims them on format 'hf' from its porting module (``porting.families.registry.Claim``) and builds its reference
from the helpers here: ``hf_config``, ``transformers_at``, ``load``, ``forward_seen``, ``classified``."""
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn

from timm_vit_variants.checkpoints.detect import WRAPPED_PREFIXES
from timm_vit_variants.checkpoints.files import read_json
from timm_vit_variants.memory import release_after_use

from ..extras import require
from .result import Check, NoReference, Outputs
from .streamed import as_float32

__all__ = ['hf_outputs', 'hf_config', 'hf_model_type', 'transformers_at', 'load', 'declared_class', 'forward_seen',
           'classified', 'transformers_module', 'is_timm_wrapper', 'timm_wrapper_outputs']


def hf_config(check: Check) -> Tuple[Path, Dict[str, Any]]:
    """The transformers folder of ``check``'s source and its ``config.json`` (empty without one)."""
    folder = Path(check.path) if Path(check.path).is_dir() else Path(check.path).parent
    return folder, read_json(str(folder / 'config.json')) if (folder / 'config.json').is_file() else {}


def hf_model_type(check: Check) -> Any:
    """The ``model_type`` the source folder's ``config.json`` records: the class family a claim on 'hf' tests."""
    return hf_config(check)[1].get('model_type')


def transformers_at(check: Check, own_rule: Optional[str]) -> Any:
    """transformers, once ``check``'s target geometry is one a class resizing its table by ``own_rule`` (None: no
    table) with ``interpolate_pos_encoding`` can stand for: no patch-size change, and no padded edge."""
    check.require_own_resize('transformers', own_rule, "transformers'")
    target = check.target
    if target is not None and target.grid_mode != 'crop' and \
            any(s % p for s, p in zip(target.img_size, target.patch_size)):
        raise NoReference('transformers drops the pixels the patch does not divide, where this model pads them')
    return transformers_module()


def hf_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """A ViT-layout folder (ViT, ViT-MSN, I-JEPA, ...) in transformers itself; at a target geometry only through its
    own ``interpolate_pos_encoding``. The families whose folders need another class claim them (``Claim``)."""
    folder, cfg = hf_config(check)
    target = check.target
    transformers = transformers_at(check, 'hf')
    cls = declared_class(transformers, cfg, 'ViTForImageClassification' if check.source.num_classes else 'ViTModel')
    classify = cls.__name__.endswith('ForImageClassification')
    # A bare ViTModel's pooler (Dense + tanh) is our pre-logits layer when the reader found one.
    kwargs = {'add_pooling_layer': bool(check.source.head.rep_size)} if cls is transformers.ViTModel else {}
    model = _run_in_float32(cls.from_pretrained(str(folder), attn_implementation='eager', **kwargs).eval())
    pooled = None
    resize = {'interpolate_pos_encoding': True} if target is not None else {}
    with torch.no_grad():
        if classify:
            tower = getattr(model, model.base_model_prefix)
            feats = tower(pixel_values=x, **resize).last_hidden_state
            logits = model(pixel_values=x, **resize).logits
        else:
            out = model(pixel_values=x, **resize)
            feats, logits, pooled = out.last_hidden_state, None, getattr(out, 'pooler_output', None)
    name = f'transformers {cls.__name__}.from_pretrained' + (' with interpolate_pos_encoding' if resize else '')
    return Outputs(feats, logits, name, pre_logits=pooled)


def is_timm_wrapper(check: Check) -> bool:
    """Whether the source is a folder transformers' ``TimmWrapperModel`` (or its classifier) saved: a timm model that
    the timm reader reads under ``timm_model.``."""
    config = Path(check.path) / 'config.json'
    return config.is_file() and read_json(str(config)).get('model_type') in WRAPPED_PREFIXES


def timm_wrapper_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The wrapper class the folder declares, at the source geometry (it runs its timm model as built): the classifier's
    logits and its timm model's tokens, or ``TimmWrapperModel``'s tokens and pooled output."""
    require('hf', 'verifying a transformers TimmWrapperModel folder', 'pass --no-verify to convert without the check')
    if check.target is not None:
        raise NoReference("transformers' TimmWrapperModel runs its timm model as built, with no resize of its own")
    import timm_vit_variants  # noqa: F401  (a wrapped simple_vit model needs the plugin)

    folder = Path(check.path)
    cfg = read_json(str(folder / 'config.json'))
    model, name = load(transformers_module(), folder, cfg,
                       'TimmWrapperForImageClassification' if check.source.num_classes else 'TimmWrapperModel')
    with torch.no_grad():
        if type(model).__name__.endswith('ForImageClassification'):
            return Outputs(model.timm_model.forward_features(x), model(pixel_values=x).logits, name)
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output, name)


def _run_in_float32(model: Any) -> Any:
    """A loaded model in float32 (half precision upcast onto a scratch mapping), each layer's weight pages handed
    back once it has run: transformers views a safetensors file in place, so the reference holds about one layer."""
    model = as_float32(model)
    release_after_use(m for m in model.modules() if next(m.children(), None) is None)
    return model


def transformers_module() -> Any:
    try:
        import transformers
    except ImportError:
        raise NoReference('transformers is not installed') from None
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()  # the reference's load messages are not ours to print
    return transformers


def load(transformers: Any, folder: Path, cfg: Dict[str, Any], default: str) -> Tuple[Any, str]:
    """The class the folder declares (``architectures[0]``, else ``default``) loaded from it, in float32, and its
    name: the reference is the class the folder was saved from, whose output the written folder must give."""
    cls = declared_class(transformers, cfg, default)
    model = _run_in_float32(cls.from_pretrained(str(folder), attn_implementation='eager').eval())
    return model, f'transformers {cls.__name__}.from_pretrained'


def declared_class(transformers: Any, cfg: Dict[str, Any], default: str) -> Any:
    """The transformers class ``config.json`` declares (``architectures[0]``), else ``default``."""
    architectures = cfg.get('architectures')
    name = architectures[0] if isinstance(architectures, list) and architectures and \
        isinstance(architectures[0], str) else default
    cls = getattr(transformers, name, None)
    if not isinstance(cls, type):
        raise NoReference(f'transformers has no class {name!r} (config.json architectures)')
    return cls


def forward_seen(run: Callable[[], Any], modules: Dict[str, nn.Module]) -> Tuple[Any, Dict[str, Tuple[Any, Any]]]:
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


def classified(model: Any, name: str, **inputs: Any) -> Outputs:
    """A ``*ForImageClassification`` of a tower (SigLIP, SigLIP 2, CLIP): the tower's tokens, the logits and the mean
    its classifier reads."""
    out, seen = forward_seen(lambda: model(**inputs), {'tower': model.vision_model, 'head': model.classifier})
    return Outputs(seen['tower'][1][0], out.logits,
                   name + ' (logits: its classifier on the mean of the tokens)', pre_logits=seen['head'][0])
