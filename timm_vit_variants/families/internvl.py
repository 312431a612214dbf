"""InternVL's image tower (InternViT; Chen et al. 2024, *InternVL*): transformers' ``InternVLVisionModel`` folders
(model_type ``internvl_vision``).

The tower is a pre-norm ViT with a [CLS] token, a learned table with its slot stored as a parameter (1, N + 1, D),
separate q/k/v projections (their bias by ``attention_bias``) and ``attention.projection_layer``, LayerScale
(``lambda_1`` / ``lambda_2``: our ``ls1`` / ``ls2``) and ``mlp.fc1`` / ``fc2``. ``use_mean_pooling`` (the default)
makes the final ``layernorm`` an identity: the output is the last block's tokens; otherwise that norm is applied to
every token. The class has no pooled output, so none is read (no pooling). The table is resized as the class does at
any other grid (rule 'hf': bicubic, no antialias). What this model does not express is refused by name: an RMSNorm
(``norm_type``), the q/k RMSNorm (``use_qk_norm``), a tower without the absolute table. The mask token (masked
pretraining only) is skipped with a note.
"""
from typing import Dict, Set

from ..checkpoints.fills import stack_rows
from ..checkpoints.preprocessing import imagenet_preprocessing
from ..checkpoints.routes import Route
from ..checkpoints.source import Rule
from ..checkpoints.transformers_folder import TransformersCheckpoint
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .registry import Family

__all__ = ['INTERNVL_MODEL_TYPE', 'InternVLVisionCheckpoint', 'FAMILY']

INTERNVL_MODEL_TYPE = 'internvl_vision'
_L = '{p}encoder.layer.{i}.'
_QKV = tuple(_L + f'attention.{n}_proj' for n in 'qkv')
_MASK = 'embeddings.mask_token'
_RULES: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule(('{p}embeddings.patch_embeddings.projection.weight',)),
    'patch_embed.proj.bias': Rule(('{p}embeddings.patch_embeddings.projection.bias',)),
    'cls_token': Rule(('{p}embeddings.cls_token',)),
    'pos_embed': Rule(('{p}embeddings.position_embeddings',)),
    'blocks.{i}.norm1.weight': Rule((_L + 'layernorm_before.weight',)),
    'blocks.{i}.norm1.bias': Rule((_L + 'layernorm_before.bias',)),
    'blocks.{i}.attn.qkv.weight': Rule(tuple(n + '.weight' for n in _QKV), stack_rows),
    'blocks.{i}.attn.qkv.bias': Rule(tuple(n + '.bias' for n in _QKV), stack_rows),
    'blocks.{i}.attn.proj.weight': Rule((_L + 'attention.projection_layer.weight',)),
    'blocks.{i}.attn.proj.bias': Rule((_L + 'attention.projection_layer.bias',)),
    'blocks.{i}.ls1.gamma': Rule((_L + 'lambda_1',)),
    'blocks.{i}.ls2.gamma': Rule((_L + 'lambda_2',)),
    'blocks.{i}.norm2.weight': Rule((_L + 'layernorm_after.weight',)),
    'blocks.{i}.norm2.bias': Rule((_L + 'layernorm_after.bias',)),
    'blocks.{i}.mlp.fc1.weight': Rule((_L + 'mlp.fc1.weight',)),
    'blocks.{i}.mlp.fc1.bias': Rule((_L + 'mlp.fc1.bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule((_L + 'mlp.fc2.weight',)),
    'blocks.{i}.mlp.fc2.bias': Rule((_L + 'mlp.fc2.bias',)),
    'norm.weight': Rule(('{p}layernorm.weight',)),
    'norm.bias': Rule(('{p}layernorm.bias',)),
}
# config.json flag -> (the value this model expresses, the part the other value needs)
_REFUSED = {
    'use_qk_norm': (False, 'the q/k RMSNorm (use_qk_norm) is not expressed'),
    'use_absolute_position_embeddings': (True, 'a tower without the absolute position table is not expressed'),
}


class InternVLVisionCheckpoint(TransformersCheckpoint):
    """A transformers ``InternVLVisionModel`` folder, read as what its class outputs (module docstring)."""
    format = 'internvl'
    RULES = _RULES
    CLASSES = {'InternVLVisionModel': None}
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        1.0, "not recorded by the folder; InternVL's processor: ImageNet mean and std, resized to its size")

    def _candidates(self) -> Set[str]:
        return set(self._store.names()) - {self._prefix + _MASK}

    def _infer(self) -> SimpleViTConfig:
        cfg_path, cfg = self._config_path, self.source_config
        if cfg_path is None:
            raise ViTVariantsError('a transformers InternVL image tower needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        self._source_class()
        if cfg.get('norm_type', 'layer_norm') != 'layer_norm':
            raise ViTVariantsError(f"norm_type {cfg['norm_type']!r}: only layer_norm is expressed (an RMSNorm is "
                                   'not)', path=cfg_path, key='norm_type')
        for key, (expressed, why) in _REFUSED.items():
            value = cfg.get(key, expressed)
            if not isinstance(value, bool):
                raise ViTVariantsError(f'expected true or false, got {value!r}', path=cfg_path, key=key)
            if value != expressed:
                raise ViTVariantsError(why, path=cfg_path, key=key)
        flags: Dict[str, bool] = {}
        for key, default in (('attention_bias', False), ('use_mean_pooling', True)):
            flags[key] = cfg.get(key, default)
            if not isinstance(flags[key], bool):
                raise ViTVariantsError(f'expected true or false, got {flags[key]!r}', path=cfg_path, key=key)
        init = cfg.get('layer_scale_init_value', 0.1)
        if isinstance(init, bool) or not isinstance(init, (int, float)):
            raise ViTVariantsError(f'expected a number, got {init!r}', path=cfg_path, key='layer_scale_init_value')
        self._prefix = self.options.prefix or ''
        network = self._network(eps_default=1e-6)
        self._check_no_extra_layer(network['depth'], 'encoder.layer.{i}.layernorm_before.weight')
        final_norm = not flags['use_mean_pooling']
        self.notes.append(
            'detected: a transformers InternVL image tower (LayerScale; '
            + ('the final layernorm on every token' if final_norm else "use_mean_pooling: no final norm, the last "
               "block's tokens") + '; no pooled output); the table is resized as the class does (bicubic, no '
            'antialias)' + (f'; skipped {_MASK}, used by masked pretraining only' if _MASK in self._store else ''))
        # LayerScale's init only sets the starting value; the folder's lambdas are read either way
        return SimpleViTConfig.of(**network, num_classes=0, global_pool='', class_token=True, pos_embed='learn',
                                  pos_embed_cls_slot=True, pos_embed_resample='hf', final_norm=final_norm,
                                  fc_norm=False, patch_bias=True, qkv_bias=flags['attention_bias'],
                                  init_values=float(init) if init else 1.0)


FAMILY = Family(
    name='internvl',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1963., lambda p: p.model_type == INTERNVL_MODEL_TYPE, InternVLVisionCheckpoint),),
)
