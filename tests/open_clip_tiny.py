"""Tiny open_clip models of open_clip's own packaged configs, saved as open_clip users save them, for tests.

A native tower is shrunk through its ``vision_cfg`` (one 48-wide layer of two heads on a 4x4 grid). A timm trunk is
named by the config and built by timm with no sizes from open_clip, so ``tiny_timm`` makes timm's own entrypoint of
that name build the same tiny size (its other arguments, pooling, norms and heads, are the model's) for every caller of
``timm.create_model`` while it is held: open_clip's ``TimmModel``, our reader's meta build and the reference alike.
The text tower is replaced by a tiny native one (the image tower does not depend on it; a transformers text tower
would be fetched from the Hub).
"""
import contextlib
import copy
import json
import logging
import re
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import torch
from safetensors.torch import save_file

WIDTH, HEADS, EMBED = 48, 2, 32
_TEXT = dict(context_length=8, vocab_size=64, width=16, heads=2, layers=1)
_HYBRID = re.compile(r'^vitamin_|_mci_')
_MULTIMODAL = dict(context_length=8, vocab_size=64, width=16, heads=2, layers=1)


def trunk_name(name: str) -> Optional[str]:
    """The timm model an open_clip config builds its image tower on; None for a native tower."""
    import open_clip
    return open_clip.get_model_config(name)['vision_cfg'].get('timm_model_name')


def _patch(cfg: Dict[str, Any]) -> int:
    timm_name = cfg['vision_cfg'].get('timm_model_name')
    if timm_name is None:
        return cfg['vision_cfg']['patch_size']
    found = re.search(r'patch(\d+)', timm_name)
    return int(found.group(1)) if found else 16


def image_size(name: str) -> int:
    """The tiny model's stored image size: a 4x4 grid of its patches."""
    import open_clip
    return 4 * _patch(open_clip.get_model_config(name))


@contextlib.contextmanager
def tiny_timm(name: Optional[str]) -> Iterator[None]:
    """While held, timm's entrypoint ``name`` builds one ``WIDTH``-wide block of ``HEADS`` heads on a 4x4 grid."""
    if name is None:
        yield
        return
    from timm.models import _registry
    original = _registry._model_entrypoints[name]
    found = re.search(r'patch(\d+)', name)
    size = 4 * (int(found.group(1)) if found else 16)

    # a hybrid's convolutional stem (MobileCLIP's MCi, ViTamin's MbConv) fixes its width: only its depth is cut
    sizes = dict(depth=1) if _HYBRID.search(name) else dict(embed_dim=WIDTH, depth=1, num_heads=HEADS)

    def tiny(pretrained: bool = False, **kwargs: Any) -> torch.nn.Module:
        return original(pretrained=pretrained, **dict(kwargs, img_size=size, **sizes))
    tiny.__module__, tiny.__name__ = original.__module__, original.__name__
    _registry._model_entrypoints[name] = tiny
    try:
        yield
    finally:
        _registry._model_entrypoints[name] = original


def tiny_config(name: str) -> Dict[str, Any]:
    """open_clip's packaged ``model_cfg`` of ``name`` at the tiny size."""
    import open_clip
    cfg = copy.deepcopy(open_clip.get_model_config(name))
    vision = cfg['vision_cfg']
    vision['image_size'] = 4 * _patch(cfg)
    if vision.get('timm_model_name'):  # a trunk without a projection gives its own width
        cfg['embed_dim'] = WIDTH if vision.get('timm_proj') == 'none' else EMBED
    else:
        vision.update(layers=1, width=WIDTH, head_width=WIDTH // HEADS)
        if vision.get('attentional_pool'):
            vision.update(attn_pooler_queries=4, attn_pooler_heads=2)
        cfg['embed_dim'] = EMBED
    cfg['text_cfg'] = dict(_TEXT)
    if 'multimodal_cfg' in cfg:
        cfg['multimodal_cfg'] = dict(cfg['multimodal_cfg'], **_MULTIMODAL)
    return cfg


def save_tiny(name: str, folder: Path, seed: int = 0) -> torch.nn.Module:
    """open_clip's ``name`` built tiny by open_clip from ``folder/open_clip_config.json``, its weights drawn at
    random, saved as open_clip's Hub folders hold them (``open_clip_model.safetensors`` and the config open_clip's
    ``save_config_for_hf`` writes); returns the model (call within ``tiny_timm(trunk_name(name))``)."""
    import open_clip
    from open_clip.push_to_hf_hub import save_config_for_hf
    folder.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(name)
    (folder / 'open_clip_config.json').write_text(json.dumps({'model_cfg': cfg}))
    logging.disable(logging.WARNING)  # open_clip warns that the folder holds no weights yet
    try:
        with torch.random.fork_rng():  # open_clip's own init draws from the global generator: seeded, so runs agree
            torch.manual_seed(seed)
            model = open_clip.create_model('local-dir:' + str(folder), device='cpu')
    finally:
        logging.disable(logging.NOTSET)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.1)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / 'open_clip_model.safetensors'))
    save_config_for_hf(model, folder / 'open_clip_config.json', cfg)
    return model.eval()
