"""Position schemes: each way the model knows where its tokens are is one object, built from the config's parts.

``config.positions`` holds at most one scheme part per slot (``parts.PositionScheme``: 'learn' and 'rope', say);
``SCHEMES``, the one registry, builds each into the model's slot its part names. A slot is a model attribute, None or a module, named
by the state-dict prefix of what fills it, so saved folders keep their keys (``pos_embed``, ``rope.periods``,
``rope.freqs``, ``pos_cpe.proj.*``, ``rel_pos.tables``):

* ``abs_pos``, absolute: 'sincos' (``posemb.SinCos2dPosEmbed``), 'learn' (``posemb.LearnedPosResampler`` over the
  model's ``pos_embed``, timm's parameter) or 'factorized' (``posemb.FactorizedPosEmbed``, its own row and column
  tables ``abs_pos.y``, ``abs_pos.x``): ``add_to`` adds each patch token's position in the one embedding step
  and gives each image's prefix slots.
* ``rope`` and ``rel_pos``, attention inputs: 'rope' (``rope.py``'s kind of ``rope_type``: ``rotations`` for the
  sequences, ``layer`` for each block) and 'relpos' (``relpos.RelPosBias``: ``join_mask`` adds each block's bias to
  its attention mask).
* ``pos_cpe``, after a block: 'cpe' (``posemb.PosEncodingGenerator``, ``after_block``).

Schemes of packed NaFlex rows also ``prepare_rows`` for each chunk (rotations into the rows, a canvas, an index)
into the ``BlockContext``, under their slot name. A scheme whose cost grows with the input says what a chunk holds
for it per token pair (``pair_bytes``, counted in the packing budget) and refuses an input or a nominal grid over
the model's ``limits`` before anything is made (``check_cost``). These hooks are the declared protocol
``SchemeModule`` (``scheme.py``), whose no-op defaults a scheme overrides where it needs them. ``PositionsMixin`` is
the one code that reads the slots: the embedding step, the block loop, the packed-row loop and ``set_input_size``
call it and name no scheme.

A new scheme: its part (a ``parts.PositionScheme`` subclass naming its slot), a ``SchemeModule`` with its slot's
methods, a builder and a ``SCHEMES`` row (a new kind: a slot in ``SLOTS`` and a call in ``PositionsMixin``), and, if
it owns a tensor that a grid change resizes, that key's rule in ``geometry.fit_tensor`` (listed in ``RESIZED_KEYS``).
"""
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

import torch
import torch.nn as nn
from timm.layers import trunc_normal_

from .block_context import BlockContext
from .config import SimpleViTConfig
from .parts import Cpe, Factorized, Learned, RelPos, Rope, SinCos
from .geometry import Geometry, fit_tensor, is_capturing
from .posemb import FactorizedPosEmbed, LearnedPosResampler, PosEncodingGenerator, SinCos2dPosEmbed
from .relpos import RelPosBias
from .rope import create_rope
from .scheme import SchemeModule

__all__ = ['SchemeModule', 'SCHEMES', 'SLOTS', 'RESIZED_KEYS', 'STEM_PATTERN', 'AFTER_FIRST_BLOCK', 'PositionsMixin', 'block_rotation',
           'block_options', 'build_positions']

# A scheme's module from the config, its part (``parts.PositionScheme``), the nominal grid and device/dtype.
Builder = Callable[[SimpleViTConfig, Any, Tuple[int, int], Dict[str, Any]], SchemeModule]


