"""Writes tests/data/release_conversions/: the Hub folders release 0.2.0 converts to, frozen so that later releases
can prove they still load them.

One tiny converted Hub folder per family and source form (``config.json`` and ``model.safetensors`` exactly as
``vit_port.convert``, the code behind ``vit-port convert``, wrote them; the card is left out), and beside each an
``expected.safetensors``: what ``timm.create_model('local-dir:FOLDER', pretrained=True).eval()`` gives on
``tests/test_release_conversions.release_input`` at the folder's stored size and at one other size: ``logits@HxW``
(``model(x)``), ``features@HxW`` (``model.forward_features(x)``) and, where the model takes a list of images,
``logits@HxW+HxW`` (one image of each size, the NaFlex path). ``tests/test_release_conversions.py`` reloads them.

The sources are the existing tests' fixtures, kept small: the committed files under tests/data/reference*/ (written
by each family's own code) cut to their first block, or models built as the tests' own builders build them
(``checkpoint_fixtures``, ``test_*`` helpers), narrower.

Only meaningful on the release it freezes (it refuses any other version, or changed package code)::

    PYTHONPATH=. python tests/data/release_conversions/generate.py
"""
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
TESTS = ROOT / 'tests'
sys.path[:0] = [str(ROOT), str(TESTS)]

import numpy as np  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import timm_vit_variants  # noqa: E402
import vit_port  # noqa: E402
from timm_vit_variants.errors import ViTVariantsError  # noqa: E402
from test_release_conversions import RELEASE, release_input  # noqa: E402

REF = TESTS / 'data' / 'reference'
CLIP_REF = TESTS / 'data' / 'reference_clip'
DINO = TESTS / 'data' / 'reference_dino'
BEIT = TESTS / 'data' / 'reference_beit'
EVA02 = TESTS / 'data' / 'reference_eva02'
Size = Tuple[int, int]


@dataclass(frozen=True)
class Case:
    """One folder: its name, what it covers, its source (a committed file or a builder given a scratch folder), the
    second input size and the conversion's options (``vit_port.convert`` keywords); without ``options`` the source
    is itself the folder (one ``vit_port.save_pretrained_folder`` wrote)."""
    name: str
    covers: str
    source: Callable[[Path], Path]
    other: Size
    options: Optional[Dict[str, Any]] = field(default_factory=dict)


def committed(path: Path) -> Callable[[Path], Path]:
    return lambda tmp: path


def first_block(path: Path, name: Optional[str] = None) -> Callable[[Path], Path]:
    """A committed file cut to its first block (``blocks.0.*``, ``Transformer/encoderblock_0/*``; RoPE-ViT's per-layer
    ``freqs`` row 0), under ``name`` if given (the name is the evidence some readers weigh): the family's own layout
    at depth 1, half the bytes."""
    def build(tmp: Path) -> Path:
        out = tmp / (name or path.name)
        if path.suffix == '.npz':
            with np.load(path, allow_pickle=False) as archive:
                np.savez(out, **{k: archive[k] for k in archive.files if not re.search(r'encoderblock_[1-9]', k)})
            return out
        data = torch.load(path, weights_only=True)
        wrapper = next((k for k in ('model', 'module') if isinstance(data.get(k), dict)), None)
        state = data[wrapper] if wrapper else data
        kept = {k: v for k, v in state.items() if not re.match(r'blocks\.[1-9]', k)}
        if 'freqs' in kept:  # RoPE-ViT mixed: (2, depth, heads * head_dim / 2)
            kept['freqs'] = kept['freqs'][:, :1].clone()
        torch.save({wrapper: kept} if wrapper else kept, out)
        return out
    return build


# -- sources built the way the tests build them ---------------------------------------------------------------------

def timm_folder(tmp: Path) -> Path:
    from checkpoint_fixtures import write_timm_folder
    return write_timm_folder(tmp)


def hf_vit_folder(tmp: Path) -> Path:
    from checkpoint_fixtures import write_hf_folder
    return write_hf_folder(tmp)


def deit_file(arch: str) -> Callable[[Path], Path]:
    """DeiT's ``{'model': state_dict}`` of timm's class, as DeiT's models.py builds it (tests/test_deit.py), narrow."""
    def build(tmp: Path) -> Path:
        from checkpoint_fixtures import randomize
        model = timm.create_model(arch, pretrained=False, img_size=16, patch_size=4, embed_dim=32, depth=2,
                                  num_heads=2, mlp_ratio=2, num_classes=5)
        path = tmp / f'{arch}.pth'
        torch.save({'model': randomize(model, seed=3).state_dict()}, path)
        return path
    return build


