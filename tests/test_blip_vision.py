"""BLIP's image tower: a transformers ``BlipVisionModel`` folder, and BLIP-2's and InstructBLIP's (with and without
their q/v bias), each tiny with random weights, converts, verified against the class itself, and the converted
folder, loaded as a user loads it, gives the class's tokens (every token after ``post_layernorm``) and pooled output
(that [CLS] normed again) at the stored grid and, through its own ``interpolate_pos_encoding``, at two more; a config
contradicting the tensors is refused by name. The full models' folders give what the class computes of the image:
``BlipModel``'s ``get_image_features``, ``BlipForImageTextRetrieval``'s ``vision_proj`` output inside its own
forward, the image tower of ``Blip2ForConditionalGeneration`` (what its Q-Former reads); a class that exists to
give the Q-Former's image embedding is refused."""
import json
from pathlib import Path

import pytest
import torch

from model_probes import load_like_user, read_into_model
from porting.cli import main
from porting.families._blip_ref import hf_blip_vision_outputs
from porting.verification.result import Check, NoReference
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError

transformers = pytest.importorskip('transformers')

STORED = (16, 16)  # a 4x4 grid of 4-pixel patches
GRIDS = (STORED, (24, 24), (12, 20))  # the stored grid, a larger one, a non-square one
BOUND = 2e-5
_CONFIG = dict(image_size=16, patch_size=4, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=32)


# (class, its config class, config.json entries beyond _CONFIG); the classes share BLIP's layout
TOWERS = {'blip': ('BlipVisionModel', 'BlipVisionConfig', {}),
          'blip2': ('Blip2VisionModel', 'Blip2VisionConfig', {}),
          'blip2-no-qkv-bias': ('Blip2VisionModel', 'Blip2VisionConfig', {'qkv_bias': False}),
          'instructblip': ('InstructBlipVisionModel', 'InstructBlipVisionConfig', {})}


_TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
             max_position_embeddings=8)
_QFORMER = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                encoder_hidden_size=16, vocab_size=64)
_OPT = dict(model_type='opt', hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=32, vocab_size=64,
            word_embed_proj_dim=16)
# the full models: (class, its config class, its config's entries), the image tower built from _CONFIG
MODELS = {'BlipModel': ('BlipConfig', dict(text_config=_TEXT, projection_dim=8)),
          'BlipForImageTextRetrieval': ('BlipConfig', dict(text_config=_TEXT, image_text_hidden_size=8)),
          'Blip2ForConditionalGeneration': ('Blip2Config', dict(qformer_config=_QFORMER, text_config=_OPT)),
          'Blip2VisionModelWithProjection': ('Blip2Config', dict(qformer_config=_QFORMER, text_config=_OPT))}


def _build(tower: str) -> 'transformers.PreTrainedModel':
    if tower in MODELS:
        config, extra = MODELS[tower]
        return getattr(transformers, tower)(getattr(transformers, config)(vision_config=_CONFIG, **extra))
    cls, config, extra = TOWERS[tower]
    return getattr(transformers, cls)(getattr(transformers, config)(**_CONFIG, **extra))


def _image_outputs(source: 'transformers.PreTrainedModel', x: torch.Tensor) -> tuple:
    """(tokens, pooled) as transformers computes them for ``x``, through the class's own API."""
    name = type(source).__name__
    if name == 'BlipModel':
        out = source.get_image_features(pixel_values=x, interpolate_pos_encoding=True)
        return out.last_hidden_state, out.pooler_output
    if name == 'BlipForImageTextRetrieval':  # its tokens and image embedding, as its own forward computes them
        seen = {}
        handles = [m.register_forward_hook(lambda module, args, out, key=key: seen.setdefault(key, out))
                   for key, m in (('tokens', source.vision_model), ('embedding', source.vision_proj))]
        try:
            source(input_ids=torch.ones(x.shape[0], 4, dtype=torch.long), pixel_values=x, use_itm_head=False,
                   interpolate_pos_encoding=True)
        finally:
            for handle in handles:
                handle.remove()
        return seen['tokens'].last_hidden_state, seen['embedding']
    # a VLM's image tower: what its Q-Former reads
    out = (source.vision_model if name in MODELS else source)(pixel_values=x, interpolate_pos_encoding=True)
    return out.last_hidden_state, out.pooler_output


