"""Write the release folders: tiny Hub folders as release 0.2.0 writes them, with the outputs it gives.

Each folder holds ``config.json`` and ``model.safetensors`` as ``vit-port convert`` writes them (card and
provenance left out) and ``expected.safetensors``: the input and the outputs of
``timm.create_model('local-dir:FOLDER', pretrained=True).eval()`` (``forward`` and ``forward_features``) at the
folder's stored size and at one other size. ``tests/test_release_folders.py`` loads them with later code and
asserts the same outputs, so a folder a user converted with this release never needs reconverting.

Meaningful only on the release that wrote the committed folders (see README.md):
``PYTHONPATH=. python tests/data/release_folders/generate.py``
"""
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Tuple

import timm
import torch
from safetensors.torch import save_file

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting.api import convert
from porting.hub_folder import save_pretrained_folder

HERE = Path(__file__).parent
REPO = HERE.parents[2]
KEEP = ('config.json', 'model.safetensors')
TINY = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_dim=64, num_classes=5)
OTHER = (24, 16)  # the other size: non-square

# name -> (registered row, overrides): one row per feature combination of the registered family, built tiny; a
# few config fields no row sets are set on one (CoCa pooling, CPVT, quick_gelu, pre-logits).
ROWS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    'bigvision_sincos_avg': ('simple_vit_small_patch16_224', dict(rep_size=16)),
    'tiny_patch4': ('simple_vit_tiny_patch4_32', {}),
    'clip_ln_pre_token': ('simple_vit_base_patch16_clip_224', {}),
    'clip_quick_gelu_pre_logits': ('simple_vit_base_patch32_clip_224', dict(act_layer='quick_gelu', rep_size=24)),
    'clipa_avg_fc_norm': ('simple_vit_large_patch14_clipa_224', {}),
    'coca_pool': ('simple_vit_large_patch14_clip_224', dict(global_pool='coca', attn_pool_queries=4, attn_pool_heads=2)),
    'siglip_map': ('simple_vit_base_patch16_siglip_224', dict(attn_pool_heads=2)),
    'siglip_naflex': ('simple_vit_base_patch16_siglip_naflex', dict(attn_pool_heads=2)),
    'flexivit': ('simple_vit_small_flexi_240', {}),
    'cpe_sincos': ('simple_vit_small_patch16_224', dict(pos_embed='sincos+cpe')),
    'dinov2_layerscale': ('simple_vit_small_patch14_dinov2', {}),
    'dinov2_reg4': ('simple_vit_base_patch14_reg4_dinov2', {}),
    'dinov2_swiglu_packed': ('simple_vit_giant_patch14_dinov2', {}),
    'dinov3_rope': ('simple_vit_small_patch16_dinov3', {}),
    'dinov3_swiglu': ('simple_vit_huge_plus_patch16_dinov3', {}),
    'rope_axial': ('simple_vit_small_patch16_rope_axial_224', {}),
    'rope_mixed_ape': ('simple_vit_small_patch16_rope_mixed_ape_224', {}),
    'eva02_block': ('simple_vit_tiny_patch14_eva02_336', {}),
    'beit_relpos': ('simple_vit_base_patch16_beit_224', {}),
    'beitv2_relpos': ('simple_vit_base_patch16_beitv2_224', {}),
    'deit_distilled': ('simple_vit_tiny_patch16_deit_distilled_224', {}),
    'deit3_layerscale': ('simple_vit_small_patch16_deit3_224', {}),
}

# name -> (source file, vit-port convert options): the full conversion path on the tests' reference files.
CONVERSIONS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    'convert_bigvision_npz': ('tests/data/reference/bigvision_learn_tok.npz', {}),
    'convert_beit_pth': ('tests/data/reference_beit/beit_ft_abs_cls.pth', dict(num_heads=2)),
    'convert_eva02_pth': ('tests/data/reference_eva02/eva02_ft_bl_ls_model.pth', dict(num_heads=2)),
}
# A timm VisionTransformer state dict, written here with timm itself, is converted too.
TIMM_SOURCE = ('vit_small_patch16_224',
               dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, num_classes=5))


def randomized(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter drawn anew (zero-initialised heads and LayerScale too), so each weight shows in the outputs."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.2)
    return model


def write_expected(folder: Path) -> None:
    """The loaded folder's outputs at its stored size and at ``OTHER``, with the inputs they were run on."""
    model = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
    stored = tuple(model.config.img_size)
    tensors = {}
    for h, w in (stored, OTHER):
        x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            tensors[f'input_{h}x{w}'] = x
            tensors[f'forward_{h}x{w}'] = model(x)
            tensors[f'forward_features_{h}x{w}'] = model.forward_features(x)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / 'expected.safetensors'))


def keep_only_release_files(folder: Path) -> None:
    """Drop the card and provenance: only what loading reads is frozen."""
    for path in folder.iterdir():
        if path.name not in KEEP:
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def converted(source: Path, name: str, options: Dict[str, Any]) -> None:
    """``vit-port convert SOURCE`` into the release folder ``name``."""
    with tempfile.TemporaryDirectory() as tmp:
        convert(source, Path(tmp) / name, **options)
        shutil.rmtree(HERE / name, ignore_errors=True)
        shutil.copytree(Path(tmp) / name, HERE / name)
    keep_only_release_files(HERE / name)
    write_expected(HERE / name)


def main() -> None:
    for seed, (name, (row, overrides)) in enumerate(ROWS.items()):
        model = randomized(timm.create_model(row, pretrained=False, **{**TINY, **overrides}), seed)
        shutil.rmtree(HERE / name, ignore_errors=True)
        keep_only_release_files(save_pretrained_folder(model.eval(), HERE / name))
        write_expected(HERE / name)
    for name, (source, options) in CONVERSIONS.items():
        converted(REPO / source, name, options)
    with tempfile.TemporaryDirectory() as tmp:
        arch, args = TIMM_SOURCE
        source = Path(tmp) / 'timm_vit.safetensors'
        save_file(randomized(timm.create_model(arch, pretrained=False, **args), 99).state_dict(), str(source))
        converted(source, 'convert_timm_safetensors', dict(num_heads=2))


if __name__ == '__main__':
    main()
