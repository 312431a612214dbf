"""SimpleVisionTransformer: the plain-ViT recipe of Beyer, Zhai & Kolesnikov (2022) on timm's layers.

One class covers both input pipelines:
  * big_vision's plain ViT: fixed 2D sin-cos position embedding, no class token,
    final LayerNorm on every token then global average pooling, zero-init head;
  * the original ViT / vit_jax / timm pipeline: Conv2d patchifier, [CLS] token and a
    learned position table (with or without a cls slot) resampled when the grid changes.
The input side is configurable (``patch_embed``, ``patch_norm``, ``pos_embed`` incl. CPVT's 'cpe',
``grid_mode``; see ``SimpleViTConfig``). The model is built from parts by class: norms, MLPs and blocks from
``layers.py``'s tables (timm's ``norm_layer``, ``mlp_layer``, ``block_fn``), the position schemes from
``positions.py``, the pooling kind and head from ``heads.py``; it names no kind itself. State-dict names follow
timm's VisionTransformer, so timm ViT checkpoints map one to one.
"""
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
import torch.nn as nn
from timm.layers import get_act_layer, trunc_normal_
from timm.models import named_apply
from timm.models.vision_transformer import init_weights_vit_jax
from torch.utils.checkpoint import checkpoint

from ._timm_compat import declare_first_conv, feature_take_indices, update_model_input_size
from .checkpoints import load_into_model
from .config import SimpleViTConfig, TensorSpec
from .errors import ViTVariantsError
from .geometry import Geometry, check_fit
from .heads import HeadMixin
from .layers import ATTN_LAYERS, BLOCKS, MLP_LAYERS, build_blocks, norm_layer as layer_norm
from .limits import DEFAULT_LIMITS, Limits
from .block_context import BlockContext
from .embedding import EmbeddingMixin
from .parts import Learned
from .naflex import NaFlexMixin, Patches, drop_tokens, is_naflex
from .patch_embed import AdaptivePatchEmbed
from .positions import AFTER_FIRST_BLOCK, STEM_PATTERN, PositionsMixin, block_options, block_rotation, build_positions

__all__ = ['SimpleVisionTransformer']


def _init_weights(module: nn.Module, name: str = '') -> None:
    """timm's jax initialisers; a head without a bias (CLIP's projection) is zeroed here, as timm's assumes one."""
    if name.startswith('head') and isinstance(module, nn.Linear) and module.bias is None:
        nn.init.zeros_(module.weight)
    else:
        init_weights_vit_jax(module, name)


