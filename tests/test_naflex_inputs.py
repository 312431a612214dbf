"""NaFlex inputs, tried as a careless or hostile user would: one image's NaN stays in its own output, every
input form's cost is bounded before anything is allocated, and bad inputs get one ViTVariantsError naming
them. The costly cases run in one subprocess under an address-space limit, so a refusal that came after
allocating (or an allocation nobody refused) fails the test instead of swapping the machine."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.naflex_transforms import ResizeToBudget, naflex_batch

from test_naflex import _model  # the same tiny model the NaFlex tests use

REPO = Path(__file__).resolve().parents[1]
ALONE_TOL = 1e-5
# A timeout that only guards against a hang: the subprocess needs seconds.
HANG = 600


def _images(sizes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(3, h, w, generator=generator) for h, w in sizes]


# -- one image's NaN stays its own ----------------------------------------------------------------------------------

@pytest.mark.parametrize('option', [
    dict(pos_embed='sincos', global_pool='avg'),
    dict(pos_embed='learn+cpe', global_pool='map', class_token=True),
    dict(pos_embed='learn', global_pool='token', class_token=True, pos_embed_cls_slot=True),
])
@pytest.mark.parametrize('form', ['list', 'dict'])
def test_a_non_finite_image_spoils_only_its_own_output(option, form, max_delta):
    model = _model(**option)
    images = _images([(24, 40), (16, 16), (32, 24), (8, 16)])
    images[1][1, 3, 5] = float('nan')
    images[3][0, 0, 0] = float('inf')
    with torch.no_grad():
        alone = [model(im[None])[0] for im in images]
        together = model(images if form == 'list' else naflex_batch(images, 8))
    for i, expected in enumerate(alone):
        if i in (1, 3):
            assert not torch.isfinite(expected).all()  # the spoiled image is spoiled alone too
            assert torch.equal(torch.isfinite(together[i]), torch.isfinite(expected))
        else:
            max_delta(f'{form} with a NaN and an Inf image vs alone, image {i}', together[i], expected, ALONE_TOL)


# -- bad inputs: one ViTVariantsError naming the input --------------------------------------------------------------

def test_empty_batches_are_refused():
    model = _model()
    empty = {'patches': torch.zeros(0, 4, 192), 'patch_coord': torch.zeros(0, 4, 2, dtype=torch.long),
             'patch_valid': torch.zeros(0, 4, dtype=torch.bool)}
    with pytest.raises(ViTVariantsError, match="'patches'.*empty"):
        model(empty)
    with pytest.raises(ViTVariantsError, match="'patches'.*empty"):
        model(dict(empty, patches=torch.zeros(2, 0, 192), patch_coord=torch.zeros(2, 0, 2, dtype=torch.long),
                   patch_valid=torch.zeros(2, 0, dtype=torch.bool)))
    with pytest.raises(ViTVariantsError, match='no images'):
        naflex_batch([], 8)


def test_channel_mismatches_are_refused_naming_the_image():
    images = [torch.randn(3, 16, 16), torch.randn(1, 16, 16)]
    with pytest.raises(ViTVariantsError, match='image 1 .*1 channel.*image 0 has 3'):
        naflex_batch(images, 8)
    for embed in ('linear', 'overlap'):  # both list paths: one matmul, or a patch embedding per size
        with pytest.raises(ViTVariantsError, match=r'image 1 of the list has shape \(1, 16, 16\)'):
            _model(patch_embed=embed)(images)


def test_float_and_out_of_range_coordinates_are_refused():
    model = _model()
    batch = naflex_batch(_images([(16, 24), (8, 8)]), 8)
    with pytest.raises(ViTVariantsError, match="'patch_coord'.*integer.*float32"):
        model(dict(batch, patch_coord=batch['patch_coord'].float() + 0.5))
    far = batch['patch_coord'].clone()
    far[0, 0, 1] = 1 << 24
    with pytest.raises(ViTVariantsError, match=r"'patch_coord'.*\[0, 2\*\*24\)"):
        model(dict(batch, patch_coord=far))
    repeated = batch['patch_coord'].clone()
    repeated[0, 1] = repeated[0, 0]
    with pytest.raises(ViTVariantsError, match=r"'patch_coord'.*image 0 .*\(0, 0\) to more than one"):
        model(dict(batch, patch_coord=repeated))
    repeated[0, 1] = 7  # the padding's coordinates are never read: only valid patches must differ
    batch['patch_valid'][1, :] = False
    batch['patch_valid'][1, 0] = True
    batch['patch_coord'][1, 1:] = 0
    assert torch.isfinite(model(batch)).all()


def test_integer_images_are_refused_in_every_form():
    model = _model()
    u8 = torch.randint(0, 255, (3, 16, 16), dtype=torch.uint8)
    with pytest.raises(ViTVariantsError, match='image 0 of the list is torch.uint8.*floating point'):
        model([u8])
    with pytest.raises(ViTVariantsError, match='floating point.*torch.uint8'):
        model(u8[None])
    with pytest.raises(ViTVariantsError, match="'patches'.*floating point.*torch.uint8"):
        model(naflex_batch([u8], 8))


def test_zero_sized_images_are_refused():
    with pytest.raises(ViTVariantsError, match='0x50'):
        ResizeToBudget(16, 64)(torch.zeros(3, 0, 50))
    with pytest.raises(ViTVariantsError, match='image 1 .*no patches'):
        naflex_batch([torch.zeros(3, 16, 16), torch.zeros(3, 0, 50)], 8)
    with pytest.raises(ViTVariantsError, match=r'image 1 of the list has shape \(3, 0, 50\)'):
        _model()([torch.zeros(3, 16, 16), torch.zeros(3, 0, 50)])


# -- bounded cost ----------------------------------------------------------------------------------------------------

def test_the_packed_mask_never_grows_past_its_budget():
    """100 images of 10^4 patches each: today's one mask would be 100 x (10^4)^2 floats (40 GB)."""
    from timm_vit_variants.packing import MASK_BUDGET, pack_sequences  # (new names: imported here, so the other
    # tests of this module run, and fail, on the code before)
    for lengths in ([10_000] * 100, [10_000] + [100] * 100, [3, 5000, 5000, 7] * 3, [196] * 64):
        chunks = pack_sequences(lengths, alone={1})
        assert sorted(i for c in chunks for i in c.images) == list(range(len(lengths)))
        for chunk in chunks:
            assert chunk.rows * chunk.capacity ** 2 * 4 <= MASK_BUDGET or chunk.rows == 1
            if chunk.rows * chunk.capacity ** 2 * 4 > MASK_BUDGET:  # over budget only as one sequence alone
                assert len(chunk.images) == 1 and chunk.attn_mask() is None
        chunk = next(c for c in chunks if 1 in c.images)  # an image marked alone has a row of its own
        row = chunk.image[(chunk.image == 1).any(1)]
        assert set(row.unique().tolist()) <= {1, -1}
    assert len(pack_sequences([196] * 64)) == 1  # a workload of ordinary size is still one chunk


