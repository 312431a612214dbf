"""The BEiT, BEiT v2 and data2vec-vision members of the family: their ``MODELS`` rows and the tags of their published
weights.

BEiT and BEiT v2 are one network (unilm ``beit/`` and ``beit2/`` ``modeling_finetune.VisionTransformer``, timm's
``beit*`` entries): patch 16, MLP ratio 4, q and v biases (k none), LayerNorm eps 1e-6, exact GELU, a [CLS] token, a
relative position bias in every block (``use_rel_pos_bias``: one table per block after fine-tuning; pretraining shares
one, which the fine-tuning script copies into every block), no absolute table, LayerScale, and mean pooling of the
patch tokens with ``fc_norm`` (``use_mean_pooling``). LayerScale's initial values are timm's ``beit*`` entries': BEiT
base 0.1, BEiT large and BEiT v2 1e-5. The tables are resized for another grid by BEiT's own rule
(``relpos_resize.beit_resize_table``).

data2vec-vision's model is BEiT's (transformers' ``Data2VecVisionModel`` is its ``BeitModel``); its rows take BEiT's
fine-tuned form with transformers' ``Data2VecVisionConfig`` defaults for LayerScale (0.1) and pooling (mean). A
folder's own ``config.json`` decides what is converted (its relative-bias flags, eps and pooling are read there).

The published BEiT files load through our BEiT reader (``custom_load='hf'``: timm's Hub copies of unilm's releases,
``timm/<name>.<tag>``, are timm ``Beit`` state dicts; our reader takes the file). The data2vec-vision rows have no
tag: their weights are transformers folders (``facebook/data2vec-vision-{base,large}[-ft1k]``), converted with
``vit-port convert``.
"""
from typing import Any, Dict, Tuple

__all__ = ['BEIT', 'BEIT_ROWS', 'BEIT_CFGS']

_IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
_INCEPTION = dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
_DIMS = {'base': dict(embed_dim=768, depth=12, num_heads=12, mlp_dim=3072),
         'large': dict(embed_dim=1024, depth=24, num_heads=16, mlp_dim=4096)}
# What every BEiT network shares (the rows and the readers start from it): a [CLS] token, BEiT's table resize,
# exact GELU, LayerNorm eps 1e-6, the VALID patch conv.
BEIT = dict(class_token=True, rel_pos_resample='beit', act_layer='gelu', norm_eps=1e-6, grid_mode='crop')
_BEIT = dict(BEIT, patch_size=16, num_classes=1000, global_pool='avg', fc_norm=True, qkv_bias=True, pos_embed='relpos')
# (family, size, image size) -> LayerScale init, and {tag: (classes, crop_pct)} of timm's Hub copies
_RELEASES: Dict[Tuple[str, str, int], Tuple[float, Dict[str, Tuple[int, float]]]] = {
    ('beit', 'base', 224): (0.1, {'in22k_ft_in22k_in1k': (1000, 0.9), 'in22k_ft_in22k': (21841, 0.9)}),
    ('beit', 'base', 384): (0.1, {'in22k_ft_in22k_in1k': (1000, 1.0)}),
    ('beit', 'large', 224): (1e-5, {'in22k_ft_in22k_in1k': (1000, 0.9), 'in22k_ft_in22k': (21841, 0.9)}),
    ('beit', 'large', 384): (1e-5, {'in22k_ft_in22k_in1k': (1000, 1.0)}),
    ('beit', 'large', 512): (1e-5, {'in22k_ft_in22k_in1k': (1000, 1.0)}),
    ('beitv2', 'base', 224): (1e-5, {'in1k_ft_in22k_in1k': (1000, 0.9), 'in1k_ft_in1k': (1000, 0.9),
                                     'in1k_ft_in22k': (21841, 0.9)}),
    ('beitv2', 'large', 224): (1e-5, {'in1k_ft_in22k_in1k': (1000, 0.95), 'in1k_ft_in1k': (1000, 0.95),
                                      'in1k_ft_in22k': (21841, 0.95)}),
    ('data2vec', 'base', 224): (0.1, {}),
    ('data2vec', 'large', 224): (0.1, {}),
}
_LABEL = {'beit': 'BEiT', 'beitv2': 'BEiT v2', 'data2vec': 'data2vec-vision'}
_PAPERS = {'beit': ('arXiv:2106.08254', 'BEiT: BERT Pre-Training of Image Transformers'),
           'beitv2': ('arXiv:2208.06366', 'BEiT v2: Masked Image Modeling with Vector-Quantized Visual Tokenizers')}
_ORIGIN = 'https://github.com/microsoft/unilm'


def _name(family: str, size: str, img: int) -> str:
    return f'simple_vit_{size}_patch16_{family}_{img}'


# name -> (variant, arguments, description): ``config.MODELS`` rows (this module imports nothing of the package).
BEIT_ROWS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    _name(family, size, img): (
        size, dict(_BEIT, **_DIMS[size], img_size=img, init_values=init),
        f'{_LABEL[family]} ViT-{size[0].upper()}/16 at {img}px: a relative position bias per block (BEiT\'s cubic '
        'table resize), q/v biases, LayerScale, mean pooling with fc_norm, ImageNet head.')
    for (family, size, img), (init, _) in _RELEASES.items()}

BEIT_CFGS: Dict[str, Dict[str, Any]] = {
    f'{_name(family, size, img)}.{tag}': dict(
        url='', hf_hub_id=f'timm/{family}_{size}_patch16_{img}.{tag}', hf_hub_filename='model.safetensors',
        custom_load='hf', num_classes=classes, input_size=(3, img, img), pool_size=None, crop_pct=crop,
        interpolation='bicubic', fixed_input_size=False, first_conv='patch_embed.proj', classifier='head',
        license='apache-2.0', origin_url=_ORIGIN, paper_ids=_PAPERS[family][0], paper_name=_PAPERS[family][1],
        **(_IMAGENET if family == 'beitv2' else _INCEPTION))
    for (family, size, img), (_, tags) in _RELEASES.items() for tag, (classes, crop) in tags.items()}
