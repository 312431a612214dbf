"""The transformers vision classes, each built tiny with random weights and saved: each either converts (verified
against its own forward by the converter) or is refused by name with the part that is not expressed (one ``error:``
line, never a missing key); each that converts is converted to two more grids, where its output is checked against
the class's own resize or the converter says the class has none. The coverage figure is printed;
docs/checkpoints.md lists the refusals."""
import re
from typing import Callable, Dict, Optional

import pytest
import torch

transformers = pytest.importorskip('transformers')

from porting.cli import main  # noqa: E402

V = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8)
T = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
         max_position_embeddings=8)
L = dict(num_labels=3)
TOL = '2e-5'  # the converter's check of max |delta| of logits and features (float32 noise at these sizes)
# Phi-4-multimodal's MAP head outputs values near 73 at these weights: float32 noise there is 2.7e-5 (4e-7 relative)
_TOL_OF = {'Phi4MultimodalVisionModel': '1e-4'}
# the Idefics / SmolVLM towers' table is never resized (their bucketed ids read it at any size: the converted model
# runs at any grid exactly, tests/test_idefics_vision.py); a conversion to another nominal grid is refused by its key
_BUCKETED = {'Idefics3VisionTransformer', 'SmolVLMVisionTransformer', 'Idefics2Model',
             'Idefics2ForConditionalGeneration', 'Idefics3Model', 'Idefics3ForConditionalGeneration', 'SmolVLMModel',
             'SmolVLMForConditionalGeneration'}
# Idefics2's perceiver resampler, tiny
P = dict(hidden_size=16, resampler_n_latents=4, resampler_depth=1, resampler_n_heads=2, resampler_head_dim=8,
         num_key_value_heads=1)


def _one(cls: str, config: str, **kwargs) -> Callable[[], object]:
    return lambda: getattr(transformers, cls)(getattr(transformers, config)(**V, **kwargs))


def _two(cls: str, config: str) -> Callable[[], object]:
    return lambda: getattr(transformers, cls)(getattr(transformers, config)(vision_config=V, text_config=T))


def _qformer(cls: str, config: str) -> Callable[[], object]:
    """A BLIP-2-style model: the image tower, a Q-Former and an OPT language model."""
    qformer = dict(T, encoder_hidden_size=V['hidden_size'])
    opt = dict(T, model_type='opt', ffn_dim=32, word_embed_proj_dim=16)
    return lambda: getattr(transformers, cls)(getattr(transformers, config)(
        vision_config=V, qformer_config=qformer, text_config=opt))


