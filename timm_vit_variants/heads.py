"""The model's head: the final norms, the pooling kind as a module, fc-norm, pre-logits and the classifier(s).

Each pooling kind (``global_pool``) is one ``PoolModule`` class, registered by its kind name in ``POOL_MODULES``; it
owns its pooling (``pool_tokens``), whether a reset may make it (``weighted``) and its keys; its config part
(``parts.PoolPart`` of the same kind) says the rest (``owns_final_norm``: the tokens get no final norm, and a reset
cannot leave the pool). A
pool with weights sits in timm's slot ``attn_pool`` (keys ``attn_pool.*``): big_vision's MAP head (``MapPool``, timm's
``AttentionPoolLatent``) and CoCa's attentional pooler (``CocaPool``); one without, in ``pooler`` (no keys): the mean
of the patch tokens, the [CLS] token (DeiT's pair of tokens, whose two classifiers ``DistilledTokenPool`` declares),
or none. A family adds its own kind by subclassing ``PoolModule`` with ``kind=...`` in its own module.
``HeadMixin`` is the model's side: it builds the head (``norm``, ``cls_norm``, ``fc_norm``, ``attn_pool``,
``pre_logits.fc``, ``head``, ``head_dist``, the state-dict names of timm's ViT) and runs, resets and reports it.
"""
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

import torch
import torch.nn as nn
from timm.layers import AttentionPoolLatent, trunc_normal_

from ._timm_compat import get_device_dtype, update_model_args
from .attention_pool import QueryAttentionPool
from .config import SimpleViTConfig
from .errors import ViTVariantsError
from .naflex import is_naflex

__all__ = ['POOL_MODULES', 'PoolModule', 'AvgPool', 'TokenPool', 'DistilledTokenPool', 'NoPool', 'MapPool', 'CocaPool',
           'HeadMixin']

# Every pooling kind's module class, by its ``global_pool`` name (filled by ``PoolModule`` subclasses).
POOL_MODULES: Dict[str, Type['PoolModule']] = {}