_BOUNDED = r'''
import json, resource, sys
import torch
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.naflex_transforms import ResizeToBudget

with open('/proc/self/statm') as f:
    used = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + (2 << 30), resource.RLIM_INFINITY))  # 2 GiB beyond the imports

def case(name, fn):
    try:
        fn()
        print(json.dumps({'case': name, 'ok': True}), flush=True)
    except Exception as e:
        print(json.dumps({'case': name, 'error': type(e).__name__, 'message': str(e)[:300]}), flush=True)

torch.manual_seed(0)
pixel = SimpleVisionTransformer(embed_dim=8, depth=1, num_heads=1, mlp_dim=16, patch_size=1, img_size=100,
                                in_chans=1, patch_embed='linear', num_classes=0).eval()
grid = torch.stack(torch.meshgrid(torch.arange(100), torch.arange(100), indexing='ij'), -1).reshape(-1, 2)

def repeated():  # 10^6 patches whose coordinates repeat one 100x100 grid: a 10^12-element mask today
    coords = grid.repeat(100, 1)[None]
    with torch.no_grad():
        pixel({'patches': torch.randn(1, 10 ** 6, 1), 'patch_coord': coords})

def one_long_and_many_short():  # one row of 10^4 patches, 100 images of 100 beside: 800 MB of mask today
    coords = torch.zeros(101, 10_000, 2, dtype=torch.long)
    valid = torch.zeros(101, 10_000, dtype=torch.bool)
    coords[0], valid[0] = grid, True
    coords[1:, :100], valid[1:, :100] = grid[:100], True
    patches = torch.randn(101, 10_000, 1)
    with torch.no_grad():
        out = pixel({'patches': patches, 'patch_coord': coords, 'patch_valid': valid})
        alone = pixel({'patches': patches[1:2, :100], 'patch_coord': grid[None, :100]})
    assert out.shape == (101, 8) and (out[1] - alone[0]).abs().max() < 1e-5

case('repeated', repeated)
case('one_long_and_many_short', one_long_and_many_short)
case('budget', lambda: ResizeToBudget(16, 10 ** 9))
case('output', lambda: ResizeToBudget(16, 10 ** 6)(torch.zeros(3, 256, 256)))
'''


def test_costly_inputs_are_refused_or_run_within_memory():
    proc = subprocess.run([sys.executable, '-c', _BOUNDED], cwd=REPO, capture_output=True, text=True, timeout=HANG)
    results = {r['case']: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(results) == {'repeated', 'one_long_and_many_short', 'budget', 'output'}, proc.stderr
    refused = {
        'repeated': r"'patch_coord'.*image 0 .*\(0, 0\) to more than one",
        'budget': "max_seq_len.*10+ patches of 16x16 .*needs",
        'output': r'resizing a 256x256 image to \d+x\d+.*needs .*GiB and .*available',
    }
    for name, pattern in refused.items():
        assert results[name].get('error') == 'ViTVariantsError', results[name]
        assert re.search(pattern, results[name]['message']), results[name]
    assert results['one_long_and_many_short'].get('ok'), results['one_long_and_many_short']