def _folder(path: Path, tower: str = 'blip') -> 'transformers.PreTrainedModel':
    """A tiny ``tower`` with every weight moved off its init (the norms' too), saved to ``path``."""
    torch.manual_seed(0)
    model = _build(tower).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(path))
    return model


@pytest.fixture(scope='module', params=list(TOWERS) + [m for m in MODELS if m != 'Blip2VisionModelWithProjection'])
def converted(request, tmp_path_factory):
    """(the source class, the converted folder), converted by the CLI with its verification."""
    root = tmp_path_factory.mktemp(request.param)
    source = _folder(root / 'src', request.param)
    assert main(['convert', str(root / 'src'), str(root / 'out')]) == 0
    return source, root / 'out'


def test_convert_verifies_against_the_class(converted, capsys, tmp_path):
    """The CLI's verification ran the class itself and notes where post_layernorm went."""
    assert main(['convert', str(converted[1].parent / 'src'), str(tmp_path / 'out')]) == 0
    out, err = capsys.readouterr()
    assert f'verification passed vs transformers {type(converted[0]).__name__}.from_pretrained' in out
    assert 'post_layernorm normalises every token' in err


def test_a_class_whose_image_output_is_the_qformers_is_refused(tmp_path, capsys):
    _folder(tmp_path / 'src', 'Blip2VisionModelWithProjection')
    capsys.readouterr()
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and "the Q-Former is not expressed" in err and 'architectures' in err, err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('size', GRIDS)
def test_converted_folder_gives_the_class_tokens_at_three_grids(converted, size, max_delta):
    """Loaded as a user loads it, the folder gives the class's tokens (its table resized by the class's own
    interpolate_pos_encoding where the grid differs) and its pooler_output ([CLS] normed twice)."""
    source, folder = converted
    model = load_like_user(folder)
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        tokens, pooled = _image_outputs(source, x)
        ours = model.forward_features(x)
        max_delta(f'tokens {size} vs {type(source).__name__}', ours, tokens, BOUND)
        max_delta(f'pooled {size} vs its image output', model.forward_head(ours), pooled, BOUND)


def test_reference_at_another_grid_resizes_by_the_class_rule_only(converted, max_delta):
    """At another grid the converter's reference runs the class's own resize ('hf'), giving the converted folder's
    tokens there; a target resized by any other rule is refused (NoReference) naming transformers' rule."""
    _, folder = converted
    src = open_checkpoint(folder.parent / 'src')
    target = src.config.replace(img_size=(24, 24))
    x = torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(3))
    ref = hf_blip_vision_outputs(Check(str(folder.parent / 'src'), 'hf', src.config, target, 'hf'), x)
    assert 'with interpolate_pos_encoding' in ref.name
    with torch.no_grad():
        max_delta('reference tokens (24, 24) vs the converted folder', load_like_user(folder).forward_features(x),
                  ref.features, BOUND)
    with pytest.raises(NoReference, match="transformers'"):
        hf_blip_vision_outputs(Check(str(folder.parent / 'src'), 'hf', src.config, target, 'timm'), x)


def test_config_contradicting_the_tensors_is_refused(tmp_path, capsys):
    """A config.json whose hidden_size the tensors contradict: one ViTVariantsError naming the file, key and reason;
    the CLI prints one error line."""
    _folder(tmp_path / 'src')
    config_path = tmp_path / 'src' / 'config.json'
    config = json.loads(config_path.read_text())
    config['hidden_size'] = 32
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as caught:
        read_into_model(tmp_path / 'src')
    assert caught.value.path.endswith('model.safetensors') and caught.value.key.startswith('embeddings.')
    assert 'shape' in caught.value.reason
    capsys.readouterr()
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and 'Traceback' not in err and caught.value.key in err
