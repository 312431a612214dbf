"""The model table: the variants (big_vision's ``decode_variant``), each registered model's row, and the nearest
registered name of a config.

Variants are data: a name gives width, depth, MLP width and heads, and each registered model is one row of
``MODELS``. A family module (``families/<name>.py``) registers its rows here through the family registry.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .config import SimpleViTConfig

__all__ = ['Variant', 'VARIANTS', 'ModelEntry', 'MODELS', 'architecture_for', 'heads_for_width']


@dataclass(frozen=True)
class Variant:
    """big_vision's ``decode_variant`` entry: width, depth, MLP width, heads."""
    width: int
    depth: int
    mlp: int
    heads: int

    def config_args(self) -> Dict[str, int]:
        return dict(embed_dim=self.width, depth=self.depth, mlp_dim=self.mlp, num_heads=self.heads)


# From big_vision/models/vit.py (decode_variant); So400m and g-opt are the SigLIP shapes.
VARIANTS: Dict[str, Variant] = {
    'tiny': Variant(192, 12, 768, 3),
    'small': Variant(384, 12, 1536, 6),
    'base': Variant(768, 12, 3072, 12),
    'large': Variant(1024, 24, 4096, 16),
    'huge': Variant(1280, 32, 5120, 16),
    'so400m': Variant(1152, 27, 4304, 16),
    'giantopt': Variant(1536, 40, 6144, 16),
}


@dataclass(frozen=True)
class ModelEntry:
    """One registered model: a variant, what differs from its defaults, and a one-line description."""
    variant: str
    args: Dict[str, Any] = field(default_factory=dict)
    doc: str = ''

    @property
    def kwargs(self) -> Dict[str, Any]:
        """What this model sets; everything else is a ``SimpleViTConfig`` default (or timm's, e.g. num_classes)."""
        return {**VARIANTS[self.variant].config_args(), **self.args}

    def config(self, **overrides: Any) -> SimpleViTConfig:
        """This row's config with ``overrides`` (a folder's model_args, a caller's kwargs) on top: a part given whole
        replaces the row's, flat names win over both."""
        if any(name in SimpleViTConfig.PARTS for name in overrides):
            return SimpleViTConfig.of(**self.kwargs).replace(**overrides)
        return SimpleViTConfig.of(**{**self.kwargs, **overrides})


MODELS: Dict[str, ModelEntry] = {
    'simple_vit_tiny': ModelEntry('tiny', {}, 'ViT-Ti/16 plain recipe (width 192, depth 12, 3 heads).'),
    'simple_vit_small': ModelEntry('small', {}, 'ViT-S/16 plain recipe (width 384, depth 12, 6 heads).'),
    'simple_vit_base': ModelEntry('base', {}, 'ViT-B/16 plain recipe (width 768, depth 12, 12 heads).'),
    'simple_vit_large': ModelEntry('large', {}, 'ViT-L/16 plain recipe (width 1024, depth 24, 16 heads).'),
    'simple_vit_huge': ModelEntry('huge', {}, 'ViT-H/16 plain recipe (width 1280, depth 32, 16 heads).'),
    'simple_vit_tiny_patch16_224': ModelEntry('tiny', {}, 'ViT-Ti/16 at 224px.'),
    'simple_vit_small_patch16_224': ModelEntry(
        'small', {'rep_size': 384},
        "ViT-S/16 at 224px as big_vision's vit_s16_i1k config: gap, sin-cos, 384-wide pre-logits "
        '(tags bv_i1k_{300,150,90}ep are the published Better-plain-ViT ImageNet-1k weights).'),
    'simple_vit_base_patch16_224': ModelEntry('base', {}, 'ViT-B/16 at 224px.'),
    'simple_vit_large_patch16_224': ModelEntry('large', {}, 'ViT-L/16 at 224px.'),
    'simple_vit_huge_patch16_224': ModelEntry('huge', {}, 'ViT-H/16 at 224px.'),
    'simple_vit_small_patch32_224': ModelEntry('small', {'patch_size': 32}, 'ViT-S/32 at 224px.'),
    'simple_vit_base_patch32_224': ModelEntry('base', {'patch_size': 32}, 'ViT-B/32 at 224px.'),
    'simple_vit_tiny_patch4_32': ModelEntry(
        'tiny', {'img_size': 32, 'patch_size': 4, 'depth': 6},
        'Small-image plain ViT for 32x32 inputs: patch 4, width 192, 3 heads, 6 blocks.'),
}

# What must match for ``architecture`` to name a registered model, most telling first.
_DIMS = ('embed_dim', 'num_heads', 'mlp_dim', 'depth', 'patch_size', 'rep_size', 'img_size', 'global_pool', 'pos_embed',
         'class_token', 'dist_token', 'pre_norm', 'patch_bias', 'reg_tokens', 'init_values', 'block_type')


def _dim(config: SimpleViTConfig, name: str) -> Any:
    """A ``_DIMS`` field as it shapes the network: LayerScale's presence, not its initial value (a reader that does
    not know it, timm's, records 1.0 where DeiT-III's rows say 1e-4, and the stored gammas are what runs)."""
    value = config.to_flat()[name]
    return value is not None if name == 'init_values' else value


def architecture_for(config: SimpleViTConfig) -> str:
    """The registered model matching every dimension, else the nearest family member.

    ``config.json`` always carries the full ``model_args``, so the nearest name only labels the
    family; it never decides the network.
    """
    flat = config.to_flat(include_training=True)
    network = config.to_flat()

    def rank(name: str) -> Tuple[Any, ...]:
        """Nearest first: fewest mismatched ``_DIMS`` (the most telling first among equals), then fewest other
        fields that differ (pos_embed_resample, LayerScale, ...), then the nearest width and depth (a narrow test
        model is labelled by its family's smallest row), then the name, so the label never depends on the order in
        which the families registered their rows."""
        entry = MODELS[name]
        ref = entry.config()
        distance = tuple(int(_dim(config, d) != _dim(ref, d)) for d in _DIMS)
        ref_flat = ref.to_flat()
        others = sum(network.get(key) != ref_flat.get(key) for key in network.keys() | ref_flat.keys())
        size_gap = abs(entry.kwargs['embed_dim'] - config.embed_dim), abs(entry.kwargs['depth'] - config.depth)
        return sum(distance), distance, others, size_gap, name

    # timm's create_model drops None keyword arguments, so a row that sets a field this config leaves None
    # (DINOv3's init_values, a rep_size) would fill it when the folder is loaded: such rows cannot label it.
    eligible = [name for name, entry in MODELS.items()
                if not any(value is not None and flat.get(key) is None for key, value in entry.kwargs.items())]
    return min(eligible, key=rank)


def heads_for_width(width: int) -> Optional[int]:
    """The head count of the standard ViT of this width (192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16)."""
    return next((v.heads for v in VARIANTS.values() if v.width == width), None)
