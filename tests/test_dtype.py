"""Half-precision sources, ``--dtype``, and the dtype a written folder keeps (issue 27)."""
import json
import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

import checkpoint_fixtures as F
from porting import cli
from porting.commands.options import DTYPES
from porting.hub_folder import load_folder
from porting.pipeline import convert
from porting.plan import OUTPUT_DTYPES
from porting.verification.conversion import verify_folder
from timm_vit_variants.errors import ViTVariantsError

TOL = 1e-5  # float32 noise: both sides run the same rounded weights upcast to float32
HALF = {'bfloat16': torch.bfloat16, 'float16': torch.float16}
_NP_HALF = {'bfloat16': ml_dtypes.bfloat16, 'float16': np.float16}
DINOV2 = Path(__file__).parent / 'data' / 'reference_dino' / 'dinov2_tiny_swiglu.pth'  # written by DINOv2's code
DINOV3 = DINOV2.parent / 'dinov3_tiny_untied_swiglu.pth'  # written by DINOv3's code


def _state(dtype: torch.dtype):
    return {k: v.to(dtype) for k, v in F.timm_vit().state_dict().items()}


def _source(tmp: Path, kind: str, dtype: str) -> Path:
    """A tiny source of ``kind`` stored in ``dtype`` as its framework writes it."""
    if kind == 'safetensors':
        from safetensors.torch import save_file

        path = tmp / 'vit.safetensors'
        save_file(_state(HALF[dtype]), str(path))
    elif kind == 'pth':
        path = tmp / 'vit.pth'
        torch.save(_state(HALF[dtype]), path)
    elif kind == 'timm_folder':
        from timm.models import save_for_hf

        path = tmp / 'timm_folder'
        save_for_hf(F.timm_vit().to(HALF[dtype]), str(path), safe_serialization=True)
    elif kind == 'dinov2':  # a DINOv2 hub backbone (SwiGLU, LayerScale), as torch.save writes it
        path = tmp / 'dinov2.pth'
        stored = torch.load(DINOV2, weights_only=True)
        torch.save({k: v.to(HALF[dtype]) for k, v in stored.items()}, path)
    elif kind == 'dinov3':  # a DINOv3 hub backbone (SwiGLU, storage tokens, untied norms), its RoPE periods in fp32
        path = tmp / 'dinov3.pth'
        stored = torch.load(DINOV3, weights_only=True)
        torch.save({k: v.float() if k == 'rope_embed.periods' else v.to(HALF[dtype]) for k, v in stored.items()},
                   path)
    elif kind == 'hf':
        from transformers import ViTForImageClassification

        path = F.write_hf_folder(tmp)
        ViTForImageClassification.from_pretrained(str(path)).to(HALF[dtype]).save_pretrained(str(path))
    else:  # flax: np.savez of jax arrays; bfloat16 lands as a 2-byte void ('<V2') member, float16 as '<f2'
        arrays = F.bigvision_arrays('learn', 'tok') if kind == 'bigvision' else F.vitjax_arrays()
        path = tmp / f'{kind}.npz'
        np.savez(path, **{k: v.astype(_NP_HALF[dtype]) for k, v in arrays.items()})
    return path


def _hints(kind: str):
    return {'num_heads': F.HEADS} if kind in ('safetensors', 'pth', 'dinov2', 'dinov3') else {}


def _dtypes(folder: Path):
    from safetensors import safe_open

    with safe_open(str(folder / 'model.safetensors'), 'pt') as f:
        return {f.get_slice(k).get_dtype() for k in f.keys()}


