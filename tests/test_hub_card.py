"""Model card contents: Hub metadata, usage snippet order, conversion record, verification, token masking."""
import pytest
from huggingface_hub import ModelCard

from porting.card import REPO_PLACEHOLDER, build_model_card, fill_repo_id
from timm_vit_variants.errors import ViTVariantsError

SHA = 'ab' * 32
ARGS = dict(embed_dim=384, depth=12, num_heads=6, patch_size=16, img_size=224, pos_embed='sincos', global_pool='avg')


def _card(**over):
    kw = dict(
        architecture='simple_vit_small_patch16_224', model_args=ARGS, num_classes=3, repo_id='org/vit-s16',
        source={'name': 'S_16.npz', 'format': 'big_vision', 'sha256': SHA},
        conversion_command='vit-port convert S_16.npz out --format big_vision',
        verification={'status': 'passed', 'reference': 'big_vision (flax)', 'max_abs_logits': 1.5e-6,
                      'max_abs_features': 2.5e-6, 'tolerance': 1e-4},
        license='apache-2.0', base_model='google/vit-s16', datasets=['imagenet-1k'], label_names=['a', 'b', 'c'])
    kw.update(over)
    return build_model_card(**kw)


def test_metadata_is_hub_card_data():
    card = _card()
    assert isinstance(card, ModelCard)
    # Parse the serialized text back, as the Hub would.
    data = ModelCard(str(card)).data.to_dict()
    assert data['library_name'] == 'timm'
    assert data['tags'] == ['image-classification', 'timm', 'timm-vit-variants']
    assert data['base_model'] == 'google/vit-s16'
    assert data['license'] == 'apache-2.0'
    assert data['datasets'] == ['imagenet-1k']


def test_unknown_metadata_left_out():
    data = _card(license=None, base_model=None, datasets=None).data.to_dict()
    assert 'license' not in data and 'base_model' not in data and 'datasets' not in data
    assert data['library_name'] == 'timm'


def test_body_describes_model_conversion_and_verification():
    text = _card().text
    assert '`simple_vit_small_patch16_224`' in text
    for k, v in ARGS.items():
        assert f'`{k}`: `{v!r}`' in text
    assert 'S_16.npz' in text and 'big_vision' in text and SHA in text
    assert 'vit-port convert S_16.npz out --format big_vision' in text
    assert 'passed' in text and '1.500e-06' in text and '2.500e-06' in text and '1.000e-04' in text
    assert 'Labels:** a, b, c' in text


def test_usage_imports_plugin_before_create_model():
    text = _card().text
    i_plugin = text.index('import timm_vit_variants')
    i_create = text.index("timm.create_model('hf-hub:org/vit-s16', pretrained=True)")
    assert i_plugin < i_create
    assert 'hf-hub:org/vit-s16@REVISION' in text


def test_skipped_and_failed_verification_are_plain():
    text = _card(verification={'status': 'skipped', 'reason': 'reference library not installed'}).text
    assert 'skipped**: reference library not installed' in text
    text = _card(verification={'status': 'failed', 'reference': 'timm', 'max_abs_logits': 0.5, 'tolerance': 1e-4}).text
    assert '**failed**' in text and '5.000e-01' in text
    assert 'No numerical verification' in _card(verification=None).text


def test_token_never_reaches_card():
    token = 'hf_' + 'Q' * 30
    for cmd in (f'vit-port convert a.npz out --push-to o/n --token {token}',
                f'vit-port convert a.npz out --token={token}',
                'vit-port convert a.npz out --token s3cr3t-value'):
        text = str(_card(conversion_command=cmd))
        assert token not in text and 's3cr3t-value' not in text
        assert '--token' in text


def test_placeholder_filled_at_push_time():
    text = str(_card(repo_id=None))
    assert f"hf-hub:{REPO_PLACEHOLDER}'" in text
    filled = fill_repo_id(text, 'me/my-vit')
    assert REPO_PLACEHOLDER not in filled
    assert "timm.create_model('hf-hub:me/my-vit', pretrained=True)" in filled
    assert "AutoModelForImageClassification.from_pretrained('me/my-vit')" in filled
    assert "pipeline('image-classification', model='me/my-vit')" in filled
    assert ModelCard(filled).data.to_dict()['library_name'] == 'timm'


@pytest.mark.parametrize('over, key', [
    (dict(label_names=['a', 'b']), 'label_names'),
    (dict(verification={'status': 'ok'}), 'verification'),
])
def test_bad_arguments_raise(over, key):
    with pytest.raises(ViTVariantsError, match=key):
        _card(**over)


def test_card_names_the_source_by_hub_id_or_url_and_the_install_line_that_works():
    source = {'name': 'simple_vit_small_patch16_224.bv_i1k_300ep', 'format': 'bigvision', 'sha256': SHA,
              'url': 'https://storage.googleapis.com/big_vision/vit_s16_i1k_300ep.npz'}
    text = _card(source=source).text
    assert '**Source:** `simple_vit_small_patch16_224.bv_i1k_300ep`' in text
    assert '**Source URL:** `https://storage.googleapis.com/big_vision/vit_s16_i1k_300ep.npz`' in text
    hub = _card(source={'name': 'hf-hub:google/vit-base-patch16-224', 'revision': 'c' * 40, 'format': 'hf'}).text
    assert '**Source:** `hf-hub:google/vit-base-patch16-224`' in hub and f'**Hub revision:** `{"c" * 40}`' in hub
    # timm-vit-variants is not on PyPI: the card says how to install it from its source
    assert 'pip install timm-vit-variants' not in text and 'not on PyPI' in text and '`pip install -e .`' in text
