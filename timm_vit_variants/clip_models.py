"""CLIP image towers as registered models: OpenAI CLIP, LAION-2B, DataComp, MetaCLIP, DFN and CLIPA weights.

Each architecture is one open_clip model config (``open_clip/model_configs/<name>.json``) in this family's
terms: CLIP's ``ln_pre`` (or CLIPA's mean pooling with the norm after the pool), a bias-free patch conv and
projection, LayerNorm eps 1e-5, a learned table with a [CLS] row resized with open_clip's rule, and the VALID
conv's crop. ``model(x)`` is the image embedding, as open_clip's ``encode_image`` (unnormalised).

QuickGELU is a property of the weights, not of the architecture: OpenAI's, MetaCLIP's (but ``altogether``) and
DFN's (but ``dfn2b_s39b``) were trained with it, the others with GELU, on the same shapes. So each tag carries
its activation (open_clip's ``quick_gelu``), and ``create_model(name.tag)`` builds the network that tag's
weights need; a bare name builds its default (first) tag's. An explicit ``act_layer=`` still wins.

Tags are open_clip's ``pretrained=`` names. The weights are open_clip's own files: the ``open_clip_pytorch_model.bin``
of the Hub repo open_clip names (``hf_hub_id``), and for OpenAI's and MetaCLIP's the original ``url`` too; timm
loads either through ``load_pretrained`` (``custom_load``), where the OpenCLIP and OpenAI readers take them.
"""
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Tuple

__all__ = ['CLIP_ARCHS', 'CLIP_TAGS', 'CLIP_ROWS', 'CLIP_TOWER', 'OPENAI_MEAN', 'OPENAI_STD', 'ClipTag',
           'clip_default_cfgs', 'clip_tag_args', 'clip_tag_facts', 'clip_tag_open_clip']

OPENAI_MEAN, OPENAI_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
_INCEPTION = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
HF_WEIGHTS = 'open_clip_pytorch_model.bin'  # open_clip's default file in its Hub repos
# What every open_clip image tower is, whatever its size: the readers of open_clip's layout start from it.
CLIP_TOWER: Dict[str, Any] = dict(qkv_bias=True, class_token=True, pos_embed='learn', pos_embed_cls_slot=True,
                                  pos_embed_resample='openclip', norm_eps=1e-5, patch_bias=False, head_bias=False,
                                  grid_mode='crop')


@dataclass(frozen=True)
class ClipArch:
    """One open_clip vision config: (width, depth, heads, MLP width, patch, image size, embedding width, CLIPA)."""
    open_clip: str
    width: int
    depth: int
    heads: int
    mlp: int
    patch: int
    img: int
    embed: int
    clipa: bool = False

    def args(self, act: str) -> Dict[str, Any]:
        pooling = dict(pre_norm=False, global_pool='avg', fc_norm=True) if self.clipa else \
            dict(pre_norm=True, global_pool='token')
        return dict(CLIP_TOWER, embed_dim=self.width, depth=self.depth, num_heads=self.heads, mlp_dim=self.mlp,
                    patch_size=self.patch, img_size=self.img, num_classes=self.embed, act_layer=act, **pooling)