@pytest.mark.parametrize('dtype', ['bfloat16', 'float16'])
@pytest.mark.parametrize('kind', ['safetensors', 'pth', 'timm_folder', 'hf', 'bigvision', 'vitjax', 'dinov2'])
def test_half_precision_source_converts_and_verifies(tmp_path, kind, dtype):
    pytest.importorskip('transformers') if kind == 'hf' else None
    src = _source(tmp_path, kind, dtype)
    result = convert(src, tmp_path / 'out', tol=TOL, **_hints(kind))
    assert result.verification.status == 'passed', result.verification.summary()
    assert max(result.verification.max_abs_logits, result.verification.max_abs_features) <= TOL
    assert result.summary() == f'{tmp_path / "out"} ({dtype} source)'
    assert f'source {dtype}, both run in float32' in result.verification.summary()
    assert _dtypes(tmp_path / 'out') == {'BF16' if dtype == 'bfloat16' else 'F16'}  # 'source': kept as stored
    cfg = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert cfg['model_args']['dtype'] == dtype and cfg['conversion']['source_dtype'] == dtype
    assert f'**Source dtype:** `{dtype}`' in (tmp_path / 'out' / 'README.md').read_text()


def test_fp32_to_bfloat16_verifies_within_the_stated_bound(tmp_path):
    src = F.write_timm_folder(tmp_path)
    result = convert(src, tmp_path / 'out', dtype='bfloat16', tol=TOL)
    v = result.verification
    assert v.status == 'passed' and v.tolerance == 0.125, v.summary()
    assert 1e-5 < max(v.max_abs_logits, v.max_abs_features) <= 0.125  # the cast rounded, within the bound
    line = v.summary()
    assert 'source float32, written as bfloat16' in line and 'bound 0.125, 64x the bfloat16 unit roundoff' in line
    assert 'the conversion itself on the uncast source: max|dlogits|=' in line and f'(tol {TOL:g}) passed' in line
    assert result.summary() == f'{tmp_path / "out"} (float32 source, written as bfloat16)'
    assert _dtypes(tmp_path / 'out') == {'BF16'}
    # vit-port verify applies the same bound to a folder that records the cast
    again = verify_folder(src, tmp_path / 'out', tol=TOL)
    assert again.status == 'passed' and again.max_abs_logits == v.max_abs_logits


@pytest.mark.parametrize('suffix', ['.pth', '.safetensors'])
def test_round_trip_keeps_the_dtype(tmp_path, suffix):
    """A bf16 source written as bf16, then loaded by timm's local-dir: and by load_folder, stays bf16."""
    import timm

    import timm_vit_variants  # noqa: F401

    src = _source(tmp_path, suffix[1:], 'bfloat16')
    convert(src, tmp_path / 'out', num_heads=F.HEADS, tol=TOL)
    model = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    stored = _state(torch.bfloat16)
    assert torch.equal(model.state_dict()['blocks.0.attn.qkv.weight'], stored['blocks.0.attn.qkv.weight'])
    assert {p.dtype for p in load_folder(tmp_path / 'out').parameters()} == {torch.bfloat16}
    assert {p.dtype for p in load_folder(tmp_path / 'out', dtype='float32').parameters()} == {torch.float32}
    # and written back out as float32 by resize (a folder in, a folder out), losslessly
    code = cli.main(['resize', str(tmp_path / 'out'), str(tmp_path / 'big'), '--img-size', '48', '--dtype', 'float32'])
    assert code == 0 and _dtypes(tmp_path / 'big') == {'F32'}
    assert 'model_args' in json.loads((tmp_path / 'big' / 'config.json').read_text())
    assert 'dtype' not in json.loads((tmp_path / 'big' / 'config.json').read_text())['model_args']


def test_cli_choices_mirror_the_plan():
    assert DTYPES == OUTPUT_DTYPES