def _sincos(cfg: SimpleViTConfig, part: SinCos, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return SinCos2dPosEmbed(cfg.embed_dim, grid, part.temperature, device=dd['device'])


def _learn(cfg: SimpleViTConfig, part: Learned, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return LearnedPosResampler(cfg.num_prefix_slots, part.resample, part.ar_preserving)


def _factorized(cfg: SimpleViTConfig, part: Factorized, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return FactorizedPosEmbed(cfg.embed_dim, part.table_grid, part.ar_preserving, **dd)


def _cpe(cfg: SimpleViTConfig, part: Cpe, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return PosEncodingGenerator(cfg.embed_dim, cfg.num_prefix_tokens, **dd)


def _rope(cfg: SimpleViTConfig, part: Rope, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return create_rope(part.kind, cfg.embed_dim // cfg.num_heads, cfg.depth, cfg.num_heads, part.theta,
                       ref_grid=part.ref_grid, **dd)


def _relpos(cfg: SimpleViTConfig, part: RelPos, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return RelPosBias(grid, cfg.depth, cfg.num_heads, **dd)


# Each position scheme's builder, by its part's ``scheme`` name; the part says which slot it fills.
SCHEMES: Dict[str, Builder] = {'sincos': _sincos, 'learn': _learn, 'factorized': _factorized, 'rope': _rope,
                               'relpos': _relpos, 'cpe': _cpe}
SLOTS = ('abs_pos', 'rope', 'rel_pos', 'pos_cpe')
# The schemes' tensors a change of the nominal grid resizes (``geometry.fit_tensor``): the learned table, the
# relative-position tables.
RESIZED_KEYS = ('pos_embed', 'rel_pos.tables')
# Kept out of weight decay, as timm's models keep them.
_NO_WEIGHT_DECAY = {'pos_embed', 'rope.freqs', 'rel_pos.tables'}
# timm's ``group_matcher``: the schemes' tensors grouped with the stem (the per-layer relative-position tables are
# one tensor), and CPVT's with the first block, after which it acts.
STEM_PATTERN = r'pos_embed|rope\.|rel_pos\.'
AFTER_FIRST_BLOCK = r'^pos_cpe'


def build_positions(cfg: SimpleViTConfig, grid: Tuple[int, int], dd: Dict[str, Any]
                    ) -> Dict[str, Optional[nn.Module]]:
    """Every slot of a model of ``cfg`` (None where no scheme fills it), and the learned table ``pos_embed``."""
    built: Dict[str, Any] = {slot: None for slot in SLOTS}
    for part in cfg.positions:
        built[part.slot] = SCHEMES[part.scheme](cfg, part, grid, dd)
    learned = any(scheme is not None and scheme.learned_table for scheme in built.values())
    built['pos_embed'] = nn.Parameter(torch.zeros(1, grid[0] * grid[1] + cfg.num_prefix_slots, cfg.embed_dim, **dd)) \
        if learned else None
    return built


def block_rotation(positions: Dict[str, Optional[nn.Module]]) -> Optional[bool]:
    """The pair layout the blocks rotate (``rotate_half``) under the built rotary scheme; None without one."""
    rotary = positions['rope']
    return None if rotary is None else rotary.rotate_half


def block_options(positions: Dict[str, Optional[nn.Module]]) -> Dict[str, Any]:
    """What the built schemes give every block's builder (``SchemeModule.block_options``)."""
    options: Dict[str, Any] = {}
    for slot in SLOTS:
        scheme = positions[slot]
        if scheme is not None:
            options.update(scheme.block_options())
    return options


class PositionsMixin:
    """The model's one way to its position slots (``SimpleVisionTransformer`` provides them)."""

    def _add_positions(self, tokens: torch.Tensor, coords: torch.Tensor, counts: List[int],
                       grids: List[Tuple[int, int]], indexed: bool
                       ) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """The embedding step's absolute positions: the patch tokens with them added, and each image's prefix
        slots (None without a cls slot)."""
        if self.abs_pos is not None:
            nominal = self.patch_embed.grid_size
            return self.abs_pos.add_to(tokens, coords, counts, grids, indexed, self.pos_embed, nominal[0], nominal[1])
        slots: List[Optional[torch.Tensor]] = [None for _ in grids]
        return tokens, slots

    def _token_inputs(self, coords: torch.Tensor, counts: List[int], grids: List[Tuple[int, int]]
                      ) -> Dict[str, torch.Tensor]:
        """The embedding step's per-token attention inputs of the sequences (image after image), by slot name:
        rotations (L, 1, H, sequence, 2R), the identity on prefix tokens."""
        inputs: Dict[str, torch.Tensor] = {}
        if self.rope is not None:
            inputs['rope'] = self.rope.rotations(coords, _token_grids(coords, counts, grids), counts,
                                                 self.num_prefix_tokens)
        return inputs

    def _layer_inputs(self, index: int, context: BlockContext) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """Block ``index``'s attention inputs: (its additive mask, its rotations), each None where none applies."""
        mask = context.attn_mask
        rotations: Optional[torch.Tensor] = None
        if self.rope is not None:
            rotations = self.rope.layer(index, context.tensors)
        if self.rel_pos is not None:
            mask = self.rel_pos.join_mask(index, context.grid, mask, context.tensors, context.sizes)
        return mask, rotations

    def _after_block(self, index: int, x: torch.Tensor, context: BlockContext) -> torch.Tensor:
        """The tokens after block ``index`` and the schemes that act there."""
        if self.pos_cpe is not None:
            x = self.pos_cpe.after_block(index, x, context.grid, context.tensors, context.sizes)
        return x

    @torch.jit.ignore
    def _check_positions_cost(self, patches, key: Optional[str]) -> None:
        """Refuse, before any of it is made, what the schemes would need for ``patches`` beyond ``self.limits`` or
        the memory there is (relative positions: the bias over the longest sequence, the tables at its grids)."""
        longest = max(patches.counts)
        if is_capturing() or isinstance(longest, torch.fx.Proxy):  # a graph made for any size: nothing to decide
            return
        i = patches.counts.index(longest)
        grids = set(patches.grids)
        what = (f'an image of {longest} patch tokens on a {patches.grids[i][0]}x{patches.grids[i][1]} grid'
                + (f' (the longest of {len(patches.counts)} images, on {len(grids)} grids)'
                   if len(patches.counts) > 1 else ''))
        self._check_cost(longest + self.num_prefix_tokens, grids, patches.tokens.element_size(), what,
                         patches.tokens.device, key)

    @torch.jit.ignore
    def _check_grid_cost(self, grid: Tuple[int, int]) -> None:
        """``set_input_size``'s check, before anything changes: the schemes' tensors for a new nominal ``grid``."""
        weight = self.patch_embed.proj.weight
        self._check_cost(grid[0] * grid[1] + self.num_prefix_tokens, [grid], weight.element_size(),
                         f'the nominal {grid[0]}x{grid[1]} grid', weight.device, None)

    @torch.jit.ignore
    def _check_cost(self, longest: int, grids: Iterable[Tuple[int, int]], itemsize: int, what: str,
                    device: torch.device, key: Optional[str]) -> None:
        """Each scheme's ``check_cost`` for sequences of up to ``longest`` tokens on ``grids``."""
        for slot in SLOTS:
            scheme = getattr(self, slot)
            if scheme is not None:
                scheme.check_cost(longest, grids, itemsize, self.limits, what, device, key)

    @torch.jit.ignore
    def _pair_bytes(self, itemsize: int) -> int:
        """Bytes the schemes add to each (query, key) pair of a chunk of packed rows, beside its mask."""
        schemes = (getattr(self, slot) for slot in SLOTS)
        return sum(s.pair_bytes(itemsize) for s in schemes if s is not None)

    @torch.jit.ignore
    def _rows_context(self, chunk, patches, inputs: Dict[str, torch.Tensor], dtype: torch.dtype) -> BlockContext:
        """A chunk of packed rows' ``BlockContext``: its mask, and each scheme's inputs laid out for it."""
        tensors: Dict[str, torch.Tensor] = {}
        sizes: Dict[str, List[int]] = {}
        for slot in SLOTS:
            scheme = getattr(self, slot)
            if scheme is not None:
                scheme.prepare_rows(chunk, patches, inputs, tensors, sizes)
        return BlockContext(chunk.attn_mask(dtype), None, tensors, sizes)

    @torch.jit.ignore
    def _fit_positions(self, before: Geometry, after: Geometry) -> None:
        """``set_input_size``'s part: each resized tensor fitted to the new grid by its rule, the slots told."""
        if after.grid != before.grid:
            for key in RESIZED_KEYS:
                owner, _, name = key.rpartition('.')
                module = getattr(self, owner) if owner else self
                old = None if module is None else getattr(module, name, None)  # a scheme may own no such tensor
                if old is not None:
                    with torch.no_grad():
                        fitted = fit_tensor(key, old.detach(), before, after)
                    setattr(module, name, nn.Parameter(fitted, requires_grad=old.requires_grad))
        for slot in SLOTS:
            scheme = getattr(self, slot)
            if scheme is not None:
                scheme.set_grid_size(after.grid)

    @torch.jit.ignore
    def _prune_positions(self, depth: int) -> None:
        """``prune_intermediate_layers``' part: per-layer tensors kept for the first ``depth`` blocks only."""
        for slot in SLOTS:
            scheme = getattr(self, slot)
            if scheme is not None:
                scheme.keep_layers(depth)

    def _init_positions(self) -> None:
        """The learned table's init, as timm's (std 0.02); the other schemes init themselves."""
        if self.pos_embed is not None:
            trunc_normal_(self.pos_embed, std=.02)

    @torch.jit.ignore
    def _positions_no_weight_decay(self) -> Set[str]:
        schemes = ((slot, getattr(self, slot)) for slot in SLOTS)
        return set(_NO_WEIGHT_DECAY) | {f'{slot}.{name}' for slot, scheme in schemes if scheme is not None
                                        for name in scheme.undecayed}


def _token_grids(coords: torch.Tensor, counts: List[int], grids: List[Tuple[int, int]]) -> torch.Tensor:
    """(T, 2): the grid (rows, cols) of each patch token's image."""
    if len(grids) == 1:
        ones = torch.ones_like(coords[:, :1])
        return torch.cat([ones * grids[0][0], ones * grids[0][1]], dim=1)
    sizes = torch.tensor(grids, device=coords.device)
    return sizes.repeat_interleave(torch.tensor(counts, device=coords.device), dim=0)
