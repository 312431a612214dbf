"""timm ``NaFlexVit`` weights (the SigLIP 2 NaFlex towers timm hosts, ``naflexvit_*``): ``NaFlexEmbeds``' Linear over
P-P-C patches and its (1, G_h, G_w, D) table become ours; the blocks are timm's VisionTransformer ones, read as
``timm_format`` reads them. The table's per-image resize is one of our rules (``naflex_rule``: the F.interpolate call
of the same mode, corners and antialias), from the square of the longer side where timm's
``pos_embed_ar_preserving`` says so (``Learned.ar_preserving``); factorised tables (``pos_embed_y``, ``pos_embed_x``)
are the 'factorized' scheme. A family may take a table as its own scheme (``_scheme``: RADIO's, ``families/radio.py``)."""
from typing import Any, Dict, Optional, Tuple

import torch.nn as nn

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..geometry import RESAMPLE_OFFSETS, RESAMPLE_RULES
from ..parts import Factorized, PositionScheme
from .fills import batched_grid_table, linear_patch_kernel
from .naflex_reader import NaFlexReader
from .source import Rule
from .timm_format import TimmCheckpoint

__all__ = ['TimmNaFlexCheckpoint', 'naflex_rule']

# timm NaFlexVit's NaFlexEmbeds under our names: a Linear over P-P-C patches, a (1, G_h, G_w, D) table.
_NAFLEX_RULES = {
    'patch_embed.proj.weight': Rule(('{p}embeds.proj.weight',), linear_patch_kernel),
    'patch_embed.proj.bias': Rule(('{p}embeds.proj.bias',)),
    'pos_embed': Rule(('{p}embeds.pos_embed',), batched_grid_table),
    'cls_token': Rule(('{p}embeds.cls_token',)),
    'reg_token': Rule(('{p}embeds.reg_token',)),  # registers, with no table row: NaFlexEmbeds' prefix tokens
    'abs_pos.y': Rule(('{p}embeds.pos_embed_y',)),  # factorised tables (the 'factorized' scheme's own)
    'abs_pos.x': Rule(('{p}embeds.pos_embed_x',)),
}
_NAFLEX_KNOWN = {rule.sources[0][len('{p}'):] for rule in _NAFLEX_RULES.values()}


def naflex_rule(embeds: nn.Module) -> Optional[str]:
    """Our resample rule computing NaFlexEmbeds' per-image table resize (``F.interpolate`` of its mode, corners and
    antialias, to the size asked for), None where none does."""
    if getattr(embeds, 'pos_embed_use_grid_sample', False):  # samples each patch's point: no antialias when shrinking
        return None
    wanted = (getattr(embeds, 'pos_embed_interp_mode', None), bool(getattr(embeds, 'pos_embed_align_corners', False)),
              bool(getattr(embeds, 'pos_embed_antialias', True)))
    return next((name for name, (mode, corners, antialias) in RESAMPLE_RULES.items()
                 if (mode, bool(corners), antialias) == wanted and name not in RESAMPLE_OFFSETS), None)


