"""Reader dispatch is one table (``detect.DISPATCH``): every source format reaches its reader through it, the table's
order decides the layouts that overlap, ``fmt=`` picks within a format's rows, and a family joins with one row.

The sources are the project's fixtures (``tests/data``, ``checkpoint_fixtures``) and tiny files written by timm's and
transformers' own ``save_*`` code; opening one reads only its names, shapes and config, so the whole file is fast.
"""
import shutil
from pathlib import Path

import pytest
import torch

from checkpoint_fixtures import write_hf_folder, write_timm_file, write_timm_folder, write_timm_naflex_folder
from timm_vit_variants.checkpoints import detect, detect_format, open_checkpoint
from timm_vit_variants.checkpoints.rope_vit import is_rope_vit
from timm_vit_variants.errors import ViTVariantsError

DATA = Path(__file__).parent / 'data'
TINY = dict(embed_dim=32, depth=2, num_heads=2, img_size=96)


def _timm_eva(tmp_path: Path, arch: str, folder: bool) -> Path:
    """timm's own Eva port (``save_for_hf`` folder, or its bare state dict as safetensors)."""
    import timm
    from safetensors.torch import save_file
    from timm.models import save_for_hf

    model = timm.create_model(arch, **TINY)
    if folder:
        save_for_hf(model, str(tmp_path / arch), model_args=TINY)
        return tmp_path / arch
    path = tmp_path / f'{arch}.safetensors'
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def _transformers(tmp_path: Path, kind: str) -> Path:
    """A tiny transformers folder of ``kind``, written by its own ``save_pretrained``."""
    import transformers as t

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=8)
    config, model = {
        'siglip': (t.SiglipVisionConfig, t.SiglipVisionModel),
        'siglip2': (t.Siglip2VisionConfig, t.Siglip2VisionModel),
        'dinov2': (t.Dinov2Config, t.Dinov2Model),
        'dinov3': (t.DINOv3ViTConfig, t.DINOv3ViTModel),
        'clip': (t.CLIPVisionConfig, t.CLIPVisionModel),
    }[kind]
    args = dict(small, num_patches=16) if kind == 'siglip2' else dict(small, image_size=32)
    torch.manual_seed(0)
    model(config(**args)).save_pretrained(tmp_path / kind)
    return tmp_path / kind


def _copy(tmp_path: Path, source: Path, name: str) -> Path:
    shutil.copy(source, tmp_path / name)
    return tmp_path / name


# source -> (how it is made, the reader DISPATCH must route it to[, the head count a bare file does not record])
SOURCES = {
    'bigvision npz': (lambda tmp: DATA / 'reference' / 'bigvision_learn_tok.npz', 'BigVisionCheckpoint'),
    'big_vision NaFlex npz': (lambda tmp: DATA / 'reference' / 'naflex_tiny.npz', 'BigVisionNaFlexCheckpoint'),
    'vit_jax npz': (lambda tmp: DATA / 'reference' / 'vitjax_tiny.npz', 'VitJaxCheckpoint'),
    'timm .pth': (lambda tmp: write_timm_file(tmp, '.pth'), 'TimmCheckpoint', 2),
    'timm folder': (write_timm_folder, 'TimmCheckpoint'),
    'timm NaFlexVit folder': (write_timm_naflex_folder, 'TimmNaFlexCheckpoint'),
    'timm Eva DINOv3 folder': (lambda tmp: _timm_eva(tmp, 'vit_small_patch16_dinov3', True), 'TimmEvaCheckpoint'),
    'timm Eva DINOv3 state dict': (lambda tmp: _timm_eva(tmp, 'vit_small_patch16_dinov3', False),
                                   'TimmEvaCheckpoint', 2),
    'DeiT v1 file': (lambda tmp: DATA / 'reference_deit' / 'deit_tiny.pth', 'TimmCheckpoint', 4),
    'transformers ViT': (write_hf_folder, 'HFCheckpoint'),
    'transformers SigLIP': (lambda tmp: _transformers(tmp, 'siglip'), 'HFSiglipCheckpoint'),
    'transformers SigLIP 2': (lambda tmp: _transformers(tmp, 'siglip2'), 'HFSiglip2Checkpoint'),
    'transformers DINOv2': (lambda tmp: _transformers(tmp, 'dinov2'), 'HFDinov2Checkpoint'),
    'transformers DINOv3': (lambda tmp: _transformers(tmp, 'dinov3'), 'HFDinov3Checkpoint'),
    'transformers CLIP': (lambda tmp: _transformers(tmp, 'clip'), 'HFClipCheckpoint'),
    'DINOv2 hub file': (lambda tmp: DATA / 'reference_dino' / 'dinov2_tiny.pth', 'Dinov2Checkpoint', 2),
    'DINOv3 hub file': (lambda tmp: DATA / 'reference_dino' / 'dinov3_tiny_bf16periods.pth', 'Dinov3Checkpoint', 2),
    'RoPE-ViT mixed': (lambda tmp: DATA / 'reference_dino' / 'ropevit_tiny_mixed.pth', 'RopeVitCheckpoint', 2),
    'RoPE-ViT axial + APE': (lambda tmp: DATA / 'reference_dino' / 'ropevit_tiny_axial_ape.pth',
                             'RopeVitCheckpoint', 2),
    'DeiT-III file': (lambda tmp: DATA / 'reference_deit' / 'deit3_tiny.pth', 'Deit3Checkpoint', 4),
    'OpenCLIP folder': (lambda tmp: DATA / 'reference_clip' / 'openclip_b16_quickgelu_tiny', 'OpenCLIPCheckpoint'),
    'OpenAI TorchScript archive': (lambda tmp: DATA / 'reference_clip' / 'openai_vit_b16_tiny.pt',
                                   'OpenAICLIPCheckpoint'),
}


