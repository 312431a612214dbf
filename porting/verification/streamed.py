"""Verification in bounded memory: the mode a check runs in, and what the streamed mode does differently.

A reference that its own loader must materialise (timm's npz loader copies every array into the model)
gets its weights on a ``memory.scratch`` mapping in both modes: their pages go back to the page cache as
they are written and after each block runs, so the reference never holds the model on the heap.
A half-precision model's float32 upcast goes onto a scratch mapping too (on the heap it would be twice a
bf16 checkpoint): in memory, one mapping of the whole model; streamed, each block's upcast is made as the block
runs, into one mapping of one block that every block reuses, so the upcast costs one block of disk and memory.
In memory (the default when it fits), the reference runs whole, then ours, and the outputs are compared.
Streamed, when the two float32 models would not fit in ``--memory-budget``: both run block by block from mapped
weights, and each of our blocks' output is compared with the reference's output of the same block as it runs.
Peak memory is then a few blocks and the activations, independent of depth. The final figures are the same in
both modes: the same networks compute the same numbers, only where the weights live differs.
"""
import contextlib
import contextvars
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import torch
import torch.nn as nn

from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.capacity import available_bytes
from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.limits import rel_pos_bytes
from timm_vit_variants.memory import file_mapped_ranges, release_tensor, releasing, scratch
from timm_vit_variants.parts import RelPos

from ..sizes import parse_size

__all__ = ['MemoryBudget', 'memory_budget', 'run_bytes', 'Stream', 'streaming', 'materialize', 'streaming_now',
           'as_float32', 'loading', 'trace_blocks']

_ALIGN = 64


@dataclass
class Stream:
    """What the streamed mode holds while one verification runs: the reference's block outputs, and the figures."""
    recorded: List[torch.Tensor] = field(default_factory=list)
    depth: int = 0
    compared: int = 0
    worst: float = 0.0
    worst_block: Optional[int] = None

    def note(self, budget: int, need: int, run: int = 0) -> str:
        where = (f'{self.compared} blocks compared as ours ran, max|d| {self.worst:.2e} (block {self.worst_block})'
                 if self.compared else 'no block outputs to compare (the reference is not a timm network)')
        with_run = f' with its run, {_gb(run)},' if run else ''
        return (f'streamed verification (a float32 copy of the model, {_gb(need)},{with_run} is over the '
                f'{_gb(budget)} memory budget): both run block by block from mapped weights; {where}')


_STREAM: contextvars.ContextVar[Optional[Stream]] = contextvars.ContextVar('vit_port_stream', default=None)


def _gb(n: int) -> str:
    """A byte count as people read it (GB = 10**9, the Hub's convention)."""
    for unit, scale in (('GB', 1e9), ('MB', 1e6), ('kB', 1e3)):
        if n >= scale:
            return f'{n / scale:.3g} {unit}'
    return f'{n} B'


@dataclass(frozen=True)
class MemoryBudget:
    """How much verification may hold: what holding both models in memory would take (``need``), and what one
    network's run holds beyond its weights in either mode (``run``, ``run_bytes``)."""
    budget: int
    need: int
    run: int = 0

    @property
    def streams(self) -> bool:
        return self.need + self.run > self.budget

    def in_memory_note(self) -> str:
        run = f' and its run, {_gb(self.run)},' if self.run else ''
        return f'verified in memory (a float32 copy of the model, {_gb(self.need)},{run} is within the ' \
               f'{_gb(self.budget)} memory budget)'


def run_bytes(config: SimpleViTConfig) -> int:
    """What one network's run at ``config``'s geometry holds beyond its weights, which streaming cannot shed: with
    relative positions over S tokens, each block's (S, S) int64 index that the reference (timm's ``Beit``) keeps,
    and the most held beside them: timm's ``gen_relative_position_index`` building one (six (S, S) int64 tensors
    at its peak), or one block's bias with its copy (gathered, then laid out per head). Nothing for other schemes."""
    if config.position(RelPos) is None:
        return 0
    pairs = (config.grid_size[0] * config.grid_size[1] + config.num_prefix_tokens) ** 2
    return config.depth * 8 * pairs + max(48 * pairs, 2 * rel_pos_bytes(1, config.num_heads) * pairs)