class TimmNaFlexCheckpoint(NaFlexReader, TimmCheckpoint):
    """timm ``NaFlexVit`` weights (the SigLIP 2 NaFlex towers timm hosts): ``NaFlexEmbeds``' Linear over P-P-C
    patches and its (1, G_h, G_w, D) table, under our names."""
    RULES = _NAFLEX_RULES
    KIND = 'NaFlexVit'
    KERNEL, CLS, REG = 'embeds.proj.weight', 'embeds.cls_token', 'embeds.reg_token'
    SETTINGS = dict(TimmCheckpoint.SETTINGS, pos_embed_resample='timm')  # NaFlexVitCfg's default table resize
    ALWAYS_CROPS = True
    _scheme: Optional[PositionScheme] = None  # a position scheme no flat name says (``_position``)

    def _embedding_facts(self, model: nn.Module, arch: str) -> Dict[str, Any]:
        """What a NaFlexVit's embedding records beyond its tensors; the options this family does not express refused."""
        embeds = model.embeds
        beyond = [(getattr(embeds, 'pos_embed_type', None) not in ('learned', 'factorized'), 'a position embedding '
                   'other than a learned table or factorised ones (none)'),
                  (getattr(embeds, 'norm_input', None) is not None or not isinstance(embeds.norm, nn.Identity),
                   'a norm in the patch embedding'),
                  (getattr(embeds, 'enable_patch_interpolator', False), 'its patch-size interpolator'),
                  (not getattr(embeds, 'is_linear', True) or not getattr(embeds, 'channels_last', True),
                   'a patch embedding other than a Linear over P-P-C patches')]
        for refused, what in beyond:
            if refused:
                raise ViTVariantsError(f'this NaFlexVit uses {what}, which SimpleVisionTransformer does not express',
                                       path=self._config_path, key='architecture')
        if model.global_pool == 'map' and model.num_prefix_tokens:
            raise ViTVariantsError("this NaFlexVit pools by MAP beside prefix tokens, whose packed-batch output this "
                                   "family's MAP head does not reproduce", path=self._config_path, key='architecture')
        (gh, gw), (ph, pw) = embeds.pos_embed_grid_size, embeds.patch_size
        return dict(patch_size=(ph, pw), in_chans=embeds.in_chans, img_size=(gh * ph, gw * pw),
                    **self._table_facts(embeds))

    def _table_facts(self, embeds: nn.Module) -> Dict[str, Any]:
        """How the learned table is resized per image: our rule computing timm's, and whether from the square of
        the longer side; a resize no rule computes refused. Factorised tables have one resize (linear, half-pixel)."""
        if embeds.pos_embed_type == 'factorized' and not getattr(embeds, 'pos_embed_use_grid_sample', False):
            return dict(pos_embed_ar_preserving=bool(embeds.pos_embed_ar_preserving))  # the scheme: ``_position``
        rule = naflex_rule(embeds)
        if rule is None:
            mode, corners, antialias = (getattr(embeds, f'pos_embed_{n}', None) for n in
                                        ('interp_mode', 'align_corners', 'antialias'))
            how = 'grid_sample' if embeds.pos_embed_use_grid_sample else \
                f'{mode!r}, align_corners={corners}, antialias={antialias}'
            raise ViTVariantsError(f'this NaFlexVit resizes its table by {how}, which no resample rule of '
                                   f'SimpleVisionTransformer computes ({_rules_said()})', path=self._config_path,
                                   key='architecture')
        return dict(pos_embed_resample=rule, pos_embed_ar_preserving=bool(embeds.pos_embed_ar_preserving))

    def _refuse_beyond(self, local: set) -> None:
        foreign = sorted(n for n in local if n.startswith('embeds.') and n not in _NAFLEX_KNOWN)
        if foreign:
            raise self._error('a NaFlexVit embedding part this family does not express (a patch norm)',
                              key=self._prefix + foreign[0])

    def _patch_kernel(self, facts: Dict[str, Any]) -> Tuple[int, int, int, int]:
        """(D, C, P, P) of a NaFlexVit's Linear (D, P*P*C): from its architecture, else 3 channels and a square patch
        assumed (a bare state dict records neither)."""
        key = self._prefix + self.KERNEL
        weight = self._shape(key)
        if len(weight) != 2:
            raise self._error('a NaFlexVit patch embedding must be a (width, P*P*C) Linear', key=key, shapes=(weight,))
        dim, flat = weight
        if not facts.get('patch_size'):
            patch, in_chans = self._flat_patch(key, flat, weight, "a NaFlexVit state dict's patch kernel is "
                                               '(width, P*P*C) and records neither P nor C; 3 channels and a square '
                                               'patch assumed')
            return dim, in_chans, patch, patch
        (patch_h, patch_w), in_chans = facts['patch_size'], facts['in_chans']
        if patch_h * patch_w * in_chans != flat:
            raise self._error(f'the patch kernel has {flat} inputs, not P*P*C = {patch_h}*{patch_w}*{in_chans} as '
                              'its architecture says', key=key, shapes=(weight, (dim, 'P*P*C')))
        return dim, in_chans, patch_h, patch_w

    def _position(self, local: set, dim: int, patch: Tuple[int, int], class_token: bool,
                  facts: Dict[str, Any]) -> Tuple[str, bool]:
        """The (1, G_h, G_w, D) table, or the factorised (1, G_h, D) and (1, G_w, D) ones (``self._scheme``); sets
        ``self.grid``."""
        factorised = [n for n in ('embeds.pos_embed_y', 'embeds.pos_embed_x') if n in local]
        if not factorised:
            self._check_grid_table(self._prefix + 'embeds.pos_embed', dim, leading=(1,))
            return 'learn', False
        if 'embeds.pos_embed' in local or len(factorised) != 2:
            raise self._error('a NaFlexVit has one learned table or two factorised tables (pos_embed_y and '
                              'pos_embed_x)', key=self._prefix + factorised[0])
        rows, cols = (self._axis_table(self._prefix + n, dim) for n in ('embeds.pos_embed_y', 'embeds.pos_embed_x'))
        self._check_dims(self._prefix + factorised[0], tokens=rows * cols)
        self.grid = (rows, cols)
        facts.setdefault('pos_embed_resample', self.SETTINGS['pos_embed_resample'])  # no learned table: no effect
        square = facts['pos_embed_ar_preserving'] if 'pos_embed_ar_preserving' in facts else self._unrecorded(
            'pos_embed_ar_preserving', None, False, "a state dict does not record it; NaFlexVitCfg's default")
        self._scheme = Factorized(table_grid=self.grid, ar_preserving=square)
        return Factorized.scheme, False

    def _axis_table(self, key: str, dim: int) -> int:
        """The length of a factorised (1, L, D) table."""
        shape = self._shape(key)
        if len(shape) != 3 or shape[0] != 1 or shape[2] != dim:
            raise self._error('a factorised position table must be (1, length, width)', key=key,
                              shapes=(shape, (1, 'length', dim)))
        return shape[1]

    def _infer(self) -> SimpleViTConfig:
        """The config, its position scheme the one ``_position`` made where a flat name cannot say it."""
        config = super()._infer()
        return config if self._scheme is None else config.replace(positions=(self._scheme,))


def _rules_said() -> str:
    """The resizes some rule computes, as NaFlexVit's options say them."""
    said = dict.fromkeys(f'{mode!r}, align_corners={bool(corners)}, antialias={antialias}'
                         for name, (mode, corners, antialias) in RESAMPLE_RULES.items() if name not in RESAMPLE_OFFSETS)
    return 'expressed: ' + '; '.join(said)
