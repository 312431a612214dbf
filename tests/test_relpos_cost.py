"""What relative positions (BEiT) may cost, bounded before anything is made: each block's bias and index grow with
the square of an image's tokens, and a NaFlex image's table with its grid's extent. Each case of a costly input is
refused with one ViTVariantsError naming the ``rel_pos_bytes`` limit, in one subprocess under an address-space
cap (a refusal that came after allocating, or an allocation nobody refused, fails the test instead of swapping
the machine); the same input within the limits runs, as an NCHW batch and as a packed list."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from timm.models.beit import gen_relative_position_index

import timm_vit_variants  # noqa: F401
from porting.cli import main
from timm_vit_variants import Limits, SimpleVisionTransformer, ViTVariantsError
from timm_vit_variants.packing import MASK_BUDGET, pack_sequences

REPO = Path(__file__).resolve().parents[1]
BEIT = REPO / 'tests' / 'data' / 'reference_beit' / 'beit2_ft_meanpool.pth'  # patch 8, a 6x6 grid, 2 heads
HANG = 600  # only guards against a hang: the subprocess needs seconds
REFUSED_WITHIN = 10  # seconds each refusal may take, on a busy machine
TINY = dict(embed_dim=32, depth=2, num_heads=2, patch_size=8, img_size=32, num_classes=0, class_token=True,
            global_pool='avg', fc_norm=True, pos_embed='relpos')

_BOUNDED = r'''
import copy, json, resource, time
import timm, torch
import timm_vit_variants

with open('/proc/self/statm') as f:
    used = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + (4 << 30), resource.RLIM_INFINITY))  # 4 GiB beyond the imports

torch.manual_seed(0)
model = timm.create_model('simple_vit_base_patch16_beitv2_224', embed_dim=96, depth=1, num_heads=12, mlp_dim=192,
                          num_classes=0).eval()
with torch.no_grad():
    model.rel_pos.tables.normal_()

def case(name, fn):
    start = time.monotonic()
    try:
        result = {'ok': fn()}
    except Exception as e:
        result = {'error': type(e).__name__, 'message': str(e)[:600], 'key': getattr(e, 'key', None)}
    print(json.dumps(dict(result, case=name, seconds=time.monotonic() - start)), flush=True)

def run(x):
    with torch.no_grad():
        return model(x)

def image(side):
    return lambda: run(torch.randn(1, 3, side, side)) and None

def far():  # one patch at (4000, 4000): a 4001x4001 grid's table
    return run({'patches': torch.randn(1, 1, 768), 'patch_coord': torch.tensor([[[4000, 4000]]])}) and None

def strip():  # 16001 patches in one row: the bias over 16002 tokens
    coords = torch.stack([torch.zeros(16001, dtype=torch.long), torch.arange(16001)], -1)[None]
    return run({'patches': torch.randn(1, 16001, 768), 'patch_coord': coords}) and None

def resized():
    copy.deepcopy(model).set_input_size(img_size=4096)

images = torch.randn(4, 3, 1024, 1024, generator=torch.Generator().manual_seed(1))
def nchw_and_packed():  # the same four images as an NCHW batch and as a packed list
    batch = run(images)
    packed = run(list(images))
    return float((batch - packed).abs().max())

case('nchw_2048', image(2048))
case('nchw_4096', image(4096))
case('far', far)
case('strip', strip)
case('set_input_size', resized)
case('nchw_and_packed', nchw_and_packed)
'''


def test_costly_relative_positions_are_refused_and_the_rest_runs_within_memory(max_delta):
    proc = subprocess.run([sys.executable, '-c', _BOUNDED], cwd=REPO, capture_output=True, text=True, timeout=HANG)
    results = {r['case']: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(results) == {'nchw_2048', 'nchw_4096', 'far', 'strip', 'set_input_size', 'nchw_and_packed'}, \
        proc.stderr[-2000:]
    refused = {
        'nchw_2048': (None, r'an image of 16384 patch tokens on a 128x128 grid need 14 GiB'),
        'nchw_4096': (None, 'an image of 65536 patch tokens on a 256x256 grid'),
        'far': ('patch_coord', r'on a 4001x4001 grid need .*the tables resized to 1 other grid\(s\), 5\.72 GiB'),
        'strip': ('patch_coord', 'an image of 16001 patch tokens on a 1x16001 grid'),
        'set_input_size': (None, 'the nominal 256x256 grid'),
    }
    for name, (key, pattern) in refused.items():
        result = results[name]
        assert result.get('error') == 'ViTVariantsError', result
        assert re.search(pattern, result['message']) and result['key'] == key, result
        assert re.search(r"rel_pos_bytes limit of 2 GiB; refusing before making them .*lift the model's "
                         r'limits\.rel_pos_bytes to \d+\)$', result['message']), result
        assert result['seconds'] < REFUSED_WITHIN, result
    both = results['nchw_and_packed']
    assert 'ok' in both, both
    max_delta('four 1024x1024 images, packed list vs NCHW batch (12 heads)', both['ok'], 0.0, 1e-5)


def test_the_index_is_timms_at_every_token_and_made_from_coordinates_alone():
    from timm_vit_variants.relpos import relative_index  # (a new name: imported here, so the other tests run)
    for grid in ((1, 1), (3, 5), (6, 6), (7, 2)):
        coords = torch.stack(torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing='ij'), -1)
        coords = coords.reshape(-1, 2)
        whole = gen_relative_position_index(grid)
        assert torch.equal(relative_index(coords, grid), whole)
        some = torch.randperm(len(coords), generator=torch.Generator().manual_seed(0))[:max(1, len(coords) // 2)]
        places = torch.cat([torch.zeros(1, dtype=torch.long), 1 + some])
        assert torch.equal(relative_index(coords[some], grid), whole[places][:, places])


def test_a_packed_chunk_counts_the_bias_in_its_budget():
    """Four 4097-token images with a 12-head bias (60 bytes a pair): each takes a chunk of its own, where the mask
    alone (4 bytes a pair) would have put three in one, and their bias (2.4 GB) outside any budget."""
    assert [len(c.images) for c in pack_sequences([4097] * 4, pair_bytes=4)] == [3, 1]
    chunks = pack_sequences([4097] * 4, pair_bytes=4 + 12 * 4 + 8)
    assert [c.images for c in chunks] == [[0], [1], [2], [3]] and all(c.attn_mask() is None for c in chunks)
    for chunk in pack_sequences([300] * 40 + [50] * 100, pair_bytes=60):
        assert chunk.rows * chunk.capacity ** 2 * 60 <= MASK_BUDGET


def test_the_limit_is_the_models_and_can_be_lifted():
    torch.manual_seed(0)
    model = SimpleVisionTransformer(**TINY, limits=Limits(rel_pos_bytes=1 << 20)).eval()
    x = torch.randn(1, 3, 64, 64)  # 65 tokens: 2 heads x 65^2 floats and the index, 50 kB; its 8x8 grid's tables
    small = [torch.randn(3, 16, 16), torch.randn(3, 24, 8)]
    with torch.no_grad():
        want = model(x)
        model.limits = Limits(rel_pos_bytes=40_000)
        with pytest.raises(ViTVariantsError, match=r'rel_pos_bytes limit of .*lift the model.s limits\.rel_pos_bytes '
                                                   r'to \d+') as e:
            model(x)
        assert e.value.needs.startswith('limit:rel_pos_bytes=')
        assert model(small).shape == (2, 32)  # within it, as a list too
        model.limits = Limits(rel_pos_bytes=int(e.value.needs.split('=')[1]))
        assert torch.equal(model(x), want)
    with pytest.raises(ViTVariantsError, match='the nominal 64x64 grid'):
        model.set_input_size(img_size=512)
    assert model.config.img_size == (32, 32) and model.rel_pos.index.shape == (17, 17)  # nothing changed


def test_a_config_claiming_a_costly_grid_is_refused_before_it_is_built():
    name = 'simple_vit_base_patch16_beitv2_224'
    with pytest.raises(ViTVariantsError, match='rel_pos_bytes 15034220600 exceeds the limit') as e:
        timm.create_model(name, img_size=2048, pretrained=False)
    assert e.value.needs == 'limit:rel_pos_bytes=15034220600'
    with pytest.raises(ViTVariantsError, match='rel_pos_bytes'):
        timm.create_model(name, img_size=448, depth=1, limits=Limits(rel_pos_bytes=20 << 20))
    model = timm.create_model(name, img_size=448, depth=1, embed_dim=96, mlp_dim=96,
                              limits=Limits(rel_pos_bytes=40 << 20))
    assert model.limits.rel_pos_bytes == 40 << 20  # the model keeps the caller's limits for its inputs


def test_a_conversion_at_a_costly_grid_is_refused_before_any_work(tmp_path, capsys):
    """A BEiT file to 1024 px at patch 8, 16384 tokens: the target check's bias alone would be 4.3 GB."""
    assert main(['convert', str(BEIT), str(tmp_path / 'out'), '--img-size', '1024']) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'rel_pos_bytes 4295491600 exceeds the limit' in err
    assert err.endswith('(lift it with --limit rel_pos_bytes=4295491600)') and not (tmp_path / 'out').exists()
    # within the limit, its check would hold more than the budget says may be held: refused, naming it
    assert main(['convert', str(BEIT), str(tmp_path / 'out'), '--img-size', '512', '--memory-budget', '500MB']) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "key 'memory_budget'" in err and 'over the 500 MB memory budget' in err
    assert 'raise --memory-budget, or give --no-verify' in err and not (tmp_path / 'out').exists()