def hf_clip_folder(tmp: Path) -> Path:
    """tests/test_clip.py's CLIPVisionModelWithProjection (QuickGELU), narrower."""
    import transformers
    from test_clip import HF_TINY
    config = transformers.CLIPVisionConfig(hidden_act='quick_gelu', **dict(HF_TINY, **NARROW_HF))
    _perturb(transformers.CLIPVisionModelWithProjection(config), 11).save_pretrained(tmp / 'hf_clip')
    return tmp / 'hf_clip'


def hf_siglip_folder(tmp: Path) -> Path:
    """tests/test_siglip.py's SiglipVisionModel (MAP head), narrower."""
    import transformers
    torch.manual_seed(3)
    model = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, **NARROW_HF))
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    model.save_pretrained(str(tmp / 'hf_siglip'))
    return tmp / 'hf_siglip'


def hf_siglip2_folder(tmp: Path) -> Path:
    """tests/test_naflex.py's Siglip2VisionModel (the NaFlex tower), narrower."""
    import transformers
    torch.manual_seed(3)
    model = transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, patch_size=4,
        num_patches=16))
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    model.save_pretrained(str(tmp / 'hf_siglip2'))
    return tmp / 'hf_siglip2'


def _perturb(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    from test_clip import _perturbed
    return _perturbed(model, seed)


def openai_archive(tmp: Path) -> Path:
    """OpenAI's TorchScript archive of a float16 CLIP (tests/test_openai_clip.py), one 64-wide block (1 head)."""
    from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg, convert_weights_to_fp16
    from test_openai_clip import _write_archive
    torch.manual_seed(0)
    model = _perturb(CLIP(32, CLIPVisionCfg(layers=1, width=64, patch_size=4, image_size=24),
                          CLIPTextCfg(context_length=8, vocab_size=64, width=64, heads=1, layers=1),
                          quick_gelu=True), 1)
    convert_weights_to_fp16(model)
    state = dict(model.state_dict())
    state.update({k: torch.tensor(v) for k, v in {'input_resolution': 24, 'context_length': 8,
                                                   'vocab_size': 64}.items()})
    path = tmp / 'openai_tiny.pt'
    _write_archive(path, state)
    return path


def open_clip_folder(fixture: str, **vision: Any) -> Callable[[Path], Path]:
    """An OpenCLIP Hub folder (open_clip_config.json, open_clip_model.safetensors) of a committed fixture's
    model_cfg, its image tower narrowed (``vision``), built by open_clip's own create_model on that config."""
    def build(tmp: Path) -> Path:
        import open_clip
        config = json.loads((CLIP_REF / fixture / 'open_clip_config.json').read_text())
        config['model_cfg']['vision_cfg'].update(vision)
        name = f'release-{fixture}'
        (tmp / 'model_configs').mkdir(exist_ok=True)
        (tmp / 'model_configs' / f'{name}.json').write_text(json.dumps(config['model_cfg']))
        open_clip.add_model_config(tmp / 'model_configs' / f'{name}.json')
        torch.manual_seed(0)
        model = open_clip.create_model(name, device='cpu')
        text = torch.Generator().manual_seed(1)
        with torch.no_grad():  # the text towers, seeded: open_clip leaves CoCa's text_projection uninitialised
            for key, param in model.named_parameters():
                if not key.startswith('visual.'):
                    param.normal_(std=0.02, generator=text)
        model = _perturb(model, 2)
        folder = tmp / fixture
        folder.mkdir()
        (folder / 'open_clip_config.json').write_text(json.dumps(config))
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  str(folder / 'open_clip_model.safetensors'))
        return folder
    return build


NARROW_CLIP = dict(width=32, head_width=16, patch_size=4, image_size=24, mlp_ratio=2)
NARROW_HF = dict(intermediate_size=64, patch_size=4, image_size=24)


def data2vec_folder(tmp: Path) -> Path:
    """tests/test_beit.py's Data2VecVisionModel (shared relpos table and a learned table), narrower."""
    import transformers
    from test_beit import _noised
    config = transformers.Data2VecVisionConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, hidden_act='gelu', use_mean_pooling=False,
        use_shared_relative_position_bias=True, use_absolute_position_embeddings=True, layer_scale_init_value=0.0,
        **NARROW_HF)
    torch.manual_seed(0)
    _noised(transformers.Data2VecVisionModel(config), 11).save_pretrained(str(tmp / 'data2vec'))
    return tmp / 'data2vec'


