"""NaFlex inputs: one batch of images, each at its own size and aspect ratio.

Two forms besides an NCHW tensor, for ``forward``, ``forward_features``, ``forward_head`` and
``forward_intermediates``:
  * timm's NaFlex dict, the contract of timm's ``NaFlexVit``, its loader, collator and mixup:
    ``{'patches': [B, N, P*P*C] (each patch flattened P-P-C), 'patch_coord': [B, N, 2] (y, x),
    'patch_valid': [B, N] bool}``, one image a row;
  * a list of CHW tensors of different sizes, patchified here (padded or cropped as ``grid_mode``
    says).
Both become ``Patches`` (tokens, coordinates, grids) and go through the model's one embedding step, as an
NCHW batch does (its one-grid case): positions for each image's own grid, its prefix tokens, the attention-input
schemes' per-token inputs. The sequences are then packed, several images to a
row with attention kept inside each (``packing``), so almost no compute goes to padding; padding is
never attended and pooling ignores it. ``forward_features`` returns ``{'patches': [B, prefix + N, D],
'patch_valid': [B, N]}`` (the dict's own layout, or each listed image padded to the longest).

The model runs whatever it is given that fits the machine: the checks at its door refuse what has no
meaning (an empty batch, integer pixels, float or repeated coordinates, a channel count the model lacks)
and what could only run out of memory (``capacity``), each naming the input; so is an image of more than ``MAX_IMAGE_TOKENS``
patch tokens (a 256x256 grid), before any block runs: attention costs the square of its length, so 10^6 tokens
would run for many minutes (a model instance may lift it, ``model.max_image_tokens``). An image whose tokens are
not finite is run in a row of its own, so its NaN or Inf reaches no other image's output.
"""
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from .errors import ViTVariantsError
from .packing import pack_sequences
from .patch_embed import check_and_pad
from .posemb import grid_coords

__all__ = ['NaFlexInput', 'NaFlexMixin', 'Patches', 'drop_tokens', 'is_naflex', 'MAX_IMAGE_TOKENS']

NaFlexInput = Union[Dict[str, torch.Tensor], Sequence[torch.Tensor]]
# float32 positions tell integer coordinates apart only below 2**24.
_COORD_END = 1 << 24
# Patch tokens one NaFlex image may have (a 256x256 grid): attention within an image costs the square of its
# length, so past this one image runs for many minutes. Beyond the tokens limit on what a file claims (a 128x128
# grid), which an input may pass.
MAX_IMAGE_TOKENS = 1 << 16


@torch.jit.ignore
def is_naflex(x: Any) -> bool:
    """A NaFlex dict or a list of images (anything else is an NCHW batch)."""
    return isinstance(x, (dict, list, tuple))


class Patches(NamedTuple):
    """Patch tokens before positions are added, with where each one sits: the one embedding step's input.

    An NCHW batch is the one-grid case: ``tokens`` (B, N, D), one image a row, every row of the one grid. NaFlex
    inputs come as one row, image after image, row-major within each: ``tokens`` (1, T, D).
    """
    tokens: torch.Tensor
    coords: torch.Tensor  # (N or T, 2) long, (y, x) of each column of ``tokens``
    counts: List[int]  # patch tokens per image of a row: [N] for NCHW
    grids: List[Tuple[int, int]]  # each image's grid (rows, cols)
    valid: Optional[torch.Tensor] = None  # the NaFlex dict's (B, N) patch_valid, to lay results back out