# open_clip 3.3.0's model_configs: H/14, g/14 and bigG/14 have head_width 80, 88 and 104 (16 heads each);
# g/14's mlp_ratio 4.3637 and bigG/14's 4.9231 give int(width * ratio) = 6144 and 8192.
CLIP_ARCHS: Dict[str, ClipArch] = {
    'simple_vit_base_patch32_clip_224': ClipArch('ViT-B-32', 768, 12, 12, 3072, 32, 224, 512),
    'simple_vit_base_patch32_clip_256': ClipArch('ViT-B-32-256', 768, 12, 12, 3072, 32, 256, 512),
    'simple_vit_base_patch16_clip_224': ClipArch('ViT-B-16', 768, 12, 12, 3072, 16, 224, 512),
    'simple_vit_large_patch14_clip_224': ClipArch('ViT-L-14', 1024, 24, 16, 4096, 14, 224, 768),
    'simple_vit_large_patch14_clip_336': ClipArch('ViT-L-14-336', 1024, 24, 16, 4096, 14, 336, 768),
    'simple_vit_huge_patch14_clip_224': ClipArch('ViT-H-14', 1280, 32, 16, 5120, 14, 224, 1024),
    'simple_vit_huge_patch14_clip_378': ClipArch('ViT-H-14-378', 1280, 32, 16, 5120, 14, 378, 1024),
    'simple_vit_giant_patch14_clip_224': ClipArch('ViT-g-14', 1408, 40, 16, 6144, 14, 224, 1024),
    'simple_vit_gigantic_patch14_clip_224': ClipArch('ViT-bigG-14', 1664, 48, 16, 8192, 14, 224, 1280),
    'simple_vit_large_patch14_clipa_224': ClipArch('ViT-L-14-CLIPA', 1024, 24, 16, 4096, 14, 224, 768, True),
    'simple_vit_large_patch14_clipa_336': ClipArch('ViT-L-14-CLIPA-336', 1024, 24, 16, 4096, 14, 336, 768, True),
    'simple_vit_huge_patch14_clipa_224': ClipArch('ViT-H-14-CLIPA', 1280, 32, 16, 5120, 14, 224, 1024, True),
    'simple_vit_huge_patch14_clipa_336': ClipArch('ViT-H-14-CLIPA-336', 1280, 32, 16, 5120, 14, 336, 1024, True),
    'simple_vit_gigantic_patch14_clipa_224': ClipArch('ViT-bigG-14-CLIPA', 1664, 48, 16, 8192, 14, 224, 1280, True),
    'simple_vit_gigantic_patch14_clipa_336': ClipArch('ViT-bigG-14-CLIPA-336', 1664, 48, 16, 8192, 14, 336, 1280,
                                                      True),
}


@dataclass(frozen=True)
class ClipTag:
    """One published weight set: where it is, whether it was trained with QuickGELU, its preprocessing, licence."""
    hub: str
    quick_gelu: bool = False
    url: str = ''
    mean_std: Tuple[Tuple[float, ...], Tuple[float, ...]] = (OPENAI_MEAN, OPENAI_STD)
    interpolation: str = 'bicubic'
    squash: bool = False  # open_clip's resize_mode 'squash'; else 'shortest' (resize, centre crop)
    license: str = 'mit'
    source: str = 'LAION'


_OPENAI_URL = 'https://openaipublic.azureedge.net/clip/models/'
_META_URL = 'https://dl.fbaipublicfiles.com/MMPT/metaclip/'
_NC = 'cc-by-nc-4.0'  # MetaCLIP's weights


def _on_timm(timm_tag: str, url: str, source: str, quick_gelu: bool = True, license: str = 'mit') -> ClipTag:
    """A weight set timm hosts as ``timm/<architecture>.<timm_tag>`` (OpenAI's, MetaCLIP's), and its original ``url``;
    ``<architecture>`` is the row's, filled in by ``_placed``."""
    return ClipTag(f'timm/{{timm}}.{timm_tag}', quick_gelu, url, license=license, source=source)


def _openai(digest: str, file: str) -> ClipTag:
    return _on_timm('openai', f'{_OPENAI_URL}{digest}/{file}', 'OpenAI')


def _metaclip(timm_tag: str, file: str = '', quick_gelu: bool = True) -> ClipTag:
    return _on_timm(timm_tag, _META_URL + file if file else '', 'MetaCLIP', quick_gelu, _NC)


def _dfn(repo: str, quick_gelu: bool = True, squash: bool = False) -> ClipTag:
    return ClipTag(f'apple/{repo}', quick_gelu, squash=squash, license='apple-ascl', source='DFN')