def memory_budget(requested: Union[None, str, int], layout: List[Any], run: int = 0) -> MemoryBudget:
    """The budget (``requested``, else half the available memory) and the in-memory need of a check: one
    float32 copy of the model, the most either side holds on the heap in memory (a half-precision model's
    upcast, transformers' own loader); the two models never run at the same time. ``run`` (``run_bytes`` at the
    geometries checked) is held in either mode: over the budget, the check is refused before any work."""
    if requested is None:
        budget = available_bytes() // 2
    elif isinstance(requested, bool) or not isinstance(requested, (int, str)):
        raise ViTVariantsError(f'memory_budget must be a size such as 8GB, got {requested!r}', key='memory_budget')
    else:
        try:
            budget = parse_size(requested) if isinstance(requested, str) else int(requested)
        except ValueError as e:
            raise ViTVariantsError(f'memory_budget: {e}', key='memory_budget') from None
        if budget <= 0:
            raise ViTVariantsError(f'memory_budget must be at least one byte, got {requested!r}', key='memory_budget')
    fp32 = 4 * sum(math.prod(shape) for _, shape, _ in layout)
    if run > budget:
        raise ViTVariantsError(f'verification would hold {_gb(run)} beyond the weights (the relative position index of '
                               f"each of the reference's blocks, and a block's bias), over the {_gb(budget)} memory "
                               'budget; refusing before any work (raise --memory-budget, or give --no-verify)',
                               key='memory_budget')
    return MemoryBudget(budget, fp32, run)


@contextlib.contextmanager
def streaming(active: bool = True) -> Iterator[Optional[Stream]]:
    """Run the verifications inside in the streamed mode (``active``), else leave them in memory."""
    if not active:
        yield None
        return
    stream = Stream()
    token = _STREAM.set(stream)
    try:
        yield stream
    finally:
        _STREAM.reset(token)
        stream.recorded.clear()


def _entries(modules: Iterable[nn.Module]) -> List[Tuple[nn.Module, str, torch.Tensor, bool]]:
    """(module, name, tensor, is_parameter) of every parameter, then every buffer, the ``modules`` hold directly."""
    modules = list(modules)
    entries = [(module, name, tensor, True) for module in modules for name, tensor in module._parameters.items()
               if tensor is not None]
    entries += [(module, name, tensor, False) for module in modules for name, tensor in module._buffers.items()
                if tensor is not None]
    return entries