def _timm(cls: str, **kwargs) -> Callable[[], object]:
    """transformers' wrapper of a timm model, here a tiny timm ViT."""
    args = dict(depth=1, embed_dim=32, num_heads=2, img_size=32, patch_size=8)
    return lambda: getattr(transformers, cls)(transformers.TimmWrapperConfig(
        architecture='vit_tiny_patch16_224', model_args=args, **kwargs))


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
    'DeiTForImageClassification': (_one('DeiTForImageClassification', 'DeiTConfig', **L), None),
    'MetaClip2Model': (_two('MetaClip2Model', 'MetaClip2Config'), None),
    'ChineseCLIPModel': (_two('ChineseCLIPModel', 'ChineseCLIPConfig'), None),
    'AltCLIPVisionModel': (_one('AltCLIPVisionModel', 'AltCLIPVisionConfig'), None),
    'CLIPSegModel': (_two('CLIPSegModel', 'CLIPSegConfig'), None),
    'OwlViTModel': (_two('OwlViTModel', 'OwlViTConfig'), None),
    'Owlv2Model': (_two('Owlv2Model', 'Owlv2Config'), None),
    'OwlViTForObjectDetection': (_two('OwlViTForObjectDetection', 'OwlViTConfig'), 'the detection heads'),
    'ViTMSNModel': (_one('ViTMSNModel', 'ViTMSNConfig'), None),
    'ViTMSNForImageClassification': (_one('ViTMSNForImageClassification', 'ViTMSNConfig', **L), None),
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
    'Dinov2ForImageClassification': (_one('Dinov2ForImageClassification', 'Dinov2Config', **L), None),
    'Dinov2WithRegistersForImageClassification': (_one('Dinov2WithRegistersForImageClassification',
                                                       'Dinov2WithRegistersConfig', num_register_tokens=2, **L), None),
    'Dinov2Backbone': (_one('Dinov2Backbone', 'Dinov2Config'), 'Dinov2Backbone is not a transformers class'),
    'ViTForMaskedImageModeling': (_one('ViTForMaskedImageModeling', 'ViTConfig'), 'the mask token'),
    'BeitForMaskedImageModeling': (_one('BeitForMaskedImageModeling', 'BeitConfig'),
                                   'the masked-image-modelling head'),
    'DeiTForMaskedImageModeling': (_one('DeiTForMaskedImageModeling', 'DeiTConfig'),
                                   'the masked-image-modelling decoder'),
    'Aimv2VisionModel': (_one('Aimv2VisionModel', 'Aimv2VisionConfig'), None),
    'Aimv2Model': (_two('Aimv2Model', 'Aimv2Config'), None),
    'MetaClip2VisionModelWithProjection': (_one('MetaClip2VisionModelWithProjection', 'MetaClip2VisionConfig'), None),
    'MetaClip2ForImageClassification': (_two('MetaClip2ForImageClassification', 'MetaClip2Config'), None),
    'TimmWrapperModel': (_timm('TimmWrapperModel'), None),
    'TimmWrapperForImageClassification': (_timm('TimmWrapperForImageClassification', num_labels=3), None),
    'Siglip2VisionModel': (lambda: transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(
        **V, num_patches=16)), None),
    'Siglip2Model': (lambda: transformers.Siglip2Model(transformers.Siglip2Config(
        vision_config=dict(V, num_patches=16), text_config=T)), None),
    'Siglip2ForImageClassification': (lambda: transformers.Siglip2ForImageClassification(transformers.Siglip2Config(
        vision_config=dict(V, num_patches=16), text_config=T, **L)), None),
    'BlipModel': (_two('BlipModel', 'BlipConfig'), None),
    'BlipForImageTextRetrieval': (_two('BlipForImageTextRetrieval', 'BlipConfig'), None),
    'BlipForConditionalGeneration': (_two('BlipForConditionalGeneration', 'BlipConfig'), None),
    'BlipForQuestionAnswering': (_two('BlipForQuestionAnswering', 'BlipConfig'), None),
    'Blip2Model': (_qformer('Blip2Model', 'Blip2Config'), None),
    'Blip2ForConditionalGeneration': (_qformer('Blip2ForConditionalGeneration', 'Blip2Config'), None),
    'InstructBlipModel': (_qformer('InstructBlipModel', 'InstructBlipConfig'), None),
    'InstructBlipForConditionalGeneration': (_qformer('InstructBlipForConditionalGeneration', 'InstructBlipConfig'),
                                             None),
    'Blip2VisionModelWithProjection': (_qformer('Blip2VisionModelWithProjection', 'Blip2Config'),
                                       'the Q-Former is not expressed'),
    'PixioModel': (lambda: transformers.PixioModel(transformers.PixioConfig(
        **{k: v for k, v in V.items() if k != 'intermediate_size'}, n_cls_tokens=4)), None),
    'Kosmos2Model': (lambda: transformers.Kosmos2Model(transformers.Kosmos2Config(
        vision_config=V, text_config=dict(embed_dim=16, ffn_dim=32, layers=1, attention_heads=2, vocab_size=64),
        latent_query_num=4)), None),
    'FlavaImageModel': (_one('FlavaImageModel', 'FlavaImageConfig'), None),
    'FlavaModel': (lambda: transformers.FlavaModel(transformers.FlavaConfig(
        image_config=V, text_config=T, multimodal_config=dict(hidden_size=16, intermediate_size=32,
                                                              num_hidden_layers=1, num_attention_heads=2),
        projection_dim=16)), None),
    'JanusVisionModel': (lambda: transformers.JanusVisionModel(transformers.JanusVisionConfig(
        **{k: v for k, v in V.items() if k != 'intermediate_size'}, mlp_ratio=2.0)), None),
    'InternVLVisionModel': (_one('InternVLVisionModel', 'InternVLVisionConfig'), None),
    'InternVLVisionModel (q/k norm)': (_one('InternVLVisionModel', 'InternVLVisionConfig', use_qk_norm=True),
                                       'the q/k RMSNorm (use_qk_norm) is not expressed'),
    'Phi4MultimodalVisionModel': (_one('Phi4MultimodalVisionModel', 'Phi4MultimodalVisionConfig'), None),
    'Tipsv2VisionModel': (lambda: transformers.Tipsv2VisionModel(transformers.Tipsv2VisionConfig(
        **{k: v for k, v in V.items() if k != 'intermediate_size'}, num_register_tokens=2)), None),
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
    # not converted yet: refused by their model_type, naming the part they need
    'YolosModel': (lambda: transformers.YolosModel(transformers.YolosConfig(**dict(V, image_size=[32, 32]))),
                   "needs YOLOS's detection tokens"),
    'PixtralVisionModel': (lambda: transformers.PixtralVisionModel(transformers.PixtralVisionConfig(
        **V, head_dim=16)), "needs Pixtral's 2D RoPE"),
    'MLCDVisionModel': (_one('MLCDVisionModel', 'MLCDVisionConfig'), "needs MLCD's 2D RoPE"),
    'BridgeTowerModel': (lambda: transformers.BridgeTowerModel(transformers.BridgeTowerConfig(
        vision_config=dict(hidden_size=64, num_hidden_layers=1, image_size=32, patch_size=8), text_config=dict(T),
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2)), "needs BridgeTower's output"),
    'SamVisionModel': (lambda: transformers.SamVisionModel(transformers.SamVisionConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8, output_channels=16,
        global_attn_indexes=[0], mlp_dim=64)), "needs SAM's image encoder"),
}
_SEEN: Dict[str, bool] = {}