def _clipa(repo: str) -> ClipTag:
    return ClipTag(f'UCSC-VLAA/{repo}', mean_std=_IMAGENET, interpolation='bilinear', squash=True,
                   license='apache-2.0', source='CLIPA')


def _datacomp(repo: str) -> ClipTag:
    return ClipTag(f'laion/{repo}', source='DataComp')


# (architecture, open_clip tag) -> weights; each architecture's first tag is its default. From open_clip
# 3.3.0's pretrained.py (hf_hub, url, quick_gelu, mean/std, interpolation, resize_mode).
_TAG_ROWS: Dict[Tuple[str, str], ClipTag] = {
    ('simple_vit_base_patch32_clip_224', 'laion2b_s34b_b79k'): ClipTag('laion/CLIP-ViT-B-32-laion2B-s34B-b79K'),
    ('simple_vit_base_patch32_clip_224', 'datacomp_xl_s13b_b90k'): _datacomp('CLIP-ViT-B-32-DataComp.XL-s13B-b90K'),
    ('simple_vit_base_patch32_clip_224', 'openai'): _openai(
        '40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af', 'ViT-B-32.pt'),
    ('simple_vit_base_patch32_clip_224', 'metaclip_400m'): _metaclip('metaclip_400m', 'b32_400m.pt'),
    ('simple_vit_base_patch32_clip_224', 'metaclip_fullcc'): _metaclip('metaclip_2pt5b', 'b32_fullcc2.5b.pt'),
    ('simple_vit_base_patch32_clip_256', 'datacomp_s34b_b86k'): _datacomp('CLIP-ViT-B-32-256x256-DataComp-s34B-b86K'),
    ('simple_vit_base_patch16_clip_224', 'laion2b_s34b_b88k'): ClipTag('laion/CLIP-ViT-B-16-laion2B-s34B-b88K'),
    ('simple_vit_base_patch16_clip_224', 'datacomp_xl_s13b_b90k'): _datacomp('CLIP-ViT-B-16-DataComp.XL-s13B-b90K'),
    ('simple_vit_base_patch16_clip_224', 'openai'): _openai(
        '5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85e4ecb61988df416f', 'ViT-B-16.pt'),
    ('simple_vit_base_patch16_clip_224', 'dfn2b'): _dfn('DFN2B-CLIP-ViT-B-16'),
    ('simple_vit_base_patch16_clip_224', 'metaclip_400m'): _metaclip('metaclip_400m', 'b16_400m.pt'),
    ('simple_vit_base_patch16_clip_224', 'metaclip_fullcc'): _metaclip('metaclip_2pt5b', 'b16_fullcc2.5b.pt'),
    ('simple_vit_large_patch14_clip_224', 'laion2b_s32b_b82k'): ClipTag(
        'laion/CLIP-ViT-L-14-laion2B-s32B-b82K', mean_std=_INCEPTION),
    ('simple_vit_large_patch14_clip_224', 'datacomp_xl_s13b_b90k'): _datacomp('CLIP-ViT-L-14-DataComp.XL-s13B-b90K'),
    ('simple_vit_large_patch14_clip_224', 'openai'): _openai(
        'b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be6f7c2e0eca1737a03836', 'ViT-L-14.pt'),
    ('simple_vit_large_patch14_clip_224', 'dfn2b'): _dfn('DFN2B-CLIP-ViT-L-14'),
    ('simple_vit_large_patch14_clip_224', 'dfn2b_s39b'): _dfn('DFN2B-CLIP-ViT-L-14-39B', quick_gelu=False),
    ('simple_vit_large_patch14_clip_224', 'metaclip_400m'): _metaclip('metaclip_400m', 'l14_400m.pt'),
    ('simple_vit_large_patch14_clip_224', 'metaclip_fullcc'): _metaclip('metaclip_2pt5b', 'l14_fullcc2.5b.pt'),
    ('simple_vit_large_patch14_clip_336', 'openai'): _openai(
        '3035c92b350959924f9f00213499208652fc7ea050643e8b385c2dac08641f02', 'ViT-L-14-336px.pt'),
    ('simple_vit_huge_patch14_clip_224', 'laion2b_s32b_b79k'): ClipTag('laion/CLIP-ViT-H-14-laion2B-s32B-b79K'),
    ('simple_vit_huge_patch14_clip_224', 'dfn5b'): _dfn('DFN5B-CLIP-ViT-H-14', squash=True),
    ('simple_vit_huge_patch14_clip_224', 'metaclip_fullcc'): _metaclip('metaclip_2pt5b', 'h14_fullcc2.5b.pt'),
    ('simple_vit_huge_patch14_clip_224', 'metaclip_altogether'): _metaclip(
        'metaclip_altogether', 'h14_v1.2_altogether.pt', quick_gelu=False),
    ('simple_vit_huge_patch14_clip_378', 'dfn5b'): _dfn('DFN5B-CLIP-ViT-H-14-378', squash=True),
    ('simple_vit_giant_patch14_clip_224', 'laion2b_s34b_b88k'): ClipTag('laion/CLIP-ViT-g-14-laion2B-s34B-b88K'),
    ('simple_vit_giant_patch14_clip_224', 'laion2b_s12b_b42k'): ClipTag('laion/CLIP-ViT-g-14-laion2B-s12B-b42K'),
    ('simple_vit_gigantic_patch14_clip_224', 'laion2b_s39b_b160k'): ClipTag('laion/CLIP-ViT-bigG-14-laion2B-39B-b160k'),
    ('simple_vit_gigantic_patch14_clip_224', 'metaclip_fullcc'): _metaclip('metaclip_2pt5b', 'G14_fullcc2.5b.pt'),
    ('simple_vit_large_patch14_clipa_224', 'datacomp1b'): _clipa('ViT-L-14-CLIPA-datacomp1B'),
    ('simple_vit_large_patch14_clipa_336', 'datacomp1b'): _clipa('ViT-L-14-CLIPA-336-datacomp1B'),
    ('simple_vit_huge_patch14_clipa_224', 'datacomp1b'): _clipa('ViT-H-14-CLIPA-datacomp1B'),
    ('simple_vit_huge_patch14_clipa_336', 'datacomp1b'): _clipa('ViT-H-14-CLIPA-336-datacomp1B'),
    ('simple_vit_huge_patch14_clipa_336', 'laion2b'): _clipa('ViT-H-14-CLIPA-336-laion2B'),
    ('simple_vit_gigantic_patch14_clipa_224', 'datacomp1b'): _clipa('ViT-bigG-14-CLIPA-datacomp1B'),
    ('simple_vit_gigantic_patch14_clipa_336', 'datacomp1b'): _clipa('ViT-bigG-14-CLIPA-336-datacomp1B'),
}