def _key_valid(x: torch.Tensor, num_prefix_tokens: int, patch_valid: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """[B, T] keys an attention pool may attend to: every prefix token, then the valid patches (None: all)."""
    if patch_valid is None:
        return None
    return torch.cat([patch_valid.new_ones(x.shape[0], num_prefix_tokens), patch_valid], dim=1)


class PoolModule(nn.Module):
    """Abstract base of a pooling kind: ``pool_tokens`` maps the final tokens [B, T, D] to what the head reads.

    Class attributes a kind sets: ``kind`` (its ``global_pool`` name, given as ``class X(PoolModule, kind=...)``),
    ``weighted`` (it holds weights, in ``attn_pool``: made with the model only, never by a reset) and ``two_heads``
    (DeiT: a classifier per token, ``head`` and ``head_dist``).
    """
    kind = ''
    weighted = False
    two_heads = False
    dist_head = True  # beside a distillation token: its own classifier head_dist (DeiT's), unless the pool says not

    def __init_subclass__(cls, kind: Optional[str] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            if kind in POOL_MODULES:
                raise ValueError(f'pooling kind {kind!r} is registered twice ({POOL_MODULES[kind].__name__}, '
                                 f'{cls.__name__})')
            cls.kind = kind
            POOL_MODULES[kind] = cls

    @classmethod
    def create(cls, cfg: SimpleViTConfig, norm_layer: Callable[..., nn.Module], act_layer: Any,
               dd: Dict[str, Any]) -> 'PoolModule':
        """This kind's module for a model of ``cfg`` (a weightless kind needs only the prefix-token count)."""
        return cls().with_prefix(cfg.num_prefix_tokens)

    def with_prefix(self, num_prefix_tokens: int) -> 'PoolModule':
        """This pool told how many prefix tokens come before the patch tokens; returns self."""
        self.num_prefix_tokens = num_prefix_tokens
        return self

    def init_pool(self) -> None:
        """The model's ``init_weights`` step for this pool's own tensors beyond timm's initialisers (none here)."""

    def map_grid(self, x: torch.Tensor, grid: List[int]) -> torch.Tensor:
        """A step of this pool over the final tokens ``x`` [B, prefix + N, D] of an NCHW batch on ``grid`` (rows,
        cols), in ``forward_features`` where the grid is known (SAM's conv neck); the tokens as they are here."""
        return x

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The pooled features of the final tokens ``x``; ``patch_valid`` [B, N] leaves padding out."""
        raise NotImplementedError


class AvgPool(PoolModule, kind='avg'):
    """big_vision's 'gap': the mean of the patch tokens (a masked mean over the valid ones)."""

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        patches = x[:, self.num_prefix_tokens:]
        if patch_valid is None:
            return patches.mean(dim=1)
        weight = patch_valid.to(patches.dtype).unsqueeze(-1)
        return (patches * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1)


class TokenPool(PoolModule, kind='token'):
    """The [CLS] token; with DeiT's distillation token, ``DistilledTokenPool``."""

    @classmethod
    def create(cls, cfg: SimpleViTConfig, norm_layer: Callable[..., nn.Module], act_layer: Any,
               dd: Dict[str, Any]) -> PoolModule:
        return (DistilledTokenPool if cfg.tokens.dist else TokenPool)().with_prefix(cfg.num_prefix_tokens)

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return x[:, 0]


class DistilledTokenPool(TokenPool):
    """DeiT's pooled pair, the mean of [CLS] and the distillation token; its logits are the mean of the two
    classifiers ``head`` and ``head_dist`` (``HeadMixin._distilled_head``), as timm's ``VisionTransformerDistilled``."""
    two_heads = True

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return (x[:, 0] + x[:, 1]) / 2


class NoPool(PoolModule, kind=''):
    """No pooling: the head reads every token."""

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return x


class MapPool(PoolModule, AttentionPoolLatent, kind='map'):
    """big_vision's MAPHead, exactly timm's ``AttentionPoolLatent``: a learned probe queries every token (or the patch
    tokens alone: ``include_prefix``), no residual around that attention, then x + MLP(LN(x)); padding is left out
    of its keys."""
    weighted = True
    include_prefix: bool = True

    @classmethod
    def create(cls, cfg: SimpleViTConfig, norm_layer: Callable[..., nn.Module], act_layer: Any,
               dd: Dict[str, Any]) -> PoolModule:
        # timm sizes its MLP as int(D * ratio): half a unit more lands on the exact width (4304 for So400m)
        part = cfg.head.pool  # parts.MapPool: its own heads and MLP width, else the blocks'
        pool = cls(cfg.embed_dim, num_heads=part.heads or cfg.num_heads,
                   mlp_ratio=((part.mlp_dim or cfg.block.mlp_dim) + 0.5) / cfg.embed_dim,
                   qkv_bias=cfg.block.qkv_bias, norm_layer=norm_layer, act_layer=act_layer, **dd)
        pool.include_prefix = part.include_prefix
        return pool.with_prefix(cfg.num_prefix_tokens)

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not self.include_prefix:  # the patch tokens alone are its keys (timm's pool_include_prefix=False)
            x = x[:, self.num_prefix_tokens:]
            keys = patch_valid
        else:
            keys = _key_valid(x, self.num_prefix_tokens, patch_valid)
        return self(x) if keys is None else self(x, attn_mask=keys[:, None, None, :])


class CocaPool(PoolModule, QueryAttentionPool, kind='coca'):
    """CoCa's attentional pooler (``attention_pool.py``) with its final norm; its first output is pooled."""
    weighted = True

    @classmethod
    def create(cls, cfg: SimpleViTConfig, norm_layer: Callable[..., nn.Module], act_layer: Any,
               dd: Dict[str, Any]) -> PoolModule:
        part = cfg.head.pool  # parts.CocaPool, its width resolved
        pool = cls(part.dim, cfg.embed_dim, part.heads, part.queries, norm_layer, **dd)
        return pool.with_prefix(cfg.num_prefix_tokens)

    def init_pool(self) -> None:
        trunc_normal_(self.query, std=self.query.shape[1] ** -0.5)

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self(x, _key_valid(x, self.num_prefix_tokens, patch_valid))[:, 0]


class HeadMixin:
    """The head of ``SimpleVisionTransformer``: built by ``_build_head``, run by ``forward_head``."""

    def _build_head(self, cfg: SimpleViTConfig, norm_layer: Callable[..., nn.Module], act_layer: Any,
                    dd: Dict[str, Any]) -> None:
        """The final norms, the pool of ``global_pool``, fc-norm, pre-logits and classifier(s), in timm's order."""
        head = cfg.head
        dim = cfg.embed_dim
        # CLIPA (fc_norm) normalises the pooled vector only; a pool holding its own norm (CoCa's) its outputs.
        token_norm = head.final_norm and not head.fc_norm and not head.pool.owns_final_norm
        self.norm = norm_layer(dim, **dd) if token_norm else nn.Identity()
        # DINOv3's untied final norms: cls_norm over [CLS, registers], norm over the patch tokens
        self.cls_norm = norm_layer(dim, **dd) if head.untie_norms else None
        self.fc_norm = norm_layer(dim, **dd) if head.fc_norm else nn.Identity()
        pool = POOL_MODULES[head.pool.kind].create(cfg, norm_layer, act_layer, dd)
        self._set_pool(pool)
        if head.rep_size:
            self.pre_logits = nn.Sequential(OrderedDict([('fc', nn.Linear(cfg.pool_width, head.rep_size, **dd)),
                                                         ('act', nn.Tanh())]))
        else:
            self.pre_logits = nn.Identity()
        self.head_drop = nn.Dropout(cfg.training.drop_rate)
        self.head = nn.Linear(self.head_hidden_size, cfg.num_classes, bias=head.bias, **dd) \
            if cfg.num_classes > 0 else nn.Identity()
        # DeiT's classifier of the distillation token
        self.head_dist = self._dist_head(cfg.num_classes, dd) if cfg.tokens.dist and pool.dist_head else None

    def _set_pool(self, pool: PoolModule) -> None:
        """``pool`` into its slot: ``attn_pool`` (timm's, with its keys) when it holds weights, else ``pooler``."""
        self.attn_pool = pool if pool.weighted else None
        self.pooler = None if pool.weighted else pool
        self.two_heads = pool.two_heads

    @torch.jit.ignore
    def set_distilled_training(self, enable: bool = True) -> None:
        """DeiT's distillation training: in training mode, ``forward_head`` returns (head, head_dist) logits."""
        self.distilled_training = enable

    @torch.jit.ignore
    def get_classifier(self) -> Union[nn.Module, Tuple[nn.Module, nn.Module]]:
        """The head; with a distillation token (head, head_dist), as timm's ``VisionTransformerDistilled``."""
        return self.head if self.head_dist is None else (self.head, self.head_dist)

    def _dist_head(self, num_classes: int, dd: Dict[str, Any]) -> nn.Module:
        return nn.Linear(self.head_hidden_size, num_classes, **dd) if num_classes > 0 else nn.Identity()

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """Replace the head with a zero-initialised one (``num_classes=0`` removes it)."""
        if global_pool is not None:
            self.config.replace(global_pool=global_pool)  # the config's own refusals (an unknown pool, no [CLS])
            self._reset_pool(global_pool)
        self.num_classes = num_classes
        # a new classifier has a bias, as timm's, whatever the projection it replaces had
        self.config = self.config.replace(num_classes=num_classes, global_pool=self.global_pool, head_bias=True)
        if num_classes > 0:
            self.head = nn.Linear(self.head_hidden_size, num_classes, **get_device_dtype(self))
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
        else:
            self.head = nn.Identity()
        self.head.train(self.training)
        if self.head_dist is not None:
            self.head_dist = self._dist_head(num_classes, get_device_dtype(self))
            if num_classes > 0:
                nn.init.zeros_(self.head_dist.weight)
                nn.init.zeros_(self.head_dist.bias)
            self.head_dist.train(self.training)

    def _reset_pool(self, global_pool: str) -> None:
        """Pool by ``global_pool`` from now on: a weightless kind is made; one with weights cannot be, and a pool
        holding the final norm cannot be left; leaving an attention pool removes it, as timm's."""
        new, old = POOL_MODULES[global_pool], POOL_MODULES[self.global_pool]
        width = self.config.replace(global_pool=global_pool).pool_width
        if width != self.config.pool_width and self.config.head.rep_size:
            raise ViTVariantsError(f'global_pool={global_pool!r} pools {width} wide, where the pre-logits layer reads '
                                   f'{self.config.pool_width}: create the model with global_pool={global_pool!r}')
        if new is not old:
            if new.weighted:
                raise ViTVariantsError(f"global_pool={global_pool!r} needs the model's attention pool, which a reset "
                                       f"cannot create (create the model with global_pool={global_pool!r})")
            if self.config.head.pool.owns_final_norm:
                raise ViTVariantsError(f'a {self.global_pool!r} pooler holds the final norm and sets the pooled width, '
                                       'so it cannot be reset to another pooling')
            self._set_pool(new.create(self.config.replace(global_pool=global_pool), None, None,
                                      get_device_dtype(self)))
        self.global_pool = global_pool
        self.head_hidden_size = self.config.head.rep_size or width  # the classifier made next reads this width
        update_model_args(self, global_pool=global_pool)

    def _init_pool(self) -> None:
        if self.attn_pool is not None:
            self.attn_pool.init_pool()

    def pool(self, x: torch.Tensor, pool_type: Optional[str] = None,
             patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Pool the final tokens; ``patch_valid`` [B, N] leaves padding out (a masked mean, a key-only MAP mask)."""
        if not torch.jit.is_scripting():
            if pool_type is not None and pool_type != self.global_pool:
                return self._pool_as(pool_type, x, patch_valid)
        if self.attn_pool is not None:
            return self.attn_pool.pool_tokens(x, patch_valid)
        if self.pooler is not None:
            return self.pooler.pool_tokens(x, patch_valid)
        return x

    @torch.jit.ignore
    def _pool_as(self, pool_type: str, x: torch.Tensor, patch_valid: Optional[torch.Tensor]) -> torch.Tensor:
        """timm's ``pool(x, pool_type)`` by another weightless kind than the model's own."""
        kind = POOL_MODULES.get(pool_type)
        if kind is None or kind.weighted:
            raise ViTVariantsError(f'pool_type={pool_type!r}: expected the model\'s own {self.global_pool!r} or one '
                                   f'of {sorted(k for k, c in POOL_MODULES.items() if not c.weighted)}')
        return kind.create(self.config, None, None, {}).pool_tokens(x, patch_valid)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False,
                     patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Pool, pre-logits, head; ``x`` may be ``forward_features``' NaFlex dict (its ``patch_valid`` is used)."""
        if not torch.jit.is_scripting():
            if is_naflex(x):
                x, patch_valid = x['patches'], x['patch_valid']
        if self.head_dist is not None and self.two_heads:
            return self._distilled_head(x, pre_logits)
        x = self.fc_norm(self.pool(x, patch_valid=patch_valid))
        x = self.pre_logits(x)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def _distilled_head(self, x: torch.Tensor, pre_logits: bool) -> torch.Tensor:
        """DeiT's two heads: the mean of head([CLS]) and head_dist(dist) (of the two tokens for ``pre_logits``); in
        distilled training (``set_distilled_training``) both logits, as timm's ``VisionTransformerDistilled``."""
        cls, dist = self.head_drop(x[:, 0]), self.head_drop(x[:, 1])
        if pre_logits:
            return (cls + dist) / 2
        cls, dist = self.head(cls), self.head_dist(dist)
        if not torch.jit.is_scripting():
            if self.distilled_training and self.training:
                return cls, dist
        return (cls + dist) / 2
