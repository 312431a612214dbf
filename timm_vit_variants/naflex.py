"""NaFlex inputs: one batch of images, each at its own size and aspect ratio.

Two forms besides an NCHW tensor, for ``forward``, ``forward_features``, ``forward_head`` and
``forward_intermediates``:
  * timm's NaFlex dict, the contract of timm's ``NaFlexVit``, its loader, collator and mixup:
    ``{'patches': [B, N, P*P*C] (each patch flattened P-P-C), 'patch_coord': [B, N, 2] (y, x),
    'patch_valid': [B, N] bool}``, one image a row;
  * a list of CHW tensors of different sizes, patchified here (padded or cropped as ``grid_mode``
    says).
Each image's position information is computed for its own grid: a sin-cos table exactly (a row
depends on (y, x) alone), a learned table resampled to the grid with the model's rule (cached per
grid), CPVT's encoding on the image's own grid. The sequences are then packed, several images to a
row with attention kept inside each (``packing``), so almost no compute goes to padding; padding is
never attended and pooling ignores it. ``forward_features`` returns ``{'patches': [B, prefix + N, D],
'patch_valid': [B, N]}`` (the dict's own layout, or each listed image padded to the longest).

The model runs whatever it is given that fits the machine: the checks at its door refuse what has no
meaning (an empty batch, integer pixels, float or repeated coordinates, a channel count the model lacks)
and what could only run out of memory (``capacity``), each naming the input. An image whose tokens are
not finite is run in a row of its own, so its NaN or Inf reaches no other image's output.
"""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .capacity import check_fits
from .errors import ViTVariantsError
from .packing import PackedRows, pack_sequences
from .patch_embed import check_and_pad
from .posemb import grid_coords, sincos_2d_at

__all__ = ['NaFlexInput', 'NaFlexMixin', 'is_naflex']

NaFlexInput = Union[Dict[str, torch.Tensor], Sequence[torch.Tensor]]
# float32 positions tell integer coordinates apart only below 2**24.
_COORD_END = 1 << 24


@torch.jit.ignore
def is_naflex(x: Any) -> bool:
    """A NaFlex dict or a list of images (anything else is an NCHW batch)."""
    return isinstance(x, (dict, list, tuple))


@dataclass
class _Batch:
    """Every image's patch tokens, image after image, row-major within each, before the prefix is added."""
    tokens: torch.Tensor  # (T, D)
    coords: torch.Tensor  # (T, 2) long, (y, x)
    counts: List[int]  # patch tokens per image
    grids: List[Tuple[int, int]]  # each image's grid (rows, cols)
    valid: Optional[torch.Tensor] = None  # the NaFlex dict's (B, N) patch_valid, to lay results back out