def _placed(name: str, weights: ClipTag) -> ClipTag:
    """``weights`` of architecture ``name``, a timm-hosted hub id named after timm's architecture (ours without
    ``simple_``)."""
    return replace(weights, hub=weights.hub.format(timm=name[len('simple_'):]))


CLIP_TAGS: Dict[Tuple[str, str], ClipTag] = {key: _placed(key[0], weights) for key, weights in _TAG_ROWS.items()}


def _default_tag(name: str) -> str:
    return next(tag for arch, tag in CLIP_TAGS if arch == name)


def _act(tag: ClipTag) -> str:
    return 'quick_gelu' if tag.quick_gelu else 'gelu'


def _label(arch: ClipArch) -> str:
    layout = 'CLIPA: no ln_pre, mean pooling, the norm after the pool' if arch.clipa else 'ln_pre, [CLS] pooling'
    return f'{arch.open_clip} ({layout})'


# name -> (variant, arguments, description): config.py's ModelEntry rows (this module imports nothing of the
# package, so config.py can import it).
CLIP_ROWS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    name: ('base', arch.args(_act(CLIP_TAGS[(name, _default_tag(name))])),
           f'CLIP image tower as open_clip {_label(arch)}: model(x) is the image embedding (encode_image); '
           f'each tag builds the activation its weights were trained with (default tag {_default_tag(name)}).')
    for name, arch in CLIP_ARCHS.items()
}