def _error_lines(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    return [line for line in err if line.startswith('error:')], err


@pytest.mark.parametrize('argv, message', [
    (['--dtype', 'int8'], "argument --dtype: invalid choice: 'int8'"),
    (['--memory-budget', '0'], 'argument --memory-budget: size must be at least one byte'),
    (['--memory-budget=-1GB'], 'argument --memory-budget: size must be at least one byte'),
])
def test_bad_options_are_one_usage_error(tmp_path, capsys, argv, message):
    src = F.write_timm_folder(tmp_path)
    assert cli.main(['convert', str(src), str(tmp_path / 'out'), *argv]) == 2
    errors, err = _error_lines(capsys)
    assert len(errors) == 1 and message in errors[0], err  # argparse's usage above it, as for every usage error
    assert not (tmp_path / 'out').exists()


def test_bad_dtype_keyword_is_refused(tmp_path):
    with pytest.raises(ViTVariantsError, match="dtype must be one of source, float32, bfloat16, float16, got 'int8'"):
        convert(F.write_timm_folder(tmp_path), tmp_path / 'out', dtype='int8')
    assert not (tmp_path / 'out').exists()


def test_dtypes_no_framework_writes_are_refused(tmp_path, capsys):
    from safetensors.torch import save_file

    state = _state(torch.bfloat16)
    state['blocks.1.mlp.fc1.weight'] = state['blocks.1.mlp.fc1.weight'].half()  # bf16 beside fp16
    save_file(state, str(tmp_path / 'mixed.safetensors'))
    assert cli.main(['convert', str(tmp_path / 'mixed.safetensors'), str(tmp_path / 'out'), '--num-heads', '2']) == 1
    errors, err = _error_lines(capsys)
    assert len(errors) == 1 and len(err) == 1, err
    assert "key 'blocks.1.mlp.fc1.weight'" in errors[0] and 'which no framework writes' in errors[0]
    assert 'float16' in errors[0] and 'bfloat16' in errors[0]
    assert not (tmp_path / 'out').exists()


def test_float32_beside_one_half_dtype_is_written_losslessly(tmp_path):
    """Mixed-precision saves keep norms in float32 beside bf16 matrices: 'source' writes float32, exactly."""
    from safetensors.torch import save_file

    state = {k: v if 'norm' in k else v.bfloat16() for k, v in F.timm_vit().state_dict().items()}
    save_file(state, str(tmp_path / 'amp.safetensors'))
    result = convert(tmp_path / 'amp.safetensors', tmp_path / 'out', num_heads=F.HEADS, tol=TOL)
    assert result.plan.source_dtype == 'bfloat16+float32' and _dtypes(tmp_path / 'out') == {'F32'}
    assert result.verification.status == 'passed' and result.verification.max_abs_logits <= TOL


def test_streamed_verification_equals_the_in_memory_one(tmp_path):
    """A tiny --memory-budget forces the streamed mode: the same figures, and every block compared as ours runs."""
    src = F.write_npz(tmp_path, 'bv.npz', F.bigvision_arrays('learn', 'tok'))
    kept = convert(src, tmp_path / 'kept', tol=TOL).verification
    streamed = convert(src, tmp_path / 'streamed', tol=TOL, memory_budget='1kB').verification
    assert kept.status == streamed.status == 'passed'
    assert (kept.max_abs_logits, kept.max_abs_features) == (streamed.max_abs_logits, streamed.max_abs_features)
    assert 'verified in memory (' in kept.summary() and 'streamed' not in kept.summary()
    line = streamed.summary()
    assert 'streamed verification (' in line and 'over the 1 kB memory budget' in line
    assert f'{F.DEPTH} blocks compared as ours ran, max|d| ' in line
    assert (tmp_path / 'kept' / 'model.safetensors').read_bytes() == \
        (tmp_path / 'streamed' / 'model.safetensors').read_bytes()


def _scratch_sizes(monkeypatch):
    """The size of every scratch mapping the verification allocates, in order."""
    from porting.verification import streamed as module

    sizes, allocate = [], module.scratch

    def recorded(nbytes):
        sizes.append(nbytes)
        return allocate(nbytes)

    monkeypatch.setattr(module, 'scratch', recorded)
    return sizes


def _deep_bf16_safetensors(tmp: Path, depth: int = 8) -> Path:
    import timm
    from safetensors.torch import save_file

    model = timm.create_model('vit_tiny_patch16_224', pretrained=False, img_size=F.IMG, patch_size=F.PATCH,
                              embed_dim=F.WIDTH, depth=depth, num_heads=F.HEADS, mlp_ratio=F.MLP / F.WIDTH,
                              num_classes=F.CLASSES, fc_norm=False)
    path = tmp / 'deep.safetensors'
    save_file({k: v.bfloat16() for k, v in model.state_dict().items()}, str(path))
    return path


@pytest.mark.parametrize('kind', ['safetensors', 'timm_folder', 'hf', 'bigvision', 'dinov2', 'dinov3', 'deep'])
def test_streamed_half_precision_source(tmp_path, monkeypatch, kind):
    """Streamed, a bf16 file's float32 upcast is made block by block as each block runs, on both sides, into a
    scratch of one block that every block reuses: the in-memory figures, every block compared (where the reference
    records its blocks), and no scratch mapping above one block's float32 weights (or the embeddings', final norm's
    and head's, when larger), but for the whole model big_vision's reference loads into."""
    from safetensors import safe_open

    src = _deep_bf16_safetensors(tmp_path) if kind == 'deep' else _source(tmp_path, kind, 'bfloat16')
    sizes = _scratch_sizes(monkeypatch)
    kept = convert(src, tmp_path / 'kept', tol=TOL, num_heads=F.HEADS).verification
    in_memory, sizes[:] = list(sizes), []
    streamed = convert(src, tmp_path / 'streamed', tol=TOL, num_heads=F.HEADS, memory_budget=1).verification
    assert kept.status == streamed.status == 'passed', streamed.summary()
    assert (streamed.max_abs_logits, streamed.max_abs_features) == (kept.max_abs_logits, kept.max_abs_features)
    assert streamed.deltas == kept.deltas
    with safe_open(str(tmp_path / 'streamed' / 'model.safetensors'), 'pt') as f:
        shapes = {k: f.get_slice(k).get_shape() for k in f.keys()}
    depth = len({k.split('.')[1] for k in shapes if k.startswith('blocks.')})
    if kind == 'hf':  # transformers' layers record no block outputs: the final outputs only
        assert 'no block outputs to compare' in streamed.summary()
    else:
        assert f'{depth} blocks compared as ours ran' in streamed.summary()

    def fp32_bytes(keys):
        return sum(4 * math.prod(shapes[k]) + 64 for k in keys)  # each tensor aligned to 64 bytes on a scratch

    block = fp32_bytes([k for k in shapes if k.startswith('blocks.0.')])
    rest = fp32_bytes([k for k in shapes if not k.startswith('blocks.')])
    model = fp32_bytes(shapes)
    if kind == 'bigvision':  # timm's npz loader copies into a whole model: the reference materialises it in full
        assert sizes[0] >= model * 0.9, sizes
        sizes = sizes[1:]
    assert sizes and max(sizes) <= max(block, rest) * 1.25, (sizes, block, rest)  # the reference's layout may differ
    assert max(in_memory) >= model * 0.9  # in memory: one whole upcast per side, as before
    if kind == 'deep':
        assert sum(sizes) <= 4 * block < model / 2, (sizes, block, model)


@pytest.mark.parametrize('options', [dict(dtype='bfloat16'), dict(img_size=48)])
def test_streamed_check_of_our_source_model_is_mapped_not_on_the_heap(tmp_path, monkeypatch, options):
    """A cast (checked again on the uncast source) or a resize builds our model at the source geometry from the
    source: streamed, that model's weights go onto a scratch mapping (``materialize``), not the heap; same figures."""
    from porting.verification import conversion

    src = F.write_timm_folder(tmp_path)
    kept = convert(src, tmp_path / 'kept', tol=TOL, **options).verification
    built, materialize = [], conversion.materialize

    def spied(model):
        built.append(type(model).__name__)
        return materialize(model)

    monkeypatch.setattr(conversion, 'materialize', spied)
    streamed = convert(src, tmp_path / 'streamed', tol=TOL, memory_budget=1, **options).verification
    assert kept.status == streamed.status == 'passed', streamed.summary()
    assert streamed.deltas == kept.deltas and 'streamed verification (' in streamed.summary()
    assert built == ['SimpleVisionTransformer']


@pytest.mark.parametrize('budget', [0, -5, '0', 'lots'])
def test_bad_memory_budget_keyword_is_refused(tmp_path, budget):
    with pytest.raises(ViTVariantsError, match='memory_budget'):
        convert(F.write_timm_folder(tmp_path), tmp_path / 'out', memory_budget=budget)
    assert not (tmp_path / 'out').exists()
