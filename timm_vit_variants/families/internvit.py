"""InternViT in OpenGVLab's own layout (Chen et al. 2024, *InternVL*): the ``InternVisionModel`` folders OpenGVLab
publishes for InternViT-300M (``InternViT-300M-448px``, ``-V2_5``) with their remote code, model_type
``intern_vit_6b`` (the code's name for every size).

The tower is a pre-norm ViT with a [CLS] token (``embeddings.class_embedding``), a learned table with its slot
(``embeddings.position_embedding``, (1, N + 1, D)), fused ``attn.qkv`` (its bias by ``qkv_bias``) and ``attn.proj``,
LayerScale (``ls1`` / ``ls2``: our ``ls1.gamma`` / ``ls2.gamma``), ``mlp.fc1`` / ``fc2`` and no final norm.
``InternVisionModel`` outputs the last block's tokens (``last_hidden_state``) and their [CLS] token
(``pooler_output``: token pooling here). At any other grid its embedding resizes the patch rows of the table as it
runs (``F.interpolate``, bicubic, ``align_corners=False``, no antialias, to any H x W): the 'hf' rule. What this model
does not express is refused by name: the RMSNorm (``norm_type 'rms_norm'``) and q/k RMSNorm (``qk_normalization``) of
InternViT-6B. timm's ``vit_intern300m_patch14_448`` folders (timm's keys) are read by the timm reader.
"""
from typing import Dict, Set

from ..checkpoints.preprocessing import imagenet_preprocessing
from ..checkpoints.routes import Route
from ..checkpoints.source import Rule
from ..checkpoints.transformers_folder import TransformersCheckpoint
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .registry import Family

__all__ = ['INTERNVIT_MODEL_TYPE', 'InternViTCheckpoint', 'FAMILY']

INTERNVIT_MODEL_TYPE = 'intern_vit_6b'
_L = '{p}encoder.layers.{i}.'
_RULES: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule(('{p}embeddings.patch_embedding.weight',)),
    'patch_embed.proj.bias': Rule(('{p}embeddings.patch_embedding.bias',)),
    'cls_token': Rule(('{p}embeddings.class_embedding',)),
    'pos_embed': Rule(('{p}embeddings.position_embedding',)),
    **{f'blocks.{{i}}.{ours}': Rule((_L + theirs,)) for ours, theirs in (
        ('norm1.weight', 'norm1.weight'), ('norm1.bias', 'norm1.bias'),
        ('attn.qkv.weight', 'attn.qkv.weight'), ('attn.qkv.bias', 'attn.qkv.bias'),
        ('attn.proj.weight', 'attn.proj.weight'), ('attn.proj.bias', 'attn.proj.bias'),
        ('ls1.gamma', 'ls1'), ('ls2.gamma', 'ls2'),
        ('norm2.weight', 'norm2.weight'), ('norm2.bias', 'norm2.bias'),
        ('mlp.fc1.weight', 'mlp.fc1.weight'), ('mlp.fc1.bias', 'mlp.fc1.bias'),
        ('mlp.fc2.weight', 'mlp.fc2.weight'), ('mlp.fc2.bias', 'mlp.fc2.bias'))},
}


def _flag(cfg: Dict, path: str, key: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise ViTVariantsError(f'expected true or false, got {value!r}', path=path, key=key)
    return value


class InternViTCheckpoint(TransformersCheckpoint):
    """An OpenGVLab ``InternVisionModel`` folder, read as what the class outputs (module docstring)."""
    format = 'internvit'
    RULES = _RULES
    CLASSES = {'InternVisionModel': None}
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        1.0, "not recorded by the folder; InternVL's processor: ImageNet mean and std, resized to its size")

    def _candidates(self) -> Set[str]:
        return set(self._store.names())

    def _infer(self) -> SimpleViTConfig:
        cfg_path, cfg = self._config_path, self.source_config
        if cfg_path is None:
            raise ViTVariantsError('an InternViT folder needs its config.json next to the weights', path=self.path,
                                   key='config.json')
        self._source_class()
        norm = cfg.get('norm_type', 'rms_norm')  # the code's default is InternViT-6B's
        if norm != 'layer_norm':
            raise ViTVariantsError(f'norm_type {norm!r}: only layer_norm is expressed (the RMSNorm of '
                                   'InternViT-6B is not)', path=cfg_path, key='norm_type')
        if _flag(cfg, cfg_path, 'qk_normalization', True):
            raise ViTVariantsError('the q/k RMSNorm (qk_normalization) of InternViT-6B is not expressed',
                                   path=cfg_path, key='qk_normalization')
        qkv_bias = _flag(cfg, cfg_path, 'qkv_bias', False)
        self._prefix = self.options.prefix or ''
        network = self._network(eps_default=1e-6)
        self._check_no_extra_layer(network['depth'], 'encoder.layers.{i}.norm1.weight')
        self.notes.append("detected: OpenGVLab's InternViT (InternVisionModel: LayerScale, no final norm, the [CLS] "
                          "token as its pooled output); the table is resized as its embedding does (bicubic, no "
                          'antialias)')
        # LayerScale's init (InternVisionConfig's initializer_factor) only sets the starting value; ls1/ls2 are read
        return SimpleViTConfig.of(**network, num_classes=0, global_pool='token', class_token=True, pos_embed='learn',
                                  pos_embed_cls_slot=True, pos_embed_resample='hf', final_norm=False, fc_norm=False,
                                  patch_bias=True, qkv_bias=qkv_bias, init_values=0.1)


FAMILY = Family(
    name='internvit',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1962.5, lambda p: p.model_type == INTERNVIT_MODEL_TYPE, InternViTCheckpoint),),
)