def clip_tag_args(variant: str, pretrained_cfg: Any) -> Dict[str, Any]:
    """The model arguments a CLIP tag's weights need beyond the architecture's: its activation.

    ``pretrained_cfg`` is what timm hands an entrypoint: a tag, a cfg (dict or ``PretrainedCfg``) or None (the
    default tag). Empty for other models, and for a cfg naming no CLIP tag (a folder's ``model_args`` say it all).
    """
    if variant not in CLIP_ARCHS:
        return {}
    tag: Optional[str]
    if pretrained_cfg is None:
        tag = _default_tag(variant)
    elif isinstance(pretrained_cfg, str):
        tag = pretrained_cfg
    else:
        get = pretrained_cfg.get if isinstance(pretrained_cfg, dict) else \
            lambda key: getattr(pretrained_cfg, key, None)
        tag = get('tag') if get('architecture') in (None, variant) else None
    found = CLIP_TAGS.get((variant, tag)) if tag else None
    return {'act_layer': _act(found)} if found else {}


def clip_tag_facts(name: str) -> Dict[str, Any]:
    """For a ``model.tag`` name of a CLIP tag: what its downloaded weight file does not record (the activation and the
    head count), as the registry knows them; empty for any other name. open_clip too takes ``quick_gelu`` from
    the tag, not the file."""
    arch, _, tag = name.partition('.')
    weights = CLIP_TAGS.get((arch, tag))
    return {'act_layer': _act(weights), 'num_heads': CLIP_ARCHS[arch].heads} if weights else {}


def clip_tag_open_clip(name: Optional[str]) -> Optional[Tuple[str, bool]]:
    """For a ``model.tag`` name of a CLIP tag: (open_clip's model name of its architecture, whether the tag's weights
    use QuickGELU), from which open_clip builds the network from its own packaged config; None for any other name."""
    arch, _, tag = (name or '').partition('.')
    weights = CLIP_TAGS.get((arch, tag))
    return (CLIP_ARCHS[arch].open_clip, weights.quick_gelu) if weights else None


def _cfg(name: str, tag: str, weights: ClipTag) -> Dict[str, Any]:
    arch = CLIP_ARCHS[name]
    mean, std = weights.mean_std
    activation = 'QuickGELU' if weights.quick_gelu else 'GELU'
    return {
        'hf_hub_id': weights.hub, 'hf_hub_filename': HF_WEIGHTS, 'url': weights.url,
        # 'hf': timm downloads the one file and hands it to model.load_pretrained (the OpenCLIP / OpenAI reader)
        'custom_load': 'hf',
        'num_classes': arch.embed, 'input_size': (3, arch.img, arch.img), 'pool_size': None, 'fixed_input_size': False,
        'interpolation': weights.interpolation, 'crop_pct': 1.0, 'crop_mode': 'squash' if weights.squash else 'center',
        'mean': mean, 'std': std, 'first_conv': 'patch_embed.proj', 'classifier': 'head', 'license': weights.license,
        'origin_url': 'https://github.com/mlfoundations/open_clip',
        'notes': (f'{weights.source} CLIP image tower, open_clip {arch.open_clip} pretrained={tag!r}; trained with '
                  f'{activation}; the text tower and logit_scale are not loaded',),
    }


def clip_default_cfgs() -> Dict[str, Dict[str, Any]]:
    """``name.tag`` -> timm pretrained cfg of every published CLIP tower, each architecture's default tag first."""
    return {f'{name}.{tag}': _cfg(name, tag, weights) for (name, tag), weights in CLIP_TAGS.items()}
