"""The open_clip reference: an OpenCLIP folder through ``open_clip.create_model('local-dir:...')`` (a tower on a timm
trunk resized with its ``TimmModel.set_input_size``, timm's own resize), an OpenAI file (its
TorchScript archive's tensors read as data, never run, or its state dict) through
``open_clip.model.build_model_from_openai_state_dict``, at a target geometry with open_clip's ``resize_pos_embed``,
and a lone OpenCLIP weight file fetched as a CLIP tag through open_clip's own packaged config of the model the tag
names (``clip_models.clip_tag_open_clip``), its tensors loaded by open_clip with ``strict=True``. A lone file with no
tag has no reference: nothing but our own inference would say its architecture. ``check_tag_file`` refuses a tag's
file that does not fit that config before any work."""
import contextlib
import logging
import os
import zipfile
from typing import Any, Dict, Iterator, Optional, Tuple

import torch

from timm_vit_variants.checkpoints.openclip import OPENAI_SCALARS, OPEN_CLIP_CONFIG
from timm_vit_variants.checkpoints.openclip_config import read_open_clip_config
from timm_vit_variants.clip_models import clip_tag_open_clip
from timm_vit_variants.checkpoints.torchscript_store import TorchScriptStore, is_torchscript_archive
from timm_vit_variants.config import grid_for
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.limits import DEFAULT_LIMITS

from .result import Check, NoReference, Outputs

__all__ = ['open_clip_outputs', 'check_tag_file']


def _open_clip() -> Any:
    try:
        import open_clip
    except ImportError:
        raise NoReference('open_clip is not installed') from None
    return open_clip


