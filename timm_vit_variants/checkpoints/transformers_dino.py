"""What the transformers DINOv2 and DINOv3 readers share: the names both generations give alike (``dino_table``),
the mask token both store for masked training (skipped), and ``num_register_tokens`` read and checked
(``HFDinoReader``).
"""
from typing import Any, Dict, Set

from ..errors import ViTVariantsError
from .source import Rule
from .transformers_folder import TransformersCheckpoint

__all__ = ['HFDinoReader', 'dino_table', 'KINDS', 'MASK']

MASK = 'embeddings.mask_token'
KINDS = ('weight', 'bias')


def dino_table(layer: str, patch: str, attn_out: str, norm: str) -> Dict[str, Rule]:
    """Our key -> transformers names of what both DINO generations name alike: [CLS], registers, the attention
    output ``{layer}attention.{attn_out}``, LayerScale, the blocks' norms; ``patch`` and ``norm`` are the patch
    conv's and final norm's names."""
    return {
        'patch_embed.proj.weight': Rule((f'{patch}.weight',)),
        'patch_embed.proj.bias': Rule((f'{patch}.bias',)),
        'cls_token': Rule(('embeddings.cls_token',)),
        'reg_token': Rule(('embeddings.register_tokens',)),
        'blocks.{i}.attn.proj.weight': Rule((f'{layer}attention.{attn_out}.weight',)),
        'blocks.{i}.attn.proj.bias': Rule((f'{layer}attention.{attn_out}.bias',)),
        'blocks.{i}.ls1.gamma': Rule((f'{layer}layer_scale1.lambda1',)),
        'blocks.{i}.ls2.gamma': Rule((f'{layer}layer_scale2.lambda1',)),
        **{f'blocks.{{i}}.{n}.{k}': Rule((f'{layer}{n}.{k}',)) for n in ('norm1', 'norm2') for k in KINDS},
        'norm.weight': Rule((f'{norm}.weight',)),
        'norm.bias': Rule((f'{norm}.bias',)),
    }


class HFDinoReader(TransformersCheckpoint):
    """What the transformers DINOv2 and DINOv3 readers share: the mask token skipped (masked training only), and
    ``num_register_tokens`` read and checked (their names: ``dino_table``)."""

    def _candidates(self) -> Set[str]:
        # a model with no registers still saves its (1, 0, D) register tensor: nothing to read
        return {n for n in self._store.names() if n != self._prefix + MASK and not
                (n.endswith('embeddings.register_tokens') and 0 in tuple(self._store.shape(n)))}

    def _config_registers(self, registers: Any) -> int:
        """config.json's ``num_register_tokens`` (``registers``), an integer >= 0 within the limits."""
        if isinstance(registers, bool) or not isinstance(registers, int) or registers < 0:
            raise ViTVariantsError(f'expected an integer >= 0, got {registers!r}', path=self._config_path,
                                   key='num_register_tokens')
        self.limits.check('tokens', registers, path=self._config_path, key='num_register_tokens')
        return registers
