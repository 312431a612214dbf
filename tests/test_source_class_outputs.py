"""A transformers folder converts to what the class it declares (``config.json``'s ``architectures[0]``) outputs, with
its head: each class is built tiny with random weights, saved, converted (verified against that class), and the
written folder, loaded as a user loads it, gives that class's own output at the stored grid and, where transformers
resizes its table itself, at a second one. A class whose head this model does not express is refused naming it."""
import json
from pathlib import Path
from typing import Callable, Dict, Tuple

import pytest
import torch

transformers = pytest.importorskip('transformers')

from model_probes import load_like_user  # noqa: E402
from porting.cli import main  # noqa: E402

TOL = 2e-5
LABELS = ['cat', 'dog', 'fish']
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
              patch_size=8)
TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
            max_position_embeddings=8)
CLASSES = dict(num_labels=len(LABELS), id2label=dict(enumerate(LABELS)), label2id={n: i for i, n in enumerate(LABELS)})


def _perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """Seeded noise on every parameter, so no LayerNorm is the identity and no bias or head is zero."""
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=generator))
    return model.eval()


def _siglip_classifier() -> torch.nn.Module:
    config = transformers.SiglipConfig(vision_config=VISION, text_config=TEXT, **CLASSES)
    return transformers.SiglipForImageClassification(config)


def _siglip2_classifier() -> torch.nn.Module:
    config = transformers.Siglip2Config(vision_config=dict(VISION, num_patches=16), text_config=TEXT, **CLASSES)
    return transformers.Siglip2ForImageClassification(config)


def _clip_classifier() -> torch.nn.Module:
    config = transformers.CLIPConfig(vision_config=VISION, text_config=TEXT, **CLASSES)
    return transformers.CLIPForImageClassification(config)


def _data2vec_model() -> torch.nn.Module:
    # the class default: no pooling layer; use_mean_pooling's default: no final norm either
    config = transformers.Data2VecVisionConfig(**VISION, use_relative_position_bias=True)
    return transformers.Data2VecVisionModel(config)


def _deit(cls: str, **kwargs: object) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        return getattr(transformers, cls)(transformers.DeiTConfig(**VISION, **CLASSES), **kwargs)
    return build


def _clip_layout(cls: str, config: str) -> Callable[[], torch.nn.Module]:
    """A two-tower model that carries CLIP's image tower under its own model_type."""
    def build() -> torch.nn.Module:
        return getattr(transformers, cls)(getattr(transformers, config)(vision_config=VISION, text_config=TEXT))
    return build


def _image_features(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = m.get_image_features(pixel_values=x, interpolate_pos_encoding=True)
    return getattr(out, 'pooler_output', out)


def _timm_wrapper(cls: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        config = transformers.TimmWrapperConfig(architecture='vit_tiny_patch16_224', **(
            CLASSES if cls.endswith('ForImageClassification') else {}), model_args=dict(
                img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2))
        return getattr(transformers, cls)(config)
    return build


def _patchified(x: torch.Tensor) -> Dict[str, torch.Tensor]:
    """SigLIP 2's inputs for an NCHW batch: P-P-C flattened 8x8 patches, all valid, and the grid."""
    batch, chans, height, width = x.shape
    gh, gw = height // 8, width // 8
    patches = x.reshape(batch, chans, gh, 8, gw, 8).permute(0, 2, 4, 3, 5, 1).reshape(batch, gh * gw, 64 * chans)
    return dict(pixel_values=patches, pixel_attention_mask=torch.ones(batch, gh * gw, dtype=torch.long),
                spatial_shapes=torch.tensor([[gh, gw]] * batch))


DINO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=32, patch_size=8)
# class -> (builder, what its forward returns, the grids its own code runs at: a second one where it resizes itself)
CASES: Dict[str, Tuple[Callable[[], torch.nn.Module], Callable, Tuple[int, ...]]] = {
    'SiglipForImageClassification': (
        _siglip_classifier, lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).logits, (32, 48)),
    'Siglip2ForImageClassification': (_siglip2_classifier, lambda m, x: m(**_patchified(x)).logits, (32, 48)),
    'CLIPForImageClassification': (
        _clip_classifier, lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).logits, (32, 48)),
    'CLIPVisionModel': (
        lambda: transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**VISION)),
        lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).pooler_output, (32, 48)),
    'CLIPVisionModelWithProjection': (
        lambda: transformers.CLIPVisionModelWithProjection(transformers.CLIPVisionConfig(**VISION, projection_dim=16)),
        lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).image_embeds, (32, 48)),
    'DeiTForImageClassificationWithTeacher': (
        _deit('DeiTForImageClassificationWithTeacher'),
        lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).logits, (32, 48)),
    # no pooled output of its own: the mean of its [CLS] and distillation tokens, which ours pools
    'DeiTModel': (_deit('DeiTModel', add_pooling_layer=False),
                  lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state[:, :2].mean(1),
                  (32, 48)),
    **{cls: (_clip_layout(cls, config), _image_features, (32, 48)) for cls, config in (
        ('MetaClip2Model', 'MetaClip2Config'), ('ChineseCLIPModel', 'ChineseCLIPConfig'),
        ('AltCLIPModel', 'AltCLIPConfig'), ('CLIPSegModel', 'CLIPSegConfig'), ('OwlViTModel', 'OwlViTConfig'),
        ('Owlv2Model', 'Owlv2Config'))},
    **{cls: (lambda cls=cls, config=config: getattr(transformers, cls)(getattr(transformers, config)(**VISION)),
             lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).pooler_output, (32, 48))
       for cls, config in (('OwlViTVisionModel', 'OwlViTVisionConfig'), ('AltCLIPVisionModel', 'AltCLIPVisionConfig'))},
    **{cls: (lambda cls=cls, config=config: getattr(transformers, cls)(getattr(transformers, config)(
        **VISION, **(CLASSES if cls.endswith('ForImageClassification') else {}))),
        lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).logits, (32, 48))
       for cls, config in (('IJepaForImageClassification', 'IJepaConfig'),)},
    'ViTMSNModel': (lambda: transformers.ViTMSNModel(transformers.ViTMSNConfig(**VISION)),
                    lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state[:, 0], (32, 48)),
    # no pooled output of its own: the mean of its tokens, which ours pools (I-JEPA has no [CLS])
    'IJepaModel': (lambda: transformers.IJepaModel(transformers.IJepaConfig(**VISION)),
                   lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state.mean(1), (32, 48)),
    # transformers resizes BEiT's tables bilinearly at run time, which is not BEiT's rule: the stored grid only
    'Data2VecVisionModel': (_data2vec_model, lambda m, x: m(pixel_values=x).last_hidden_state, (32,)),
    # the wrapped timm model runs at the size it was built for
    'TimmWrapperForImageClassification': (
        _timm_wrapper('TimmWrapperForImageClassification'), lambda m, x: m(pixel_values=x).logits, (32,)),
    'TimmWrapperModel': (_timm_wrapper('TimmWrapperModel'), lambda m, x: m(pixel_values=x).pooler_output, (32,)),
    # its classifier on [CLS] alone beside the distillation token: the 'cls_alone' pool, no head_dist
    'DeiTForImageClassification': (
        _deit('DeiTForImageClassification'), lambda m, x: m(pixel_values=x, interpolate_pos_encoding=True).logits,
        (32, 48)),
    # the probe on [CLS] concatenated with the mean of the patch tokens; the class resizes its table by itself
    **{cls: (lambda cls=cls, config=config: getattr(transformers, cls)(getattr(transformers, config)(
        **DINO, **CLASSES)), lambda m, x: m(pixel_values=x).logits, (32, 48))
       for cls, config in (('Dinov2ForImageClassification', 'Dinov2Config'),
                           ('Dinov2WithRegistersForImageClassification', 'Dinov2WithRegistersConfig'))},
}


