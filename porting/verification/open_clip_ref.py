"""The open_clip reference: an OpenCLIP folder through ``open_clip.create_model('local-dir:...')``, an OpenAI ``.pt``
through ``open_clip.model.build_model_from_openai_state_dict`` on its tensors (read as data, never run)."""
import os
from typing import Any, Dict, Optional

import torch

from timm_vit_variants.checkpoints.openclip import OPEN_CLIP_CONFIG
from timm_vit_variants.checkpoints.torchscript_store import TorchScriptStore
from timm_vit_variants.config import grid_for

from .result import Check, NoReference, Outputs

__all__ = ['open_clip_outputs']


def _open_clip() -> Any:
    try:
        import open_clip
    except ImportError:
        raise NoReference('open_clip is not installed') from None
    return open_clip


def _openai_model(open_clip: Any, path: str) -> Any:
    """OpenAI's CLIP as open_clip builds it from the archive's state dict (its own head count and QuickGELU)."""
    store = TorchScriptStore(path)
    try:
        state = {name: store.tensor(name).clone() for name in store.names()}
    finally:
        store.close()
    return open_clip.model.build_model_from_openai_state_dict(state, quick_gelu=True).float().eval()


def _folder_model(open_clip: Any, check: Check) -> Any:
    """An OpenCLIP folder through open_clip's own loader; at a target geometry through its ``force_image_size``."""
    path = check.path
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if not os.path.isfile(os.path.join(folder, OPEN_CLIP_CONFIG)):
        raise NoReference(f'open_clip builds a model only from its {OPEN_CLIP_CONFIG}, which the source lacks')
    kwargs: Dict[str, Any] = {}
    target = check.target
    if target is not None:
        patch, size = target.patch_size, target.img_size
        if patch != check.source.patch_size:
            raise NoReference('open_clip has no rule for a patch-size change')
        if check.rule != 'openclip':
            raise NoReference(f"the table was resized with the {check.rule!r} rule, not open_clip's own")
        grid = grid_for(size, patch, pad=False)  # open_clip's VALID patch conv
        source_grid = grid_for(check.source.img_size, patch, pad=False)
        if grid != source_grid and grid[0] * grid[1] == source_grid[0] * source_grid[1]:
            raise NoReference("open_clip skips its table resize when the token count is unchanged (a quirk this "
                              'tool does not reproduce), so it has no output for this grid')
        kwargs['force_image_size'] = size
    return open_clip.create_model('local-dir:' + folder, device='cpu', **kwargs).float().eval()


def open_clip_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """open_clip's image tower on ``x``: the token stream ours returns, the embedding and the pooled feature (it
    takes no NaFlex batch: ``mixed`` is not run)."""
    open_clip = _open_clip()
    if check.format == 'openai':
        if check.target is not None:
            raise NoReference("an OpenAI model has a fixed image size, and open_clip resizes one only while loading "
                              'it with torch.jit.load, which runs the archive')
        model, name = _openai_model(open_clip, check.path), 'open_clip build_model_from_openai_state_dict'
    else:
        model = _folder_model(open_clip, check)
        name = 'open_clip create_model(local-dir:)' + (' with force_image_size' if check.target is not None else '')
    visual = model.visual
    with torch.no_grad():
        tokens = visual.transformer(visual._embeds(x))
        pooled, _ = visual._pool(tokens)
        embed = model.encode_image(x, normalize=False)
    if visual.attn_pool is None and not visual.final_ln_after_pool:
        tokens = visual.ln_post(tokens)  # ours normalises every token in this case too
    return Outputs(tokens, embed, name, pre_logits=pooled)