def saved_model(**kwargs: Any) -> Callable[[Path], Path]:
    """A model of the family built in memory and written by ``vit_port.save_pretrained_folder`` (the API's other
    writer: CPVT and the patch-embedding options have no source format)."""
    def build(tmp: Path) -> Path:
        from checkpoint_fixtures import randomize
        from timm_vit_variants import SimpleVisionTransformer
        model = randomize(SimpleVisionTransformer(embed_dim=32, depth=2, num_heads=2, mlp_dim=64, patch_size=8,
                                                  img_size=32, num_classes=5, **kwargs), seed=5)
        return vit_port.save_pretrained_folder(model, tmp / 'saved')
    return build


CASES: List[Case] = [
    # Google's flax archives (tests/data/reference, written by big_vision / vit_jax), first block only
    Case('bigvision_sincos_gap', 'big_vision .npz: sin-cos table, GAP, pre-logits (tanh), gelu_tanh',
         first_block(REF / 'bigvision_sincos_gap.npz'), (32, 48), dict(img_size=32)),
    Case('bigvision_learn_tok', 'big_vision .npz: learned table without a cls slot, [CLS] pooling',
         first_block(REF / 'bigvision_learn_tok.npz'), (24, 40)),
    Case('vitjax_resized', 'vit_jax .npz: learned table with a cls slot, converted to a non-square 48x32',
         first_block(REF / 'vitjax_tiny.npz'), (32, 40), dict(img_size=(48, 32))),
    Case('flexivit', "FlexiViT .npz: 32px kernel PI-resized to patch 8, 'flexi' table resize",
         first_block(REF / 'flexivit_tiny.npz'), (32, 64), dict(img_size=48, patch_size=8, resample_like='flexi')),
    # SigLIP (transformers; tests/test_siglip.py, tests/test_naflex.py)
    Case('siglip', 'transformers SiglipVisionModel: MAP head, gelu_tanh, no classes', hf_siglip_folder, (20, 36)),
    Case('siglip2_naflex', 'transformers Siglip2VisionModel: NaFlex tower, linear patch embedding, MAP head',
         hf_siglip2_folder, (12, 28)),
    # timm and transformers ViTs (tests/checkpoint_fixtures.py)
    Case('timm_vit', 'timm save_for_hf folder: [CLS] pooling, table with a cls slot, exact GELU',
         timm_folder, (24, 40)),
    Case('hf_vit_bf16', 'transformers ViT folder (eps 1e-12), written in bfloat16 (model_args.dtype)',
         hf_vit_folder, (24, 40), dict(dtype='bfloat16')),
    # CLIP (tests/test_openai_clip.py, tests/test_clip.py; open_clip configs of tests/data/reference_clip)
    Case('openai_clip_fp16', 'OpenAI TorchScript archive: ln_pre, projection head without bias, patch conv without '
         'bias, quick_gelu, [CLS] table slot; written in float16 (model_args.dtype)', openai_archive, (16, 32),
         dict(dtype='float16')),
    Case('openclip_quickgelu', 'OpenCLIP folder: ln_pre, projection, quick_gelu', open_clip_folder(
        'openclip_b16_quickgelu_tiny', **NARROW_CLIP), (16, 32)),
    Case('clipa', 'CLIPA (OpenCLIP folder): no ln_pre, mean pooling, final LN after the pool (fc_norm), projection',
         open_clip_folder('clipa_l14_tiny', **NARROW_CLIP), (16, 32)),
    Case('coca', "CoCa (OpenCLIP folder): attentional pooler ('coca' pool)", open_clip_folder(
        'coca_l14_tiny', **NARROW_CLIP), (16, 32)),
    Case('hf_clip', 'transformers CLIPVisionModelWithProjection: ln_pre, projection, quick_gelu, eps 1e-5',
         hf_clip_folder, (16, 32)),
    # DINOv2, DINOv3, RoPE-ViT (tests/data/reference_dino, written by each project's code), first block only
    Case('dinov2', "DINOv2 hub file: LayerScale, [CLS] table slot, DINOv2's own table resize",
         first_block(DINO / 'dinov2_tiny.pth'), (56, 98), dict(num_heads=2)),
    Case('dinov2_reg4_resized', 'DINOv2 with 4 registers, converted to a non-square 126x98',
         first_block(DINO / 'dinov2_tiny_reg4.pth'), (84, 112), dict(num_heads=2, img_size=(126, 98))),
    Case('dinov2_swiglu', 'DINOv2 ViT-g form: packed SwiGLU (swiglu_packed)',
         first_block(DINO / 'dinov2_tiny_swiglu.pth'), (56, 98), dict(num_heads=2)),
    Case('dinov3', 'DINOv3: RoPE (dinov3, stored periods), 4 registers, masked k bias',
         first_block(DINO / 'dinov3_tiny_fp32periods.pth'), (48, 80), dict(num_heads=2, img_size=64)),
    Case('dinov3_untied_swiglu', 'DINOv3 H+ form: untied [CLS]/patch norms, split SwiGLU',
         first_block(DINO / 'dinov3_tiny_untied_swiglu.pth'), (48, 80), dict(num_heads=2, img_size=64)),
    Case('ropevit_axial_ape', 'RoPE-ViT rope_axial_ape: axial RoPE plus a learned table (learn+rope)',
         first_block(DINO / 'ropevit_tiny_axial_ape.pth'), (64, 112), dict(num_heads=2)),
    Case('ropevit_mixed', 'RoPE-ViT rope_mixed: learned per-layer, per-head frequencies, no table',
         first_block(DINO / 'ropevit_tiny_mixed.pth'), (48, 80), dict(num_heads=2, img_size=64)),
    # DeiT (tests/test_deit.py; the DeiT-III layout is RoPE-ViT rope_axial_ape's, tests/test_deit3.py)
    Case('deit', "DeiT {'model': ...} file: [CLS] table slot", deit_file('deit_tiny_patch16_224'),
         (12, 20), dict(num_heads=2)),
    Case('deit_distilled', 'DeiT distilled: dist token with its table slot, head_dist',
         deit_file('deit_tiny_distilled_patch16_224'), (12, 20), dict(num_heads=2)),
    Case('deit3', "DeiT-III file (LayerScale, table without a cls slot, DeiT's table resize), read as DeiT-III by "
         'its name', first_block(DINO / 'ropevit_tiny_axial_ape.pth', 'deit_3_tiny.pth'), (64, 112),
         dict(num_heads=2)),
    # BEiT family (tests/data/reference_beit, written by unilm's code), first block only
    Case('beit_abs_relpos', 'BEiT v1: learned table with [CLS] slot plus relative position bias, [CLS] pooling',
         first_block(BEIT / 'beit_ft_abs_cls.pth'), (64, 40)),
    Case('beit2_meanpool', 'BEiT v2: relative position bias only, LayerScale, mean pooling with fc_norm',
         first_block(BEIT / 'beit2_ft_meanpool.pth'), (64, 40)),
    Case('beit2_pt_shared', 'BEiT v2 pretraining file: shared relative position table, no head',
         first_block(BEIT / 'beit2_pt_shared.pth'), (64, 40)),
    Case('data2vec', 'transformers data2vec-vision folder (tests/test_beit.py): shared relpos table plus learned '
         'table, eps 1e-12', data2vec_folder, (16, 32)),
    # EVA-02 (tests/data/reference_eva02, written by EVA's code), first block only
    Case('eva02_ts', 'EVA-02 Ti/S: eva block, fused qkv with q/v bias, packed SwiGLU, RoPE (eva02), mean pool',
         first_block(EVA02 / 'eva02_ft_ts_module.pth'), (8, 20), dict(num_heads=2)),
    Case('eva02_bl_ls', 'EVA-02 B/L: split q/k/v, SwiGLU with sub-LN (mlp_norm), LayerScale',
         first_block(EVA02 / 'eva02_ft_bl_ls_model.pth'), (8, 20), dict(num_heads=2)),
    # written by vit_port.save_pretrained_folder
    Case('cpvt', "CPVT: 'sincos+cpe' (conditional position encoding after block 0), [CLS] pooling",
         saved_model(pos_embed='sincos+cpe', class_token=True, global_pool='token'), (24, 40), None),
    Case('patch_options', "conv_stem patch embedding, PatchNorm after it, learned table, grid_mode 'pool', MAP head",
         saved_model(patch_embed='conv_stem', patch_norm='post', pos_embed='learn', grid_mode='pool',
                     global_pool='map'), (24, 40), None),
]