def _aligned(numel: int, dtype: torch.dtype) -> int:
    return -(-numel * torch.empty((), dtype=dtype).element_size() // _ALIGN) * _ALIGN


def _kind(tensor: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.dtype:
    return dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype


def _set(module: nn.Module, name: str, tensor: torch.Tensor, is_param: bool, like: torch.Tensor) -> None:
    if is_param:
        module._parameters[name] = nn.Parameter(tensor, requires_grad=like.requires_grad)
    else:
        module._buffers[name] = tensor


def _place(model: nn.Module, dtype: Optional[torch.dtype], modules: Optional[Iterable[nn.Module]] = None
           ) -> nn.Module:
    """Every parameter and buffer of ``modules`` (default: all of ``model``'s) moved onto one scratch mapping (cast
    to ``dtype``, copying the values unless the model is on the meta device)."""
    entries = _entries(model.modules() if modules is None else modules)
    sizes = [_aligned(t.numel(), _kind(t, dtype)) for _, _, t, _ in entries]
    buffer = scratch(sum(sizes))
    mapped = file_mapped_ranges()
    model._vit_port_scratch = buffer  # noqa: SLF001  (kept with the model: ``loading`` releases it)
    offset = 0
    with releasing(buffer), torch.no_grad():
        for (module, name, tensor, is_param), size in zip(entries, sizes):
            kind = _kind(tensor, dtype)
            view = buffer[offset:offset + tensor.numel() * torch.empty((), dtype=kind).element_size()]
            view = view.view(kind).view(tensor.shape)
            offset += size
            if not tensor.is_meta:
                view.copy_(tensor)
                _release_if_mapped(tensor, mapped)  # a mapped file's pages read for the copy go back too
            _set(module, name, view, is_param, tensor)
    return model


def _release_if_mapped(tensor: torch.Tensor, mapped: Tuple[Tuple[int, int], ...]) -> None:
    start = tensor.data_ptr()
    if any(lo <= start and start + tensor.numel() * tensor.element_size() <= hi for lo, hi in mapped):
        release_tensor(tensor)


def _block_list(model: nn.Module) -> Optional[nn.Module]:
    """The network's repeated blocks: the ``nn.Sequential``/``nn.ModuleList`` of one block class holding the most
    parameters (timm's ``blocks``, transformers' ``encoder.layer(s)``), or None."""
    best, most = None, 0
    for module in model.modules():
        if isinstance(module, (nn.Sequential, nn.ModuleList)) and len(module) > 1 \
                and len({type(child) for child in module}) == 1:
            held = sum(p.numel() for p in module.parameters())
            if held > most:
                best, most = module, held
    return best


def _upcast_as_run(model: nn.Module, blocks: nn.Module) -> nn.Module:
    """Streamed: ``model`` run in float32 with the upcast of its blocks' half-precision weights made as each block
    runs, into one scratch mapping the size of one block that every block reuses; the rest (embeddings, final norm,
    head: a fraction of one block) is upcast once onto a scratch of its own. The disk and memory of the upcast are
    then about one block, not the model. The values each block runs on are the same as a whole upcast's.

    Between two blocks' runs the shared scratch holds whichever block ran last: outside a forward pass each block's
    weights are read through ``state_dict`` (a hook gives the upcast of the stored values there)."""
    inside = {id(m) for block in blocks for m in block.modules()}
    _place(model, torch.float32, [m for m in model.modules() if id(m) not in inside])
    plans, largest = [], 0
    for block in blocks:
        entries = [e for e in _entries(block.modules()) if e[2].is_floating_point() and e[2].dtype != torch.float32]
        sizes = [_aligned(t.numel(), torch.float32) for _, _, t, _ in entries]
        plans.append((block, entries, sizes))
        largest = max(largest, sum(sizes))
    if not largest:
        return model
    shared = scratch(largest)
    model._vit_port_block_scratch = shared  # noqa: SLF001  (kept with the model)
    mapped = file_mapped_ranges()
    for block, entries, sizes in plans:
        pairs, names, offset = [], {}, 0
        qualified = {id(m): prefix for prefix, m in block.named_modules()}
        for (module, name, tensor, is_param), size in zip(entries, sizes):
            view = shared[offset:offset + tensor.numel() * 4].view(torch.float32).view(tensor.shape)
            offset += size
            pairs.append((view, tensor))
            prefix = qualified[id(module)]
            names[f'{prefix}.{name}' if prefix else name] = tensor
            _set(module, name, view, is_param, tensor)
        block.register_forward_pre_hook(_upcaster(pairs, mapped))
        block.register_forward_hook(lambda *_: release_tensor(shared))  # its pages go back (they stay in the file)
        block._register_state_dict_hook(_stored_values(names))
    return model


def _upcaster(pairs: List[Tuple[torch.Tensor, torch.Tensor]], mapped: Tuple[Tuple[int, int], ...]) -> Any:
    def upcast(*_: Any) -> None:
        with torch.no_grad():
            for view, stored in pairs:
                view.copy_(stored)
                _release_if_mapped(stored, mapped)
    return upcast


def _stored_values(names: Dict[str, torch.Tensor]) -> Any:
    def hook(_module: nn.Module, state: Dict[str, Any], prefix: str, _metadata: Any) -> None:
        for name, stored in names.items():
            if prefix + name in state:
                state[prefix + name] = stored.float()
    return hook


def streaming_now() -> bool:
    """Whether the verification running now is in the streamed mode (``streaming``)."""
    return _STREAM.get() is not None


def materialize(model: nn.Module) -> nn.Module:
    """A meta-device reference given real (uninitialised) storage on a scratch mapping, for its own loader to
    fill (``loading``): a materialised reference never holds its weights on the heap, in either mode."""
    return _place(model, None)


def as_float32(model: nn.Module) -> nn.Module:
    """``model`` with float32 weights: in memory, half-precision ones upcast onto one scratch mapping; streamed, each
    block's as it runs, into a scratch of one block (``_upcast_as_run``)."""
    if all(p.dtype == torch.float32 for p in model.parameters()):
        return model
    blocks = _block_list(model) if _STREAM.get() is not None else None
    return _place(model, torch.float32) if blocks is None else _upcast_as_run(model, blocks)


@contextlib.contextmanager
def loading(model: nn.Module) -> Iterator[None]:
    """While a reference's own loader fills the weights of a ``materialize``d ``model``: their pages go back
    (to the page cache) as they are written, so loading holds about one tensor."""
    buffer = getattr(model, '_vit_port_scratch', None)
    if buffer is None:
        yield
        return
    with releasing(buffer):
        yield


def trace_blocks(model: nn.Module) -> None:
    """Streamed: record each reference block's output on its first pass, and compare each of ours as it runs."""
    stream = _STREAM.get()
    blocks = getattr(model, 'blocks', None)
    if stream is None or not isinstance(blocks, (nn.Sequential, nn.ModuleList)) or not len(blocks):
        return
    if not isinstance(model, SimpleVisionTransformer):
        stream.recorded, stream.depth, stream.compared = [], len(blocks), 0

        def record(_module: nn.Module, _args: Any, output: torch.Tensor) -> None:
            if len(stream.recorded) < stream.depth:
                stream.recorded.append(output.detach().clone())

        for block in blocks:
            block.register_forward_hook(record)
        return

    def check(_module: nn.Module, _args: Any, output: torch.Tensor) -> None:
        i = stream.compared
        if i >= len(stream.recorded) or len(stream.recorded) != len(blocks):
            return
        reference = stream.recorded[i]
        stream.recorded[i] = torch.empty(0)  # compared: dropped
        stream.compared += 1
        if reference.shape == output.shape:
            d = (reference.float() - output.float()).abs().max().item()
            if stream.worst_block is None or not d <= stream.worst:  # NaN is kept as the worst
                stream.worst, stream.worst_block = d, i

    for block in blocks:
        block.register_forward_hook(check)