def _openai_state(open_clip: Any, path: str) -> Dict[str, torch.Tensor]:
    """An OpenAI file's state dict: a TorchScript archive's tensors read as data (open_clip would ``torch.jit.load``
    it, running its code), a state dict through open_clip's own ``load_state_dict`` (``torch.load``,
    ``weights_only=True``)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            scripted = is_torchscript_archive(archive.namelist())
        if scripted:
            store = TorchScriptStore(path)
            try:
                return {name: store.tensor(name).clone() for name in store.names()}
            finally:
                store.close()
    return dict(open_clip.factory.load_state_dict(path))


def _openai_model(open_clip: Any, check: Check) -> Tuple[Any, str]:
    """OpenAI's CLIP as open_clip's ``build_model_from_openai_state_dict`` builds it (its own layers, width, patch,
    grid, embedding width, width // 64 heads and QuickGELU), in float32, and its name.

    The builder casts the model to fp16 before loading (OpenAI's fp16 files load exactly; an fp32 file would be
    rounded), so the file's tensors are loaded again into the float32 model. At a target geometry the model is what
    open_clip's ``create_model(force_image_size=...)`` with ``load_checkpoint`` gives: the image table resized by
    open_clip's ``resize_pos_embed`` to the target grid (the only part of the tower that depends on it)."""
    if os.path.isdir(check.path):
        raise NoReference("open_clip builds an OpenAI model from one file, and the source is a folder")
    state = _openai_state(open_clip, check.path)
    try:
        model = open_clip.model.build_model_from_openai_state_dict(dict(state), quick_gelu=True).float()
    except KeyError as e:
        key = e.args[0] if e.args else '?'
        raise ViTVariantsError("missing from the file; open_clip's build_model_from_openai_state_dict needs it",
                               path=check.path, key=str(key)) from None
    for key in OPENAI_SCALARS:  # what the builder pops from its copy
        state.pop(key, None)
    name = 'open_clip build_model_from_openai_state_dict'
    resize = _resize_args(check)
    if resize:
        visual = model.visual
        size = resize['force_image_size']
        visual.image_size, visual.grid_size = size, grid_for(size, check.target.patch_size, pad=False)
        open_clip.model.resize_pos_embed(state, model)
        visual.positional_embedding = torch.nn.Parameter(torch.empty_like(state['visual.positional_embedding']))
        name += (f" at {size[0]}x{size[1]}, its table resized by open_clip's resize_pos_embed (as create_model with "
                 'force_image_size and load_checkpoint do)')
    misfit = _misfit(model, state, False)
    if misfit is not None:
        raise ViTVariantsError(f"does not fit open_clip's OpenAI model built from the file: {misfit[1]}",
                               path=check.path, key=misfit[0])
    model.load_state_dict(state, strict=True)
    return model.eval(), name


def _resize_args(check: Check) -> Dict[str, Any]:
    """open_clip's ``force_image_size`` for a check at a target geometry ({} at the source's), where open_clip's own
    resize gives an output for it."""
    target = check.target
    if target is None:
        return {}
    check.require_own_resize('open_clip', 'openclip')
    patch, size = target.patch_size, target.img_size
    grid = grid_for(size, patch, pad=False)  # open_clip's VALID patch conv
    source_grid = grid_for(check.source.img_size, patch, pad=False)
    if grid != source_grid and grid[0] * grid[1] == source_grid[0] * source_grid[1]:
        raise NoReference("open_clip skips its table resize when the token count is unchanged (a quirk this "
                          'tool does not reproduce), so it has no output for this grid')
    return {'force_image_size': size}


def _folder_model(open_clip: Any, check: Check, folder: str) -> Tuple[Any, str]:
    """An OpenCLIP folder through open_clip's own loader, and its name; at a target geometry through its
    ``force_image_size``, or for a timm trunk (which that leaves as built) its ``TimmModel.set_input_size``: timm's
    own table resize."""
    name = 'open_clip create_model(local-dir:)'
    if not read_open_clip_config(folder, DEFAULT_LIMITS)[1]['vision_cfg'].get('timm_model_name'):
        resize = _resize_args(check)
        model = open_clip.create_model('local-dir:' + folder, device='cpu', **resize)
        return model.float().eval(), name + (' with force_image_size' if resize else '')
    check.require_own_resize('open_clip', 'timm', "timm's")
    model = open_clip.create_model('local-dir:' + folder, device='cpu')
    if check.target is not None:
        model.visual.set_input_size(tuple(check.target.img_size))
        name += ' with TimmModel.set_input_size'
    return model.float().eval(), name


def _misfit(model: Any, state: Dict[str, Any], resized: bool) -> Optional[Tuple[str, str]]:
    """(key, why) of the first tensor in which a file's ``state`` does not fit open_clip's ``model``, the image tower's
    first: a key missing from the file, one the model lacks, or another shape (the image table's token count aside
    when open_clip resizes it); None when every tensor fits."""
    want = model.state_dict()
    keys = list(want) + [k for k in state if k not in want]  # the model's order, then what only the file holds
    for key in sorted(keys, key=lambda k: not k.startswith('visual.')):
        if key not in state:
            return key, 'missing from the file'
        if key not in want:
            return key, 'not in the model'
        mine, theirs = tuple(want[key].shape), tuple(state[key].shape)
        if key == 'visual.positional_embedding' and resized and mine[1:] == theirs[1:]:
            continue
        if mine != theirs:
            return key, f'the file holds {theirs}, the model needs {mine}'
    return None


def _misfit_error(misfit: Tuple[str, str], model_name: str, tag: Optional[str], path: str) -> ViTVariantsError:
    return ViTVariantsError(f"open_clip's packaged {model_name} config, the architecture the tag {tag} names, does "
                            f'not fit the file: {misfit[1]}', path=path, key=misfit[0])


@contextlib.contextmanager
def _quiet_open_clip() -> Iterator[None]:
    """open_clip logs 'No pretrained weights loaded' at WARNING for every model built without weights: not ours to
    print."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def check_tag_file(path: str, tag: Optional[str], fmt: str, stored: Dict[str, Tuple[int, ...]]) -> None:
    """Refuse, before any work, a CLIP tag's lone weight file (``stored``: its tensor names and shapes) that holds
    another tower than open_clip's packaged config of the tag's architecture, naming the first tensor that does not
    fit. Without it the reference would build the tag's whole network on the heap (a bigG's ~10 GB, whatever
    --memory-budget says) only to refuse the file after the weights were written. The network is built here on the
    meta device, which costs no memory; the table's token count is left to the reference (open_clip resizes it).
    Nothing is checked where the reference is not built from a tag (a folder, an OpenAI archive, no open_clip)."""
    named = clip_tag_open_clip(tag)
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if named is None or fmt == 'openai' or os.path.isdir(path) or os.path.isfile(os.path.join(folder,
                                                                                               OPEN_CLIP_CONFIG)):
        return
    try:
        open_clip = _open_clip()
    except NoReference:
        return
    if open_clip.get_model_config(named[0]) is None:
        return
    with torch.device('meta'), _quiet_open_clip():
        model = open_clip.create_model(named[0], device='meta', force_quick_gelu=named[1])
    misfit = _misfit(model, {name: torch.empty(shape, device='meta') for name, shape in stored.items()}, True)
    if misfit is not None:
        raise _misfit_error(misfit, named[0], tag, path)


def _tag_model(open_clip: Any, check: Check, model_name: str, quick_gelu: bool) -> Any:
    """open_clip's ``model_name`` built from its own packaged config (the tag's architecture), every tensor of the
    lone file then loaded by open_clip's ``load_checkpoint`` with ``strict=True`` (its table resize included); a file
    that open_clip refuses is named with the first tensor that does not fit."""
    if open_clip.get_model_config(model_name) is None:
        raise NoReference(f'open_clip {open_clip.__version__} packages no model config {model_name!r}')
    resize = _resize_args(check)
    model = open_clip.create_model(model_name, device='cpu', force_quick_gelu=quick_gelu, **resize)
    try:
        open_clip.load_checkpoint(model, check.path, strict=True)
    except Exception:  # noqa: BLE001  (open_clip asserts, torch raises RuntimeError: say which tensor)
        misfit = _misfit(model, open_clip.factory.load_state_dict(check.path), bool(resize))
        if misfit is None:
            raise
        raise _misfit_error(misfit, model_name, check.tag, check.path) from None
    return model.float().eval()


def open_clip_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """open_clip's image tower on ``x``: the token stream ours returns, the embedding and the pooled feature (it
    takes no NaFlex batch: ``mixed`` is not run)."""
    open_clip = _open_clip()
    if check.format == 'openai':
        model, name = _openai_model(open_clip, check)
    else:
        path = check.path
        folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        named = clip_tag_open_clip(check.tag)
        resized = ' with force_image_size' if check.target is not None else ''
        if os.path.isfile(os.path.join(folder, OPEN_CLIP_CONFIG)):
            model, name = _folder_model(open_clip, check, folder)
        elif named is not None and not os.path.isdir(path):
            model = _tag_model(open_clip, check, *named)
            name = (f"open_clip create_model({named[0]!r}{', force_quick_gelu' if named[1] else ''}){resized}: the "
                    f'architecture from open_clip\'s packaged config, taken from the tag {check.tag} (a shared '
                    "assumption); every tensor loaded strictly by open_clip's load_checkpoint")
        else:
            raise NoReference(f'open_clip builds a model only from its {OPEN_CLIP_CONFIG}, which the source lacks, '
                              'or from its packaged config of the model a CLIP tag names (the source was not '
                              'fetched as one)')
    visual = model.visual
    if hasattr(visual, 'trunk'):  # open_clip's TimmModel: the timm trunk's features and pooling, then its head
        with torch.no_grad():
            tokens = visual.trunk.forward_features(x)
            pooled = visual.trunk.forward_head(tokens, pre_logits=True)
            return Outputs(tokens, model.encode_image(x, normalize=False), name, pre_logits=pooled)
    with torch.no_grad():
        tokens = visual.transformer(visual._embeds(x))
        pooled, _ = visual._pool(tokens)
        embed = model.encode_image(x, normalize=False)
    if visual.attn_pool is None and not visual.final_ln_after_pool:
        tokens = visual.ln_post(tokens)  # ours normalises every token in this case too
    return Outputs(tokens, embed, name, pre_logits=pooled)
