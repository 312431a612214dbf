"""Verification hands back the pages of memory-mapped weights block by block, and never touches heap weights."""
import os

import torch

from porting.hub_folder import load_folder, save_pretrained_folder
from porting.verification import release_as_it_runs
from timm_vit_variants import SimpleVisionTransformer, SimpleViTConfig

CONFIG = SimpleViTConfig.of(img_size=32, patch_size=8, embed_dim=256, depth=3, num_heads=4, num_classes=10)


def _resident_kb(tensor: torch.Tensor) -> int:
    """Resident kB of the mapping that holds ``tensor`` (from /proc/self/smaps)."""
    address, inside = tensor.data_ptr(), False
    with open('/proc/self/smaps') as smaps:
        for line in smaps:
            parts = line.split()
            if '-' in parts[0] and len(parts) >= 5:
                low, high = (int(v, 16) for v in parts[0].split('-'))
                inside = low <= address < high
            elif inside and parts[0] == 'Rss:':
                return int(parts[1])
    raise AssertionError('tensor is not in any mapping')


def _folder(tmp_path):
    torch.manual_seed(0)
    model = SimpleVisionTransformer(CONFIG)
    torch.nn.init.normal_(model.head.weight)
    save_pretrained_folder(model, tmp_path / 'm')
    return model.eval(), tmp_path / 'm'


def test_mapped_block_pages_are_released_and_outputs_unchanged(tmp_path):
    reference, folder = _folder(tmp_path)
    size_kb = os.path.getsize(folder / 'model.safetensors') // 1024
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = reference(x)

        kept = load_folder(folder)
        kept(x)
        assert _resident_kb(kept.blocks[0].mlp.fc1.weight) > 0.9 * size_kb  # a forward pass faults in every page

        released = load_folder(folder)
        release_as_it_runs(released)
        first = released(x)
        resident = _resident_kb(released.blocks[0].mlp.fc1.weight)
        second = released(x)  # released pages are read back from the file
    assert resident < 0.2 * size_kb
    assert torch.equal(first, expected) and torch.equal(second, expected)


def test_heap_weights_are_never_released(tmp_path):
    model, _ = _folder(tmp_path)
    x = torch.randn(1, 3, 40, 24)
    with torch.no_grad():
        before = model(x)
        release_as_it_runs(model)
        model(x)
        after = model(x)
    assert torch.equal(before, after)
    assert all(p.abs().sum() > 0 for p in model.blocks.parameters() if p.ndim > 1)


def test_timm_reference_weights_view_the_file_for_zip_pickles(tmp_path):
    """A training checkpoint's chosen entry: a zip .pth is viewed in place, a legacy one still loads."""
    from porting.verification.timm_ref import timm_weights as _timm_weights
    from timm_vit_variants.memory import file_mapped_ranges as _file_mapped_ranges

    state = {'blocks.0.mlp.fc1.weight': torch.randn(512, 256), 'norm.bias': torch.randn(256)}
    torch.save({'state_dict': state}, tmp_path / 'zip.pth')
    torch.save({'state_dict': state}, tmp_path / 'legacy.pth', _use_new_zipfile_serialization=False)
    for name, mapped in (('zip.pth', True), ('legacy.pth', False)):
        loaded = _timm_weights(tmp_path / name, 'state_dict')
        assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
        tensor = loaded['blocks.0.mlp.fc1.weight']
        begin, end = tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()
        assert any(lo <= begin and end <= hi for lo, hi in _file_mapped_ranges()) == mapped, name