@pytest.mark.parametrize('name', list(ZOO))
def test_class_converts_or_is_refused_by_name(name, tmp_path, capsys):
    build, refusal = ZOO[name]
    torch.manual_seed(0)  # each class's random weights the same at every run
    build().save_pretrained(str(tmp_path / 'src'))
    capsys.readouterr()
    rc = main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out'), '--tol', _TOL_OF.get(name, TOL)])
    out, err = capsys.readouterr()
    _SEEN[name] = rc == 0
    if refusal is None:
        assert rc == 0 and f'verification passed vs transformers {name}.from_pretrained' in out, err
    else:
        assert rc == 1 and err.count('error:') == 1 and refusal in err, err
        assert 'missing key' not in err and 'Traceback' not in err, err


_GRIDS = (['48'], ['40', '56'])  # a larger square grid (6x6) and a non-square one (5x7); the classes' own is 4x4
_TARGET_CHECKED = re.compile(r'target geometry \(\d+x\d+, patch \d+\) passed vs ')
_TARGET_UNDEFINED = re.compile(r'the output at the target geometry \(\d+x\d+, patch \d+\) was NOT checked: \S')


@pytest.mark.parametrize('name', [n for n, (_, refusal) in ZOO.items() if refusal is None])
def test_class_converts_at_two_more_grids(name, tmp_path, capsys):
    """Each class that converts, converted to two other grids: the output there is checked against the class's own
    resize (transformers' interpolate_pos_encoding, SigLIP 2's NaFlex resize, ...), or the converter says the class
    defines none (a tower that runs at its own grid only); a rule with no non-square form (BEiT's), or a resize of the
    class's own that this model does not express (Phi-4's bucketed lookup), refuses that grid by name."""
    build, _ = ZOO[name]
    torch.manual_seed(0)
    build().save_pretrained(str(tmp_path / 'src'))
    for size in _GRIDS:
        capsys.readouterr()
        rc = main(['convert', str(tmp_path / 'src'), str(tmp_path / ('out' + 'x'.join(size))), '--img-size', *size,
                   '--tol', _TOL_OF.get(name, TOL)])
        out, err = capsys.readouterr()
        if rc == 1:  # a resize of the class's own this model does not express, said by name: nothing written
            assert err.count('error:') == 1 and 'Traceback' not in err, err
            assert ('defines no non-square grid' in err and len(size) == 2) or 'does not express' in err or \
                (name in _BUCKETED and ("key 'abs_pos.table'" in err or 'the bucketed table is square' in err)), err
            continue
        assert rc == 0 and (_TARGET_CHECKED.search(out) or _TARGET_UNDEFINED.search(out)), out + err


def test_coverage_figure():
    """The coverage of the list above (after its cases ran): N of M classes convert."""
    converts = sum(refusal is None for _, refusal in ZOO.values())
    print(f'\ntransformers zoo: {converts} of {len(ZOO)} classes convert; refused by name: '
          f'{", ".join(n for n, (_, r) in ZOO.items() if r is not None)}')
    assert all(_SEEN.get(n, refusal is None) == (refusal is None) for n, (_, refusal) in ZOO.items())