class SimpleVisionTransformer(EmbeddingMixin, NaFlexMixin, PositionsMixin, HeadMixin, nn.Module):
    """Plain ViT with a resolution-adaptive patch embedding and timm's complete model interface.

    Built from a ``SimpleViTConfig``, or from its fields as keyword arguments (which is how
    ``timm.create_model`` calls it); ``model.config`` always describes the model as it is now.
    """

    limits = DEFAULT_LIMITS  # what one input may cost (``Limits.rel_pos_bytes``); an instance may lift it

    def __init__(
            self,
            config: Optional[SimpleViTConfig] = None,
            *,
            device=None,
            dtype=None,
            limits: Optional[Limits] = None,
            **kwargs: Any,
    ) -> None:
        """
        Args:
            config: The settings; when None, built by ``SimpleViTConfig.of(**kwargs)``: its parts (objects or JSON
                dicts) and release 0.2.0's flat names, which timm's ``create_model`` passes (an unknown name raises
                TypeError, as any Python call's); else ``kwargs`` change it (``config.replace``).
            device, dtype: Where and in what dtype to create the parameters (e.g. 'meta').
            limits: What one input may cost (``Limits.rel_pos_bytes``); ``DEFAULT_LIMITS`` when None.
        """
        super().__init__()
        if limits is not None:
            self.limits = limits
        if config is None:
            config = SimpleViTConfig.of(**kwargs)
        elif kwargs:
            config = config.replace(**kwargs)
        self.config = cfg = config
        dd = {'device': device, 'dtype': dtype}
        block = cfg.block
        norm_layer = layer_norm(block.norm, block.norm_eps)
        act_layer = get_act_layer(block.act)
        embed_dim = cfg.embed_dim

        self.num_classes = cfg.num_classes
        self.global_pool = cfg.head.pool.kind
        self.in_chans = cfg.in_chans
        self.embed_dim = self.num_features = embed_dim
        self.head_hidden_size = cfg.head.rep_size or cfg.pool_width
        self.num_prefix_tokens = cfg.num_prefix_tokens
        self.num_reg_tokens = cfg.tokens.registers
        self.has_class_token = cfg.tokens.cls
        self.distilled_training = False  # DeiT: forward_head returns both heads' logits in training when set
        self.pos_embed_type = cfg.flat_pos_embed
        self.pos_embed_cls_slot = cfg.num_prefix_slots > 0
        self.pos_embed_slots = cfg.num_prefix_slots  # the table's prefix rows ([CLS], distillation, registers)
        self.grad_checkpointing = False

        self.patch_embed = AdaptivePatchEmbed(
            img_size=cfg.img_size, patch_size=cfg.patch_size, in_chans=cfg.in_chans, embed_dim=embed_dim,
            grid_mode=cfg.grid_mode, kind=cfg.patch.kind, norm=cfg.patch.norm, norm_eps=block.norm_eps,
            act_layer=act_layer, norm_layer=norm_layer, bias=cfg.patch.bias, **dd)
        declare_first_conv(self, Geometry.of(cfg).kernel_key.rsplit('.', 1)[0])
        grid = self.patch_embed.grid_size

        tokens = cfg.tokens
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim, **dd)) if tokens.cls else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim, **dd)) if tokens.dist else None
        self.reg_token = nn.Parameter(torch.zeros(1, tokens.registers, embed_dim, **dd)) if tokens.registers else None
        # The position schemes, each in its slot (positions.py), and a learned table's pos_embed.
        positions = build_positions(cfg, grid, dd)
        for name, value in positions.items():
            setattr(self, name, value)
        self.pos_drop = nn.Dropout(cfg.training.pos_drop_rate)
        self.norm_pre = norm_layer(embed_dim, **dd) if tokens.pre_norm else nn.Identity()

        self.blocks = build_blocks(
            BLOCKS[block.kind], cfg.depth, cfg.training.drop_path_rate, dim=embed_dim, num_heads=cfg.num_heads,
            mlp=MLP_LAYERS[block.mlp], mlp_width=block.mlp_dim, mlp_bias=block.mlp_bias, mlp_norm=block.mlp_norm,
            attn_norm=block.attn_norm, attn_layer=ATTN_LAYERS[block.attn], qkv_bias=block.qkv_bias,
            qkv_fused=block.qkv_fused, qk_norm=block.qk_norm, proj_bias=block.proj_bias,
            init_values=block.init_values, act_layer=act_layer, norm_layer=norm_layer,
            proj_drop=cfg.training.proj_drop_rate, attn_drop=cfg.training.attn_drop_rate,
            rotate_half=block_rotation(positions), **block_options(positions), **dd)
        reduction = self.patch_embed.patch_size[0]
        self.feature_info = [dict(module=f'blocks.{i}', num_chs=embed_dim, reduction=reduction)
                             for i in range(cfg.depth)]
        self._build_head(cfg, norm_layer, act_layer, dd)

        if cfg.training.weight_init != 'skip':
            self.init_weights()

    @classmethod
    def state_layout(cls, config: SimpleViTConfig) -> List[TensorSpec]:
        """(key, shape, dtype) of every tensor in the state dict of a model built from ``config``.

        Read off a meta-device build, so it costs no memory and cannot drift from the network;
        the readers plan against it and the Hub-folder writer lays out its files from it.
        """
        model = cls(config.replace(weight_init='skip'), device='meta')
        return [(key, tuple(t.shape), t.dtype) for key, t in model.state_dict().items()]

    def init_non_persistent_buffers(self) -> None:
        """Rebuild computed buffers (the sin-cos table), e.g. after loading into a meta-device model.

        The same walk as timm's ``reinit_non_persistent_buffers``; a buffer left on the meta device
        is rebuilt on the CPU.
        """
        for module in self.modules():
            if module is not self and hasattr(module, 'init_non_persistent_buffers'):
                module.init_non_persistent_buffers()

    def init_weights(self) -> None:
        """big_vision initialisers: xavier-uniform Dense, lecun-normal patchifier, zero head."""
        self._init_positions()
        if self.cls_token is not None:
            nn.init.zeros_(self.cls_token)
        if self.reg_token is not None:
            nn.init.normal_(self.reg_token, std=1e-6)  # as timm
        if self.dist_token is not None:
            trunc_normal_(self.dist_token, std=.02)  # as DeiT and timm
        self._init_pool()
        named_apply(_init_weights, self)

    @torch.jit.ignore
    def load_pretrained(self, checkpoint_path: str, prefix: str = '') -> None:
        """Load any supported checkpoint file (big_vision/vit_jax .npz, timm, transformers) into this model.

        timm calls this for ``custom_load`` pretrained sources, e.g. the big_vision .npz URLs. A learned
        table is fitted to this model's grid with this model's own rule, so loading at another size gives
        what the model computes there itself (for FlexiViT: big_vision's run-time resize from the stored
        7x7 table, at any patch size).
        """
        learned = self.config.position(Learned) or Learned()
        load_into_model(self, checkpoint_path, prefix=prefix, resample_like=learned.resample)

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return {'cls_token', 'dist_token', 'reg_token'} | self._positions_no_weight_decay()

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(
            stem=r'^cls_token|dist_token|reg_token|patch_embed|norm_pre|' + STEM_PATTERN,
            blocks=[(r'^blocks\.(\d+)', None), (AFTER_FIRST_BLOCK, (0,)), (r'^norm\.', (99999,)),
                    (r'^cls_norm\.', (99999,)),
                    (r'^fc_norm', (99999,)), (r'^attn_pool', (99999,))],
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def set_input_size(
            self,
            img_size: Optional[Union[int, Tuple[int, int]]] = None,
            patch_size: Optional[Union[int, Tuple[int, int]]] = None,
    ) -> None:
        """Change the nominal resolution and/or patch size in place.

        The patchifier kernel is PI-resized (FlexiViT) where that is defined (``geometry.check_fit``
        says why not otherwise), and the position schemes follow the grid (``positions._fit_positions``: a
        learned table resampled once with this model's rule, relative-position tables with ``rel_pos_resample``,
        both through ``geometry.fit_tensor``; a sin-cos table regenerated).
        """
        before = Geometry.of(self.config)
        config = self.config.replace(
            img_size=self.config.img_size if img_size is None else img_size,
            patch_size=self.config.patch_size if patch_size is None else patch_size)
        after = Geometry.of(config)
        check_fit(before, after)
        self._check_grid_cost(after.grid)
        self.config = config
        self.patch_embed.set_input_size(img_size=self.config.img_size, patch_size=self.config.patch_size)
        self._fit_positions(before, after)
        for info in self.feature_info:
            info['reduction'] = self.patch_embed.patch_size[0]
        update_model_input_size(
            self, self.patch_embed.img_size,
            patch_size=self.patch_embed.patch_size if patch_size is not None else None)

    def _forward_tokens(self, x: torch.Tensor, take: List[int], stop: int
                        ) -> Tuple[torch.Tensor, List[torch.Tensor], Optional[Patches], Optional[List[int]]]:
        """Any input form through the embedding step and blocks 0..``stop``: (final tokens, the outputs of the
        blocks in ``take``, the NaFlex patches (None for NCHW), the NCHW grid (None for NaFlex)).

        NCHW tokens come as [B, prefix + N, D]; NaFlex ones as (T, D) sequences, image after image, for
        ``_naflex_layout`` to lay out after the final norm (so padding stays zero).
        """
        if not torch.jit.is_scripting():
            if is_naflex(x):
                patches = self._naflex_patches(x)
                rate = self.config.training.patch_drop_rate
                if self.training and rate > 0:
                    patches = drop_tokens(patches, rate)
                self._check_positions_cost(patches, 'patch_coord' if isinstance(x, dict) else None)
                sequences, inputs = self._embed(patches)
                final, taken = self._run_packed(sequences[0], patches, inputs, take, stop)
                return final, taken, patches, None
        patches = self._patches(x)
        if not torch.jit.is_scripting():
            self._check_positions_cost(patches, None)
        x, inputs = self._embed(patches)
        grid = [patches.grids[0][0], patches.grids[0][1]]
        sizes: Dict[str, List[int]] = {}
        x, taken = self._run_blocks(x, BlockContext(None, grid, inputs, sizes), take, stop)
        return x, taken, None, grid

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            return_prefix_tokens: bool = False,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
            output_dict: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]], Dict[str, Any]]:
        """Final features plus the outputs of selected blocks (timm's contract, NCHW or NLC).

        For a NaFlex dict or a list of images (whose grids differ), NLC only, in ``forward_features``'
        layout; ``output_dict=True`` also returns their ``patch_valid``.
        """
        if output_fmt not in ('NCHW', 'NLC'):
            raise ViTVariantsError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}", key='output_fmt')
        reshape = output_fmt == 'NCHW'
        if not torch.jit.is_scripting():
            if is_naflex(x) and reshape:
                raise ViTVariantsError("images of different grids have no common NCHW shape: use output_fmt='NLC'")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        final, intermediates, packed, grid = self._forward_tokens(
            x, take_indices, max_index if stop_early else len(self.blocks) - 1)
        if norm:
            intermediates = [self._pool_grid(self._final_norm(y, packed), grid) for y in intermediates]
        features = self._pool_grid(self._final_norm(final, packed), grid)
        valid: Optional[torch.Tensor] = None
        if not torch.jit.is_scripting():
            if packed is not None:
                intermediates = [self._naflex_layout(y, packed)[0] for y in intermediates]
                features, valid = self._naflex_layout(features, packed)

        prefix_tokens: Optional[List[torch.Tensor]] = None
        if self.num_prefix_tokens:
            prefix_tokens = [y[:, 0:self.num_prefix_tokens] for y in intermediates]
            intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        if reshape and grid is not None:
            intermediates = [y.reshape(y.shape[0], grid[0], grid[1], -1).permute(0, 3, 1, 2).contiguous()
                             for y in intermediates]

        if output_dict:
            result: Dict[str, Any] = {'image_intermediates': intermediates}
            if valid is not None:
                result['patch_valid'] = valid
            if prefix_tokens is not None and return_prefix_tokens:
                result['image_intermediates_prefix'] = prefix_tokens
            if not intermediates_only:
                result['image_features'] = features
            return result
        if not torch.jit.is_scripting() and return_prefix_tokens and prefix_tokens is not None:
            intermediates = list(zip(intermediates, prefix_tokens))
        if intermediates_only:
            return intermediates
        if not torch.jit.is_scripting():
            if valid is not None:
                return {'patches': features, 'patch_valid': valid}, intermediates
        return features, intermediates

    def prune_intermediate_layers(
            self,
            indices: Union[int, List[int]] = 1,
            prune_norm: bool = False,
            prune_head: bool = True,
    ) -> List[int]:
        """Drop blocks (and optionally norm/head) not needed for the given intermediates."""
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        self.feature_info = self.feature_info[:max_index + 1]
        self.config = self.config.replace(depth=len(self.blocks))
        self._prune_positions(len(self.blocks))
        if prune_norm:
            self.norm = nn.Identity()
            self.cls_norm = None
        if prune_head:
            self.pre_logits = nn.Identity()
            self.head_hidden_size = self.embed_dim
            self.config = self.config.replace(rep_size=None)
            # a pool holding the final norm (CoCa's) stays
            self.reset_classifier(0, None if self.config.head.pool.owns_final_norm else '')
        return take_indices

    def get_intermediate_layers(
            self,
            x: torch.Tensor,
            n: Union[int, List[int]] = 1,
            reshape: bool = False,
            return_prefix_tokens: bool = False,
            norm: bool = False,
    ) -> List[torch.Tensor]:
        """DINO-style alias of ``forward_intermediates(..., intermediates_only=True)``."""
        return self.forward_intermediates(
            x, n, return_prefix_tokens=return_prefix_tokens, norm=norm,
            output_fmt='NCHW' if reshape else 'NLC', intermediates_only=True)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Final-norm tokens [B, T, D] (after a pool's step over the grid: SAM's neck, [B, N, C]); for a NaFlex dict
        or a list of images, ``{'patches', 'patch_valid'}``."""
        final, _, packed, grid = self._forward_tokens(x, [], len(self.blocks) - 1)
        tokens = self._pool_grid(self._final_norm(final, packed), grid)
        if not torch.jit.is_scripting():
            if packed is not None:
                tokens, valid = self._naflex_layout(tokens, packed)
                return {'patches': tokens, 'patch_valid': valid}
        return tokens

    def _final_norm(self, x: torch.Tensor, packed: Optional[Patches]) -> torch.Tensor:
        """The final norm; untied (DINOv3), ``cls_norm`` on each image's prefix tokens and ``norm`` on its patches, in
        [B, prefix + N, D] rows or in (T', D) sequences, image after image."""
        cls_norm = self.cls_norm
        if cls_norm is None:
            return self.norm(x)
        prefix = self.num_prefix_tokens
        if not torch.jit.is_scripting():
            if packed is not None:
                pieces = x.split([n + prefix for n in packed.counts])
                return torch.cat([torch.cat([cls_norm(p[:prefix]), self.norm(p[prefix:])]) for p in pieces])
        return torch.cat([cls_norm(x[:, :prefix]), self.norm(x[:, prefix:])], dim=1)

    def _pool_grid(self, x: torch.Tensor, grid: Optional[List[int]]) -> torch.Tensor:
        """The pool's step over the token grid of an NCHW batch, after the final norm (``PoolModule.map_grid``:
        SAM's conv neck); packed rows have no one grid and pass as they are."""
        pool = self.attn_pool
        if pool is not None and grid is not None:
            return pool.map_grid(x, grid)
        return x

    def _run_blocks(self, x: torch.Tensor, context: BlockContext, take: List[int], stop: int
                    ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Blocks 0..``stop``, each with its attention inputs and the position schemes acting after it, and the
        outputs of the blocks in ``take``."""
        taken: List[torch.Tensor] = []
        for i, blk in enumerate(self.blocks):
            if i <= stop:  # not ``break``: TorchScript unrolls loops over modules
                mask, rope = self._layer_inputs(i, context)
                if hasattr(blk, 'no_rotations'):  # timm's own forward, (x, attn_mask): a block without rotations
                    if self.grad_checkpointing and not torch.jit.is_scripting():
                        x = checkpoint(blk, x, attn_mask=mask, use_reentrant=False)
                    else:
                        x = blk(x, attn_mask=mask)
                elif self.grad_checkpointing and not torch.jit.is_scripting():
                    x = checkpoint(blk, x, attn_mask=mask, rope=rope, grid=context.grid, use_reentrant=False)
                else:
                    x = blk(x, attn_mask=mask, rope=rope, grid=context.grid)
                x = self._after_block(i, x, context)
                if i in take:
                    taken.append(x)
        return x, taken

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (or the embedding, without a head; a CLIP tower's ``encode_image``, unnormalised, with its
        projection as the head) for an NCHW batch, a NaFlex dict or a list of images."""
        return self.forward_head(self.forward_features(x))