class NaFlexMixin:
    """The NaFlex paths of ``SimpleVisionTransformer`` (which provides the modules used here)."""

    def get_patch_size(self) -> Tuple[int, int]:
        """The patch size, as timm's NaFlex loader asks a model for it."""
        return tuple(self.patch_embed.patch_size)

    # -- tokens from each input form --------------------------------------------------------------------------
    def _naflex_batch(self, x: NaFlexInput) -> _Batch:
        self._check_naflex_support(x)
        return self._dict_batch(x) if isinstance(x, dict) else self._list_batch(list(x))

    def _check_naflex_support(self, x: NaFlexInput) -> None:
        if self.config.grid_mode == 'pool':
            raise ViTVariantsError("grid_mode='pool' pools every image to one grid, so images at their own sizes "
                                   'have nothing to gain; give an NCHW batch')
        if isinstance(x, dict) and not self.config.embeds_patches_alone:
            raise ViTVariantsError(f'patch_embed={self.config.patch_embed!r} sees across neighbouring patches, so '
                                   'a flattened patch alone does not give its token; give a list of images instead',
                                   key='patches')

    def _dict_batch(self, x: Dict[str, torch.Tensor]) -> _Batch:
        patches, coords = x.get('patches'), x.get('patch_coord')
        (ph, pw), chans = self.patch_embed.patch_size, self.config.in_chans
        if not isinstance(patches, torch.Tensor) or patches.ndim != 3 or patches.shape[-1] != ph * pw * chans:
            raise ViTVariantsError(f'NaFlex patches must be [B, N, {ph}*{pw}*{chans}] (each flattened patch-row, '
                                   f'patch-column, channel), got {_shape(patches)}', key='patches')
        batch_size, length = patches.shape[:2]
        if batch_size == 0 or length == 0:
            raise ViTVariantsError(f'an empty NaFlex batch: patches of shape {_shape(patches)}', key='patches')
        if not patches.is_floating_point():
            raise ViTVariantsError(f'NaFlex patches must be floating point (normalised pixels), got {patches.dtype}',
                                   key='patches')
        if not isinstance(coords, torch.Tensor) or tuple(coords.shape) != (batch_size, length, 2):
            raise ViTVariantsError(f'patch_coord must be [B, N, 2] (y, x) for patches of shape {_shape(patches)}, '
                                   f'got {_shape(coords)}', key='patch_coord')
        if coords.is_floating_point() or coords.is_complex() or coords.dtype == torch.bool:
            raise ViTVariantsError(f'patch_coord must hold integer (y, x) patch indices, got {coords.dtype}',
                                   key='patch_coord')
        valid = x.get('patch_valid')
        if valid is None:
            valid = torch.ones(batch_size, length, dtype=torch.bool, device=patches.device)
        elif not isinstance(valid, torch.Tensor) or tuple(valid.shape) != (batch_size, length):
            raise ViTVariantsError(f'patch_valid must be [B, N] = {(batch_size, length)}, got {_shape(valid)}',
                                   key='patch_valid')
        valid = valid.bool()
        counts = valid.sum(1).tolist()
        if min(counts) < 1:
            raise ViTVariantsError('every image needs at least one valid patch', key='patch_valid')
        coords = coords[valid].long()
        low, high = (int(v) for v in torch.aminmax(coords))
        if low < 0 or high >= _COORD_END:
            raise ViTVariantsError(f'patch_coord must lie in [0, 2**24) (float32 positions tell integers apart only '
                                   f'below it), got values from {low} to {high}', key='patch_coord')
        image = torch.repeat_interleave(torch.arange(batch_size, device=coords.device), valid.sum(1))
        _refuse_repeats(coords, image)
        ends = coords.new_zeros(batch_size, 2).scatter_reduce_(0, image[:, None].expand(-1, 2), coords + 1, 'amax')
        grids = [(h, w) for h, w in ends.tolist()]
        tokens = self.patch_embed.embed_patches(patches[valid].to(self.patch_embed.proj.weight.dtype),
                                                channels_last=True)
        return _Batch(tokens, coords, counts, grids, valid)

    def _list_batch(self, images: List[torch.Tensor]) -> _Batch:
        if not images or not all(isinstance(im, torch.Tensor) and im.ndim == 3 for im in images):
            raise ViTVariantsError('a list input holds CHW image tensors, at least one')
        chans = self.config.in_chans
        for i, image in enumerate(images):
            if not image.is_floating_point():
                raise ViTVariantsError(f'image {i} of the list is {image.dtype}: images must be floating point '
                                       '(normalised), as in an NCHW batch')
            if image.shape[0] != chans or image.shape[1] < 1 or image.shape[2] < 1:
                raise ViTVariantsError(f'image {i} of the list has shape {tuple(image.shape)}: expected '
                                       f'({chans}, H, W) with H, W >= 1')
        if self.config.embeds_patches_alone:
            return self._unfolded_batch(images)
        groups: Dict[Tuple[int, ...], List[int]] = {}
        for i, image in enumerate(images):
            groups.setdefault(tuple(image.shape), []).append(i)
        per_image: List[Optional[torch.Tensor]] = [None] * len(images)
        for shape, members in groups.items():  # images of one size share one patch-embedding call
            grid = self.patch_embed(torch.stack([images[i] for i in members]))
            for i, tokens in zip(members, grid):
                per_image[i] = tokens
        grids = [(int(t.shape[0]), int(t.shape[1])) for t in per_image]
        coords = torch.cat([grid_coords(h, w, images[0].device) for h, w in grids])
        tokens = torch.cat([t.reshape(-1, t.shape[-1]) for t in per_image])
        return _Batch(tokens, coords, [h * w for h, w in grids], grids)

    def _unfolded_batch(self, images: List[torch.Tensor]) -> _Batch:
        """Every image cut into patches (padded or cropped as ``grid_mode`` says), all embedded in one matmul."""
        embed = self.patch_embed
        (ph, pw), chans, dtype = embed.patch_size, self.config.in_chans, embed.proj.weight.dtype
        flats, grids = [], []
        for image in images:
            image = check_and_pad(image[None], chans, ph, pw, self.config.grid_mode)[0]
            gh, gw = image.shape[1] // ph, image.shape[2] // pw
            flats.append(image.reshape(chans, gh, ph, gw, pw).permute(1, 3, 0, 2, 4).reshape(gh * gw, -1))
            grids.append((gh, gw))
        tokens = embed.embed_patches(torch.cat(flats).to(dtype))
        coords = torch.cat([grid_coords(h, w, images[0].device) for h, w in grids])
        return _Batch(tokens, coords, [h * w for h, w in grids], grids)

    # -- positions, prefix, dropping --------------------------------------------------------------------------
    def _naflex_positions(self, batch: _Batch) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """Patch tokens with their image's position information, and each image's cls-slot row (or None)."""
        tokens = batch.tokens
        slots: List[Optional[torch.Tensor]] = [None] * len(batch.counts)
        if self.pos_sincos is not None:
            table = sincos_2d_at(batch.coords, self.embed_dim, self.pos_sincos.temperature)
            return tokens + table.to(tokens.dtype), slots
        if self.pos_embed is None:
            return tokens, slots
        nominal, prefix = self.patch_embed.grid_size, self.config.num_prefix_slots
        cells = sum(h * w for h, w in set(batch.grids) - {tuple(nominal)})
        check_fits(2 * cells * self.embed_dim * tokens.element_size(), 'resampling the position table to the '
                   'NaFlex grids', tokens.device, key='patch_coord' if batch.valid is not None else None)
        tables: Dict[Tuple[int, int], torch.Tensor] = {}
        rows = []
        for i, (coords, (h, w)) in enumerate(zip(batch.coords.split(batch.counts), batch.grids)):
            if (h, w) not in tables:  # each distinct grid resampled once (and cached by the resampler)
                tables[(h, w)] = self.pos_resampler(self.pos_embed, h, w, nominal[0], nominal[1])[0]
            table = tables[(h, w)]
            rows.append(table[prefix + coords[:, 0] * w + coords[:, 1]])
            slots[i] = table[:prefix] if prefix else None
        return tokens + torch.cat(rows).to(tokens.dtype), slots

    def _naflex_sequences(self, batch: _Batch) -> Tuple[torch.Tensor, _Batch]:
        """Each image's sequence (prefix, then patch tokens), concatenated; patch tokens dropped in training."""
        tokens, slots = self._naflex_positions(batch)
        rate = self.config.patch_drop_rate
        if self.training and rate > 0:
            batch, tokens = _drop_tokens(batch, tokens, rate)
        pieces = []
        for i, patch_tokens in enumerate(tokens.split(batch.counts)):
            if self.cls_token is not None:
                cls = self.cls_token[0].to(tokens.dtype)
                pieces.append(cls + slots[i] if slots[i] is not None else cls)
            if self.reg_token is not None:  # registers after [CLS], with no position
                pieces.append(self.reg_token[0].to(tokens.dtype))
            pieces.append(patch_tokens)
        return self.norm_pre(self.pos_drop(torch.cat(pieces))), batch

    # -- blocks over the packed rows --------------------------------------------------------------------------
    def _naflex_run(self, x: NaFlexInput, take: Sequence[int], stop: int
                    ) -> Tuple[torch.Tensor, List[torch.Tensor], _Batch]:
        """(final tokens, the outputs of the blocks in ``take``, the batch), as concatenated sequences."""
        sequences, batch = self._naflex_sequences(self._naflex_batch(x))
        lengths = [n + self.num_prefix_tokens for n in batch.counts]
        final = torch.empty_like(sequences)
        taken = [torch.empty_like(sequences) for _ in take]
        for chunk in pack_sequences(lengths, sequences.device, alone=_not_finite(sequences, lengths),
                                    itemsize=sequences.element_size()):
            cells, canvas = (self._canvas_cells(chunk, batch, sequences) if self.pos_cpe is not None else (None, None))
            rows, outs = self._run_blocks(chunk.scatter(sequences), 0, 0, list(take), stop,
                                          chunk.attn_mask(sequences.dtype), cells, canvas)
            chunk.gather(rows, final)
            for out, rows in zip(taken, outs):
                chunk.gather(rows, out)
        return final, taken, batch

    def _canvas_cells(self, chunk: PackedRows, batch: _Batch, tokens: torch.Tensor) -> Tuple[torch.Tensor, List[int]]:
        """Each slot's cell in an (images, rows, cols) canvas of the chunk's largest grid, for CPVT's encoding."""
        grids = [batch.grids[i] for i in chunk.images]
        height, width = max(h for h, _ in grids), max(w for _, w in grids)
        check_fits(2 * len(grids) * height * width * tokens.shape[-1] * tokens.element_size(),
                   f"CPVT's encoding on a canvas of {len(grids)} images of {height}x{width} patches", tokens.device,
                   key='patch_coord' if batch.valid is not None else None)
        coords = batch.coords.split(batch.counts)
        prefix = coords[0].new_full((self.num_prefix_tokens,), -1)
        sequence_cells = torch.cat([torch.cat([prefix, j * height * width + coords[i][:, 0] * width + coords[i][:, 1]])
                                    for j, i in enumerate(chunk.images)])
        flat = sequence_cells.new_full((chunk.rows * chunk.capacity,), -1)
        flat[chunk.flat_index] = sequence_cells
        return flat.view(chunk.rows, chunk.capacity), [len(grids), height, width]

    # -- laying results out -----------------------------------------------------------------------------------
    def _naflex_layout(self, sequences: torch.Tensor, batch: _Batch) -> Tuple[torch.Tensor, torch.Tensor]:
        """([B, prefix + N, D] tokens, [B, N] patch_valid): the dict's own layout, or each image padded."""
        prefix = self.num_prefix_tokens
        split = sequences.split([n + prefix for n in batch.counts])
        if batch.valid is None:
            longest = max(batch.counts)
            out = sequences.new_zeros(len(split), prefix + longest, sequences.shape[-1])
            valid = torch.zeros(len(split), longest, dtype=torch.bool, device=sequences.device)
            for i, seq in enumerate(split):
                out[i, :len(seq)] = seq
                valid[i, :len(seq) - prefix] = True
            return out, valid
        out = sequences.new_zeros(batch.valid.shape[0], prefix + batch.valid.shape[1], sequences.shape[-1])
        if prefix:
            out[:, :prefix] = torch.stack([seq[:prefix] for seq in split])
        patches = out[:, prefix:]
        patches[batch.valid] = torch.cat([seq[prefix:] for seq in split])
        return out, batch.valid

    def _naflex_features(self, x: NaFlexInput) -> Dict[str, torch.Tensor]:
        sequences, _, batch = self._naflex_run(x, [], len(self.blocks) - 1)
        tokens, valid = self._naflex_layout(self.norm(sequences), batch)
        return {'patches': tokens, 'patch_valid': valid}

    def _naflex_intermediates(self, x: NaFlexInput, take: List[int], stop: int, norm: bool,
                              return_prefix_tokens: bool, intermediates_only: bool, output_dict: bool) -> Any:
        """``forward_intermediates`` for NaFlex inputs: NLC tokens in the ``forward_features`` layout."""
        final, taken, batch = self._naflex_run(x, take, stop)
        prefix = self.num_prefix_tokens
        laid = [self._naflex_layout(self.norm(t) if norm else t, batch)[0] for t in taken]
        prefix_tokens = [t[:, :prefix] for t in laid] if prefix else None
        intermediates = [t[:, prefix:] for t in laid]
        features, valid = self._naflex_layout(self.norm(final), batch)
        if output_dict:
            result: Dict[str, Any] = {'image_intermediates': intermediates, 'patch_valid': valid}
            if prefix_tokens is not None and return_prefix_tokens:
                result['image_intermediates_prefix'] = prefix_tokens
            if not intermediates_only:
                result['image_features'] = features
            return result
        if return_prefix_tokens and prefix_tokens is not None:
            intermediates = list(zip(intermediates, prefix_tokens))
        return intermediates if intermediates_only else ({'patches': features, 'patch_valid': valid}, intermediates)