@pytest.mark.parametrize('name', SOURCES)
def test_every_format_reaches_its_reader_through_the_table(name, tmp_path):
    make, reader, *heads = SOURCES[name]
    path = make(tmp_path)
    with open_checkpoint(path, num_heads=heads[0] if heads else None) as src:
        assert type(src).__name__ == reader
        routed = [r.reader for r in detect.DISPATCH if not isinstance(r.reader, detect.Refuse)]
        assert type(src) in routed  # a row of the one table, not a reader chosen elsewhere
        assert detect_format(path) == src.format
        assert detect.READERS[src.format] in routed


def test_the_table_names_every_format_once_and_each_plain_reader_is_its_last_row():
    formats = [r.reader.format for r in detect.DISPATCH if not isinstance(r.reader, detect.Refuse)]
    assert set(formats) == set(detect.FORMATS)
    for fmt, reader in detect.READERS.items():
        assert reader.format == fmt and [r for r in formats if r == fmt]
        assert [r.reader for r in detect.DISPATCH if getattr(r.reader, 'format', None) == fmt][-1] is reader


def test_a_bare_timm_eva_dinov3_file_is_eva_before_ropevit(tmp_path):
    """A timm Eva DINOv3 state dict has RoPE-ViT's keys too (``gamma_1`` beside a patch conv): the Eva row comes
    first, so it is read as timm's port; asked for as RoPE-ViT (``fmt=``), the RoPE-ViT row takes it."""
    from safetensors.torch import load_file

    path = _timm_eva(tmp_path, 'vit_small_patch16_dinov3', False)
    assert is_rope_vit(set(load_file(str(path))))  # the overlap the table's order resolves
    assert detect_format(path) == 'timm'
    with open_checkpoint(path, num_heads=2) as src:
        assert type(src).__name__ == 'TimmEvaCheckpoint'
    with open_checkpoint(path, 'ropevit', num_heads=2) as src:
        assert type(src).__name__ == 'RopeVitCheckpoint'


def test_deit3_and_ropevit_axial_ape_are_told_apart_by_name(tmp_path):
    """The same keys: DeiT-III's row holds only where the name does not say RoPE-ViT."""
    deit3 = DATA / 'reference_deit' / 'deit3_tiny.pth'
    renamed = _copy(tmp_path, deit3, 'rope_axial_ape_deit_small_patch16_LS.pth')
    assert detect_format(deit3) == 'deit3' and detect_format(renamed) == 'ropevit'
    with open_checkpoint(deit3, 'ropevit', num_heads=4) as src:  # fmt= picks the format's row, whatever the name says
        assert type(src).__name__ == 'RopeVitCheckpoint'


def test_an_openai_state_dict_is_openai_before_openclip(tmp_path):
    """OpenAI's state dicts have open_clip's names: the row testing for OpenAI's scalars comes first."""
    from timm_vit_variants.checkpoints.torchscript_store import TorchScriptStore

    store = TorchScriptStore(str(DATA / 'reference_clip' / 'openai_vit_b16_tiny.pt'))
    try:
        state = {n: store.tensor(n).clone() for n in store.names()}
    finally:
        store.close()
    torch.save(state, tmp_path / 'openai.pt')
    torch.save({k: v for k, v in state.items() if k.startswith('visual.')}, tmp_path / 'visual_only.pt')
    assert detect_format(tmp_path / 'openai.pt') == 'openai'
    assert detect_format(tmp_path / 'visual_only.pt') == 'openclip'


def test_refusing_rows_keep_their_messages(tmp_path):
    import numpy as np

    np.savez(tmp_path / 'other.npz', a=np.zeros(2, np.float32))
    with pytest.raises(ViTVariantsError, match='an .npz archive without ViT encoder blocks'):
        detect_format(tmp_path / 'other.npz')
    folder = write_hf_folder(tmp_path)
    config = (folder / 'config.json').read_text().replace('"model_type": "vit"', '"model_type": "bert"')
    (folder / 'config.json').write_text(config)
    with pytest.raises(ViTVariantsError, match="model_type 'bert' is not a transformers vision model this package reads"):
        detect_format(folder)
    torch.save({'a.weight': torch.zeros(2)}, tmp_path / 'other.pth')
    with pytest.raises(ViTVariantsError, match='no ViT patch embedding among the tensors'):
        detect_format(tmp_path / 'other.pth')


def test_a_family_joins_with_one_row(tmp_path, monkeypatch):
    """One row placed before the rows its files meet routes them to its reader; the others are untouched."""
    from timm_vit_variants.checkpoints.timm_format import TimmCheckpoint

    class MarkedTimm(TimmCheckpoint):
        """A stand-in family reader (timm's layout, so it reads the file)."""

    path = write_timm_file(tmp_path, '.pth')
    row = detect.Route(0., lambda p: 'cls_token' in p.names and 'marked' in p.path, MarkedTimm)
    monkeypatch.setattr(detect, 'DISPATCH', (row, *detect.DISPATCH))
    marked = _copy(tmp_path, path, 'marked_vit.pth')
    with open_checkpoint(marked, num_heads=2) as src:
        assert type(src) is MarkedTimm
    with open_checkpoint(path, num_heads=2) as src:
        assert type(src) is TimmCheckpoint