@pytest.mark.parametrize('name', list(CASES))
def test_folder_outputs_what_its_class_outputs(name, tmp_path, capsys, max_delta):
    build, forward, sizes = CASES[name]
    torch.manual_seed(0)
    source = _perturbed(build())
    source.save_pretrained(str(tmp_path / 'src'))
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f'verification passed vs transformers {name}.from_pretrained' in out, out
    model = load_like_user(tmp_path / 'out')
    if name.endswith('ForImageClassification'):
        assert json.loads((tmp_path / 'out' / 'config.json').read_text())['label_names'] == LABELS
    generator = torch.Generator().manual_seed(1)
    for size in sizes:
        x = torch.randn(2, 3, size, size, generator=generator)
        with torch.no_grad():
            max_delta(f'{name} at {size}x{size}', model(x), forward(source, x), TOL)


@pytest.mark.parametrize('cls,config,part', [
    ('OwlViTForObjectDetection', lambda: transformers.OwlViTConfig(vision_config=VISION, text_config=TEXT),
     'the detection heads (boxes and class embeddings of every patch token) are not expressed'),
    ('CLIPSegForImageSegmentation', lambda: transformers.CLIPSegConfig(vision_config=VISION, text_config=TEXT),
     'the segmentation decoder'),
    ('BeitForMaskedImageModeling', lambda: transformers.BeitConfig(**VISION, use_relative_position_bias=True),
     'the masked-image-modelling head (lm_head'),
])
def test_class_whose_head_is_not_expressed_is_refused_naming_it(cls, config, part, tmp_path, capsys):
    getattr(transformers, cls)(config()).save_pretrained(str(tmp_path / 'src'))
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and 'missing key' not in err and 'Traceback' not in err, err
    assert f"key 'architectures': {cls}: " in err and part in err, err
    assert not Path(tmp_path / 'out').exists()


def test_class_no_reader_converts_is_refused(tmp_path, capsys):
    """A class of a known family whose output is not the image model's (a backbone's feature maps) is refused by
    name, not converted as the family's plain model."""
    transformers.Dinov2Backbone(transformers.Dinov2Config(**DINO)).save_pretrained(str(tmp_path / 'src'))
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert "key 'architectures': Dinov2Backbone is not a transformers class the reader of model_type 'dinov2' converts" in err, err


def test_deit_pooler_is_kept(tmp_path, capsys, max_delta):
    """DeiTModel's pooler (Linear + tanh on [CLS] alone, beside the distillation token) is the pre-logits layer of
    the 'cls_alone' pool: the folder gives its pooler_output. Before, refused by its key."""
    torch.manual_seed(0)
    source = _perturbed(transformers.DeiTModel(transformers.DeiTConfig(**VISION)))
    source.save_pretrained(str(tmp_path / 'src'))
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 0, capsys.readouterr().err
    model = load_like_user(tmp_path / 'out')
    for size in (32, 48):
        x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            max_delta(f'DeiTModel pooler at {size}x{size}', model(x),
                      source(pixel_values=x, interpolate_pos_encoding=True).pooler_output, TOL)


def test_ijepa_pooler_is_refused_naming_it(tmp_path, capsys):
    """I-JEPA has no [CLS]: its optional pooler reads the first patch token, which the model does not express."""
    transformers.IJepaModel(transformers.IJepaConfig(**VISION), add_pooling_layer=True).save_pretrained(
        str(tmp_path / 'src'))
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and "key 'pooler.dense.weight': the pooler reads the first patch token" in err, err