def outputs(folder: Path, other: Size) -> Dict[str, torch.Tensor]:
    """What the folder, loaded as a user loads it, gives at its stored size and at ``other``."""
    model = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
    dtype = next(model.parameters()).dtype
    sizes = [tuple(model.config.img_size), other]
    out: Dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for h, w in sizes:
            x = release_input((h, w), model.config.in_chans, dtype)
            out[f'logits@{h}x{w}'] = model(x)
            out[f'features@{h}x{w}'] = model.forward_features(x)
        images = [release_input(s, model.config.in_chans, dtype)[0] for s in sizes]
        try:
            out['logits@' + '+'.join(f'{h}x{w}' for h, w in sizes)] = model(images)
        except ViTVariantsError:  # this model takes no list of images (grid_mode 'pool')
            pass
    return {k: v.contiguous() for k, v in out.items()}


def code_commit() -> str:
    """The commit of the package code that writes the folders (refusing uncommitted changes to it)."""
    paths = ['timm_vit_variants', 'porting']
    if subprocess.run(['git', 'status', '--porcelain', *paths], cwd=ROOT, capture_output=True, text=True).stdout:
        raise SystemExit('timm_vit_variants/ or porting/ has uncommitted changes: commit them or stash them first')
    return subprocess.run(['git', 'log', '-1', '--format=%h', '--', *paths], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()


def write_case(case: Case, commit: str) -> Dict[str, Any]:
    dest = HERE / case.name
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        written = case.source(tmp_path)
        if case.options is not None:
            result = vit_port.convert(written, tmp_path / 'out', **case.options)
            if result.verification.status != 'passed':
                raise SystemExit(f'{case.name}: {result.verification.summary()}')
            written = result.out
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir()
        for name in ('config.json', 'model.safetensors'):
            shutil.copy(written / name, dest / name)
    expected = outputs(dest, case.other)
    save_file(expected, str(dest / 'expected.safetensors'),
              metadata={'written_by': f'timm-vit-variants {RELEASE} ({commit})'})
    config = json.loads((dest / 'config.json').read_text())
    return dict(name=case.name, covers=case.covers, architecture=config['architecture'],
                sizes=list(dict.fromkeys(k.split('@')[1] for k in expected)),
                bytes=sum(p.stat().st_size for p in dest.iterdir()))


def write_readme(rows: List[Dict[str, Any]], commit: str) -> None:
    total = sum(r['bytes'] for r in rows)
    table = '\n'.join(f"| `{r['name']}` | {r['covers']} | `{r['architecture']}` | {', '.join(r['sizes'])} | "
                      f"{r['bytes']:,} |" for r in rows)
    (HERE / 'README.md').write_text(f"""# Hub folders release {RELEASE} converted to

What `vit-port convert` (and `vit_port.save_pretrained_folder`) of timm-vit-variants {RELEASE} wrote, frozen: one
tiny folder per model family and source form, so that a later release can prove that every `config.json` this
release wrote still loads, with the same outputs, and users never reconvert. `tests/test_release_conversions.py`
loads each folder with `timm.create_model('local-dir:FOLDER', pretrained=True)` and compares its outputs with the
folder's `expected.safetensors` (bound 1e-6; on the release that wrote them they are bitwise equal).

Each folder holds the `config.json` and `model.safetensors` exactly as the conversion wrote them (the model card,
`README.md`, is left out), and `expected.safetensors`: what the loaded model gives on
`tests/test_release_conversions.release_input` (`torch.randn(2, C, H, W)` from `torch.Generator().manual_seed(0)`,
in the weights' dtype) at the stored size and at one other size (non-square): `logits@HxW` (`model(x)`),
`features@HxW` (`model.forward_features(x)`), and `logits@HxW+HxW` (a list of one image of each size, the NaFlex
path) where the model takes a list.

Written by the code of commit `{commit}` (version {RELEASE}, timm {timm.__version__}, torch {torch.__version__}).
The sources are the tests' fixtures (see `generate.py`): the committed files under `tests/data/reference*/`
(written by each family's own code) cut to their first block, and the tests' builders (timm, transformers,
open_clip models), narrower, to keep the data small. Not frozen here, for their size (64 wide): big_vision's SigLIP
and NaFlex `.npz` towers (their family's rows come from transformers' SigLIP and SigLIP 2 folders). Regenerating is
only meaningful on that release (the script refuses another version or changed package code); never regenerate to
make the test pass:

    PYTHONPATH=. python tests/data/release_conversions/generate.py

| folder | covers | architecture | sizes | bytes |
|---|---|---|---|---|
{table}

{len(rows)} folders, {total:,} bytes in all.
""", encoding='utf-8')


def main(names: Optional[List[str]] = None) -> None:
    if timm_vit_variants.__version__ != RELEASE:
        raise SystemExit(f'these folders freeze release {RELEASE}; this is {timm_vit_variants.__version__}')
    torch.set_num_threads(1)
    commit = code_commit()
    rows = []
    for case in CASES:
        if names and case.name not in names:
            continue
        rows.append(write_case(case, commit))
        print(f"{rows[-1]['name']}: {rows[-1]['bytes']:,} bytes", flush=True)
    if not names:
        write_readme(rows, commit)


if __name__ == '__main__':
    main(sys.argv[1:])