def _shape(value: Any) -> Any:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def _refuse_repeats(coords: torch.Tensor, image: torch.Tensor) -> None:
    """Refuse a NaFlex dict in which an image gives one (y, x) to two patches (its cost would be unbounded)."""
    key = coords[:, 0] * _COORD_END + coords[:, 1]
    order = torch.argsort(key, stable=True)
    order = order[torch.argsort(image[order], stable=True)]  # by image, then by coordinate
    key, image = key[order], image[order]
    repeated = ((key[1:] == key[:-1]) & (image[1:] == image[:-1])).nonzero()
    if repeated.numel():
        where = int(repeated[0, 0]) + 1
        y, x = divmod(int(key[where]), _COORD_END)
        raise ViTVariantsError(f'image {int(image[where])} of the NaFlex batch gives the coordinate (y, x) = '
                               f'({y}, {x}) to more than one valid patch: each patch needs its own', key='patch_coord')


def _not_finite(sequences: torch.Tensor, lengths: List[int]) -> List[int]:
    """The images whose sequences hold a NaN or Inf."""
    bad = ~torch.isfinite(sequences).all(dim=1)
    if not bool(bad.any()):
        return []
    image = torch.repeat_interleave(torch.arange(len(lengths), device=bad.device),
                                    torch.tensor(lengths, device=bad.device))
    return image[bad].unique().tolist()


def _drop_tokens(batch: _Batch, tokens: torch.Tensor, rate: float) -> Tuple[_Batch, torch.Tensor]:
    """NaViT's token dropping: each image keeps a random ``1 - rate`` of its patch tokens (at least one)."""
    keep, counts = [], []
    start = 0
    for n in batch.counts:
        kept = max(1, int(round(n * (1 - rate))))
        keep.append(start + torch.randperm(n, device=tokens.device)[:kept].sort().values)
        counts.append(kept)
        start += n
    index = torch.cat(keep)
    dropped = _Batch(tokens[index], batch.coords[index], counts, batch.grids, None)
    if batch.valid is not None:  # the dict's layout: what was dropped is no longer valid
        valid = torch.zeros_like(batch.valid)
        positions = batch.valid.nonzero()
        valid[positions[index, 0], positions[index, 1]] = True
        dropped.valid = valid
    return dropped, tokens[index]
