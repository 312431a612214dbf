"""transformers ViT folders against the transformers models that wrote them."""
import json
import shutil

import pytest
import torch

transformers = pytest.importorskip('transformers')
from safetensors.torch import load_file  # noqa: E402

from timm_vit_variants import SimpleVisionTransformer  # noqa: E402
from timm_vit_variants.checkpoints import detect_format, load_into_model  # noqa: E402

from checkpoint_fixtures import open_checkpoint, randomize  # noqa: E402


TOL = 1e-4
torch.set_num_threads(1)
LABELS = {0: 'cat', 1: 'dog', 2: 'fish', 3: 'bird', 4: 'frog'}


def _config(**kwargs):
    args = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
                patch_size=4, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    args.update(kwargs)
    return transformers.ViTConfig(**args)


def _images(h=16, w=16):
    return torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(7))


def _ours(path, **kwargs):
    with open_checkpoint(path) as ckpt:
        model = SimpleVisionTransformer(**dict(ckpt.model_args, **kwargs), weight_init='skip').eval()
        load_into_model(model, path)
        return model, ckpt


@pytest.mark.parametrize('eps', [None, 1e-3])
def test_image_classification_safetensors(tmp_path, eps):
    cfg = _config() if eps is None else _config(layer_norm_eps=eps)
    ref = randomize(transformers.ViTForImageClassification(cfg))
    ref.save_pretrained(tmp_path / 'hf')
    assert detect_format(tmp_path / 'hf') == 'hf'
    model, ckpt = _ours(tmp_path / 'hf')
    args = ckpt.model_args
    assert args['norm_eps'] == (eps or 1e-12) and args['act_layer'] == 'gelu' and args['pos_embed_resample'] == 'hf'
    assert ckpt.label_names == ['cat', 'dog', 'fish', 'bird', 'frog'] and ckpt.grid == (4, 4)
    x = _images()
    with torch.no_grad():
        diff = (model(x) - ref(pixel_values=x).logits).abs().max().item()
    assert diff <= TOL, diff


def test_pytorch_model_bin_and_shards(tmp_path):
    ref = randomize(transformers.ViTForImageClassification(_config()))
    ref.save_pretrained(tmp_path / 'hf')
    # transformers 5 always writes safetensors; the legacy .bin holds the same on-disk names.
    (tmp_path / 'bin').mkdir()
    shutil.copy(tmp_path / 'hf' / 'config.json', tmp_path / 'bin' / 'config.json')
    torch.save(load_file(str(tmp_path / 'hf' / 'model.safetensors')), tmp_path / 'bin' / 'pytorch_model.bin')
    ref.save_pretrained(tmp_path / 'sharded', max_shard_size='20KB')
    assert (tmp_path / 'sharded' / 'model.safetensors.index.json').is_file()
    x = _images()
    with torch.no_grad():
        expected = ref(pixel_values=x).logits
        for folder in ('bin', 'sharded'):
            model, _ = _ours(tmp_path / folder)
            assert (model(x) - expected).abs().max().item() <= TOL, folder
    assert detect_format(tmp_path / 'bin' / 'pytorch_model.bin') == 'hf'


def test_bare_vit_model_pooler_is_pre_logits(tmp_path):
    ref = randomize(transformers.ViTModel(_config(hidden_act='gelu_pytorch_tanh')))
    ref.save_pretrained(tmp_path / 'bare')
    model, ckpt = _ours(tmp_path / 'bare')
    assert ckpt.model_args['rep_size'] == 32 and ckpt.model_args['num_classes'] == 0
    assert ckpt.model_args['act_layer'] == 'gelu_tanh'
    x = _images()
    with torch.no_grad():
        out = ref(pixel_values=x)
        assert (model.forward_features(x) - out.last_hidden_state).abs().max().item() <= TOL
        assert (model(x) - out.pooler_output).abs().max().item() <= TOL


@pytest.mark.parametrize('size', [(24, 24), (24, 20)])
def test_hf_rule_resampling_matches_interpolate_pos_encoding(tmp_path, size):
    ref = randomize(transformers.ViTForImageClassification(_config()))
    ref.save_pretrained(tmp_path / 'hf')
    model, _ = _ours(tmp_path / 'hf', img_size=size)
    assert model.patch_embed.grid_size == (size[0] // 4, size[1] // 4)
    x = _images(*size)
    with torch.no_grad():
        expected = ref(pixel_values=x, interpolate_pos_encoding=True).logits
        assert (model(x) - expected).abs().max().item() <= TOL


def test_config_contradicting_tensors(tmp_path):
    ref = transformers.ViTForImageClassification(_config())
    ref.save_pretrained(tmp_path / 'hf')
    cfg = json.loads((tmp_path / 'hf' / 'config.json').read_text())
    cfg['intermediate_size'] = 48
    (tmp_path / 'hf' / 'config.json').write_text(json.dumps(cfg))
    from timm_vit_variants import ViTVariantsError
    with pytest.raises(ViTVariantsError, match=r"intermediate\.dense\.weight.*\(64, 32\) vs \(48, 32\)"):
        open_checkpoint(tmp_path / 'hf')


def test_no_qkv_bias_and_non_square_image(tmp_path):
    ref = randomize(transformers.ViTForImageClassification(_config(qkv_bias=False, image_size=[16, 12])))
    ref.save_pretrained(tmp_path / 'hf')
    model, ckpt = _ours(tmp_path / 'hf')
    assert not ckpt.model_args['qkv_bias'] and ckpt.grid == (4, 3) and ckpt.model_args['img_size'] == (16, 12)
    assert 'blocks.0.attn.qkv.bias' not in ckpt.tensor_shapes
    x = _images(16, 12)
    with torch.no_grad():
        assert (model(x) - ref(pixel_values=x).logits).abs().max().item() <= TOL
