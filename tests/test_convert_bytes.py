"""The zero-copy writer lays down the same bytes as the streaming writer it replaced.

The sha256 of every ``model.safetensors`` below was produced by the previous writer (commit 18f9d0d:
read each array, convert it, ``torch.cat`` the q/k/v, write it with ``BufferedWriter``) from the
same seeded fixtures; the current pipeline (mapped sources, fills in place, pre-allocated mapped
output) must reproduce them byte for byte, resized and re-headed outputs included.
"""
import hashlib

import pytest

from porting.cli import main

import checkpoint_fixtures as F

PREVIOUS_WRITER = {
    'pth': 'b9542f79b31c7fbb9fcf1a0a2270d266c0db95696aa0af6475f7e22adf85f168',
    'safetensors': 'b9542f79b31c7fbb9fcf1a0a2270d266c0db95696aa0af6475f7e22adf85f168',
    'timm_folder': 'b9542f79b31c7fbb9fcf1a0a2270d266c0db95696aa0af6475f7e22adf85f168',
    'hf': 'bd3ab5cfbae0ca0362f43deccd2b2271c23b4152f4759bc5675c1bf9c8619b73',
    'bv_sincos': '165bed4d8ce9503684ccfd34b94a25e7732b052ea5c2c1a0cb9c8d9db530f318',
    'bv_learn': '3a92f3e4f25ca15725a612bfdff8cdb22a598081d832085128bcd4b3d833a46d',
    'bv_rep': '97a1ace379f1660eb86e9bb068b05d57d3215fc81190cceb41e14cd2e9807e5e',
    'vitjax': 'aacefeec25ffc1eb92185923903f6a39bc37007ae6a4becf50e10f4872089edb',
    'vitjax_resized': '6166d2c1df725792b7459d5958f20e960ab9ce7c1ffbca887850ed42aa6892c8',
    'vitjax_patch': 'cce7e1d525ce280dfd1285f54f59d904c62b6d1cc38e5bd51baf5e7658183110',
    'bv_learn_resized': '9c4ad110f23ff8299b80caef8fcc1699dfe575241a8d8900fe4ca92f125736c6',
    'hf_newhead': '727c5d7e98ee422116efedaec275db3f06bc0ffdf2992081d4c7f95a1baf2a1d',
}

CASES = {
    'pth': ('timm_pth', ['--num-heads', '2']), 'safetensors': ('timm_safetensors', ['--num-heads', '2']),
    'timm_folder': ('timm_folder', []), 'hf': ('hf', []), 'bv_sincos': ('bigvision_sincos_gap', []),
    'bv_learn': ('bigvision_learn_tok', []), 'bv_rep': ('bigvision_rep_size', []), 'vitjax': ('vitjax', []),
    'vitjax_resized': ('vitjax', ['--img-size', '56', '40']), 'vitjax_patch': ('vitjax', ['--patch-size', '4']),
    'bv_learn_resized': ('bigvision_learn_tok', ['--img-size', '48']), 'hf_newhead': ('hf', ['--num-classes', '3']),
}


@pytest.fixture(scope='module')
def sources(tmp_path_factory):
    return F.write_sources(tmp_path_factory.mktemp('sources'))


@pytest.mark.parametrize('case', sorted(CASES))
def test_weights_are_byte_identical_to_the_previous_writer(sources, tmp_path, capsys, case):
    source, flags = CASES[case]
    assert main(['convert', str(sources[source]), str(tmp_path / 'out'), '--no-verify', *flags]) == 0
    digest = hashlib.sha256((tmp_path / 'out' / 'model.safetensors').read_bytes()).hexdigest()
    assert digest == PREVIOUS_WRITER[case]