class NaFlexMixin:
    """The NaFlex input forms of ``SimpleVisionTransformer`` (which provides the modules used here): patch tokens
    from a dict or a list of images, blocks over packed rows, and results laid back out one image a row."""

    def get_patch_size(self) -> Tuple[int, int]:
        """The patch size, as timm's NaFlex loader asks a model for it."""
        return tuple(self.patch_embed.patch_size)

    # -- patch tokens from each input form --------------------------------------------------------------------
    @torch.jit.ignore
    def _naflex_patches(self, x: NaFlexInput) -> Patches:
        if self.config.grid_mode == 'pool':
            raise ViTVariantsError("grid_mode='pool' pools every image to one grid, so images at their own sizes "
                                   'have nothing to gain; give an NCHW batch')
        if isinstance(x, dict) and not self.config.embeds_patches_alone:
            raise ViTVariantsError(f'patch_embed={self.config.patch.kind!r} sees across neighbouring patches, so '
                                   'a flattened patch alone does not give its token; give a list of images instead',
                                   key='patches')
        patches = self._dict_patches(x) if isinstance(x, dict) else self._list_patches(list(x))
        self._check_lengths(patches, 'patches' if isinstance(x, dict) else None)
        return patches

    max_image_tokens: int = MAX_IMAGE_TOKENS  # a model instance may lift it

    def _check_lengths(self, patches: Patches, key: Optional[str]) -> None:
        longest = max(patches.counts)
        if longest > self.max_image_tokens:
            i = patches.counts.index(longest)
            h, w = patches.grids[i]
            raise ViTVariantsError(
                f'image {i} has {longest} patch tokens (on a {h}x{w} grid), more than the {self.max_image_tokens} '
                'one image may have: attention within an image costs the square of its length '
                f'({float(longest) ** 2:.1e} token pairs per head and block); refusing before any block runs (give '
                f'fewer patches, or lift it with model.max_image_tokens = {longest})', key=key)

    def _dict_patches(self, x: Dict[str, torch.Tensor]) -> Patches:
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
        return Patches(tokens[None], coords, counts, grids, valid)

    def _list_patches(self, images: List[torch.Tensor]) -> Patches:
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
            return self._unfolded_patches(images)
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
        return Patches(tokens[None], coords, [h * w for h, w in grids], grids)

    def _unfolded_patches(self, images: List[torch.Tensor]) -> Patches:
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
        return Patches(tokens[None], coords, [h * w for h, w in grids], grids)

    # -- blocks over the packed rows --------------------------------------------------------------------------
    @torch.jit.ignore
    def _run_packed(self, sequences: torch.Tensor, patches: Patches, inputs: Dict[str, torch.Tensor],
                    take: List[int], stop: int) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """``_run_blocks`` over (T', D) sequences packed into rows: (final tokens, the outputs of blocks in ``take``).

        ``inputs`` are the sequences' per-token attention inputs (``_embed``); each chunk's ``BlockContext`` has its
        mask and every position scheme's inputs laid out for its rows (``_rows_context``).
        """
        lengths = [n + self.num_prefix_tokens for n in patches.counts]
        final = torch.empty_like(sequences)
        taken = [torch.empty_like(sequences) for _ in take]
        itemsize = sequences.element_size()
        for chunk in pack_sequences(lengths, sequences.device, alone=_not_finite(sequences, lengths),
                                    pair_bytes=itemsize + self._pair_bytes(itemsize)):
            context = self._rows_context(chunk, patches, inputs, sequences.dtype)
            rows, outs = self._run_blocks(chunk.scatter(sequences), context, take, stop)
            chunk.gather(rows, final)
            for out, rows in zip(taken, outs):
                chunk.gather(rows, out)
        return final, taken

    # -- laying results out -----------------------------------------------------------------------------------
    @torch.jit.ignore
    def _naflex_layout(self, sequences: torch.Tensor, patches: Patches) -> Tuple[torch.Tensor, torch.Tensor]:
        """([B, prefix + N, D] tokens, [B, N] patch_valid): the dict's own layout, or each image padded."""
        prefix = self.num_prefix_tokens
        split = sequences.split([n + prefix for n in patches.counts])
        if patches.valid is None:
            longest = max(patches.counts)
            out = sequences.new_zeros(len(split), prefix + longest, sequences.shape[-1])
            valid = torch.zeros(len(split), longest, dtype=torch.bool, device=sequences.device)
            for i, seq in enumerate(split):
                out[i, :len(seq)] = seq
                valid[i, :len(seq) - prefix] = True
            return out, valid
        out = sequences.new_zeros(patches.valid.shape[0], prefix + patches.valid.shape[1], sequences.shape[-1])
        if prefix:
            out[:, :prefix] = torch.stack([seq[:prefix] for seq in split])
        out[:, prefix:][patches.valid] = torch.cat([seq[prefix:] for seq in split])
        return out, patches.valid


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


def drop_tokens(patches: Patches, rate: float) -> Patches:
    """NaViT's token dropping: each image keeps a random ``1 - rate`` of its patch tokens (at least one)."""
    tokens = patches.tokens[0]
    keep, counts = [], []
    start = 0
    for n in patches.counts:
        kept = max(1, int(round(n * (1 - rate))))
        keep.append(start + torch.randperm(n, device=tokens.device)[:kept].sort().values)
        counts.append(kept)
        start += n
    index = torch.cat(keep)
    valid = None
    if patches.valid is not None:  # the dict's layout: what was dropped is no longer valid
        valid = torch.zeros_like(patches.valid)
        positions = patches.valid.nonzero()
        valid[positions[index, 0], positions[index, 1]] = True
    return Patches(tokens[index][None], patches.coords[index], counts, patches.grids, valid)
