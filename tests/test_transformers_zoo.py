"""The transformers vision classes, each built tiny with random weights and saved: each either converts (verified
against its own forward by the converter) or is refused by name with the part that is not expressed (one ``error:``
line, never a missing key). The coverage figure is printed; docs/checkpoints.md lists the refusals."""
from typing import Callable, Dict, Optional

import pytest

transformers = pytest.importorskip('transformers')

from porting.cli import main  # noqa: E402

V = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8)
T = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
         max_position_embeddings=8)
L = dict(num_labels=3)
# Idefics2's perceiver resampler, tiny
P = dict(hidden_size=16, resampler_n_latents=4, resampler_depth=1, resampler_n_heads=2, resampler_head_dim=8,
         num_key_value_heads=1)


def _one(cls: str, config: str, **kwargs) -> Callable[[], object]:
    return lambda: getattr(transformers, cls)(getattr(transformers, config)(**V, **kwargs))


def _two(cls: str, config: str) -> Callable[[], object]:
    return lambda: getattr(transformers, cls)(getattr(transformers, config)(vision_config=V, text_config=T))


# class -> (builder, None when it converts, else a text its refusal names)
ZOO: Dict[str, tuple] = {
    'ViTModel': (_one('ViTModel', 'ViTConfig'), None),
    'ViTForImageClassification': (_one('ViTForImageClassification', 'ViTConfig', **L), None),
    'SiglipVisionModel': (_one('SiglipVisionModel', 'SiglipVisionConfig'), None),
    'CLIPVisionModel': (_one('CLIPVisionModel', 'CLIPVisionConfig'), None),
    'CLIPModel': (_two('CLIPModel', 'CLIPConfig'), None),
    'BeitModel': (_one('BeitModel', 'BeitConfig', use_relative_position_bias=True), None),
    'Data2VecVisionModel': (_one('Data2VecVisionModel', 'Data2VecVisionConfig', use_relative_position_bias=True),
                            None),
    'DeiTForImageClassificationWithTeacher': (_one('DeiTForImageClassificationWithTeacher', 'DeiTConfig', **L), None),
    'DeiTForImageClassification': (_one('DeiTForImageClassification', 'DeiTConfig', **L),
                                   'reads [CLS] alone beside the distillation token'),
    'MetaClip2Model': (_two('MetaClip2Model', 'MetaClip2Config'), None),
    'ChineseCLIPModel': (_two('ChineseCLIPModel', 'ChineseCLIPConfig'), None),
    'AltCLIPVisionModel': (_one('AltCLIPVisionModel', 'AltCLIPVisionConfig'), None),
    'CLIPSegModel': (_two('CLIPSegModel', 'CLIPSegConfig'), None),
    'OwlViTModel': (_two('OwlViTModel', 'OwlViTConfig'), None),
    'Owlv2Model': (_two('Owlv2Model', 'Owlv2Config'), None),
    'OwlViTForObjectDetection': (_two('OwlViTForObjectDetection', 'OwlViTConfig'), 'the detection heads'),
    'ViTMSNModel': (_one('ViTMSNModel', 'ViTMSNConfig'), None),
    'IJepaModel': (_one('IJepaModel', 'IJepaConfig'), None),
    'IJepaForImageClassification': (_one('IJepaForImageClassification', 'IJepaConfig', **L), None),
    'GitVisionModel': (_one('GitVisionModel', 'GitVisionConfig'), None),
    'ViTMAEModel': (_one('ViTMAEModel', 'ViTMAEConfig'), None),
    'BlipVisionModel': (_one('BlipVisionModel', 'BlipVisionConfig'), None),
    'Blip2VisionModel': (_one('Blip2VisionModel', 'Blip2VisionConfig'), None),
    'InstructBlipVisionModel': (_one('InstructBlipVisionModel', 'InstructBlipVisionConfig'), None),
    'ViTMAEForPreTraining': (_one('ViTMAEForPreTraining', 'ViTMAEConfig'), None),
    'GitForCausalLM': (lambda: transformers.GitForCausalLM(transformers.GitConfig(
        vision_config=V, **dict(T, vocab_size=128), bos_token_id=1, eos_token_id=2, pad_token_id=0)), None),
    'GitModel': (lambda: transformers.GitModel(transformers.GitConfig(
        vision_config=V, **dict(T, vocab_size=128), bos_token_id=1, eos_token_id=2, pad_token_id=0)), None),
    'BeitForImageClassification': (_one('BeitForImageClassification', 'BeitConfig', use_relative_position_bias=True,
                                        **L), None),
    'Data2VecVisionForImageClassification': (_one('Data2VecVisionForImageClassification', 'Data2VecVisionConfig',
                                                  use_relative_position_bias=True, **L), None),
    'DeiTModel': (lambda: transformers.DeiTModel(transformers.DeiTConfig(**V), add_pooling_layer=False), None),
    'Dinov2Model': (_one('Dinov2Model', 'Dinov2Config'), None),
    'Dinov2WithRegistersModel': (_one('Dinov2WithRegistersModel', 'Dinov2WithRegistersConfig'), None),
    'DINOv3ViTModel': (_one('DINOv3ViTModel', 'DINOv3ViTConfig'), None),  # no registers: an empty register tensor
    'SiglipModel': (_two('SiglipModel', 'SiglipConfig'), None),
    'SiglipForImageClassification': (_two('SiglipForImageClassification', 'SiglipConfig'), None),
    'CLIPVisionModelWithProjection': (_one('CLIPVisionModelWithProjection', 'CLIPVisionConfig'), None),
    'CLIPForImageClassification': (_two('CLIPForImageClassification', 'CLIPConfig'), None),
    'MetaClip2VisionModel': (_one('MetaClip2VisionModel', 'MetaClip2VisionConfig'), None),
    'ChineseCLIPVisionModel': (_one('ChineseCLIPVisionModel', 'ChineseCLIPVisionConfig'), None),
    'AltCLIPModel': (_two('AltCLIPModel', 'AltCLIPConfig'), None),
    'CLIPSegVisionModel': (_one('CLIPSegVisionModel', 'CLIPSegVisionConfig'), None),
    'OwlViTVisionModel': (_one('OwlViTVisionModel', 'OwlViTVisionConfig'), None),
    'Owlv2VisionModel': (_one('Owlv2VisionModel', 'Owlv2VisionConfig'), None),
    'Dinov2ForImageClassification': (_one('Dinov2ForImageClassification', 'Dinov2Config', **L),
                                     '[CLS]+mean concat head is not expressed'),
    'Dinov2Backbone': (_one('Dinov2Backbone', 'Dinov2Config'), 'Dinov2Backbone is not a transformers class'),
    'ViTForMaskedImageModeling': (_one('ViTForMaskedImageModeling', 'ViTConfig'), 'the mask token'),
    'BeitForMaskedImageModeling': (_one('BeitForMaskedImageModeling', 'BeitConfig'),
                                   'the masked-image-modelling head'),
    'DeiTForMaskedImageModeling': (_one('DeiTForMaskedImageModeling', 'DeiTConfig'),
                                   'the masked-image-modelling decoder'),
    # the SigLIP towers of Idefics2, Idefics3 and SmolVLM (their bucketed table), alone or in the full models
    'Idefics3VisionTransformer': (_one('Idefics3VisionTransformer', 'Idefics3VisionConfig'), None),
    'SmolVLMVisionTransformer': (_one('SmolVLMVisionTransformer', 'SmolVLMVisionConfig'), None),
    'Idefics2Model': (lambda: transformers.Idefics2Model(transformers.Idefics2Config(
        vision_config=V, text_config=T, perceiver_config=P)), None),
    'Idefics2ForConditionalGeneration': (lambda: transformers.Idefics2ForConditionalGeneration(
        transformers.Idefics2Config(vision_config=V, text_config=T, perceiver_config=P)), None),
    'Idefics3Model': (_two('Idefics3Model', 'Idefics3Config'), None),
    'Idefics3ForConditionalGeneration': (_two('Idefics3ForConditionalGeneration', 'Idefics3Config'), None),
    'SmolVLMModel': (_two('SmolVLMModel', 'SmolVLMConfig'), None),
    'SmolVLMForConditionalGeneration': (_two('SmolVLMForConditionalGeneration', 'SmolVLMConfig'), None),
    # not converted yet: refused by their model_type
    'YolosModel': (lambda: transformers.YolosModel(transformers.YolosConfig(**dict(V, image_size=[32, 32]))), "model_type 'yolos' is not a transformers ViT"),
}
_SEEN: Dict[str, bool] = {}


@pytest.mark.parametrize('name', list(ZOO))
def test_class_converts_or_is_refused_by_name(name, tmp_path, capsys):
    build, refusal = ZOO[name]
    build().save_pretrained(str(tmp_path / 'src'))
    capsys.readouterr()
    rc = main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')])
    out, err = capsys.readouterr()
    _SEEN[name] = rc == 0
    if refusal is None:
        assert rc == 0 and f'verification passed vs transformers {name}.from_pretrained' in out, err
    else:
        assert rc == 1 and err.count('error:') == 1 and refusal in err, err
        assert 'missing key' not in err and 'Traceback' not in err, err


def test_coverage_figure():
    """The coverage of the list above (after its cases ran): N of M classes convert."""
    converts = sum(refusal is None for _, refusal in ZOO.values())
    print(f'\ntransformers zoo: {converts} of {len(ZOO)} classes convert; refused by name: '
          f'{", ".join(n for n, (_, r) in ZOO.items() if r is not None)}')
    assert all(_SEEN.get(n, refusal is None) == (refusal is None) for n, (_, refusal) in ZOO.items())
