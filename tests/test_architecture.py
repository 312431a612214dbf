"""The one-home architecture: input channels adapted the same way from every source, honest architecture
names, a --help that imports neither torch nor timm, and CLI choices that match the package's constants."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import timm
from safetensors.torch import save_file
from timm.models import adapt_input_conv

import timm_vit_variants  # noqa: F401
from porting.hub_folder import save_pretrained_folder
from timm_vit_variants import SimpleViTConfig, architecture_for

from ckpt_fixtures import jax_params, randomize, tiny_timm_vit, write_npz

REPO = Path(__file__).resolve().parents[1]
NAME = 'simple_vit_tiny_patch4_32'
SMALL = dict(embed_dim=32, depth=1, num_heads=2, mlp_dim=64, num_classes=5)
TIMM_SMALL = dict(img_size=32, patch_size=4, embed_dim=32, depth=1, num_heads=2, mlp_ratio=2.0, num_classes=5,
                  act_layer='gelu_tanh', fc_norm=False)
# What each source needs from the registered model to be the same network.
VITJAX = dict(class_token=True, pos_embed='learn', pos_embed_cls_slot=True, global_pool='token')


def _sources(tmp_path):
    """Every way a pretrained file reaches create_model: (model kwargs, create_model extras)."""
    bv = write_npz(tmp_path / 'bv.npz', jax_params(tiny_timm_vit(
        class_token=False, no_embed_class=True, global_pool='avg', **TIMM_SMALL), 'bigvision', with_pos=False))
    vj = write_npz(tmp_path / 'vj.npz', jax_params(tiny_timm_vit(class_token=True, global_pool='token', **TIMM_SMALL),
                                                   'vitjax'))
    ours = randomize(timm.create_model(NAME, **SMALL))
    save_file(ours.state_dict(), str(tmp_path / 'w.safetensors'))
    folder = save_pretrained_folder(ours, tmp_path / 'folder')
    return {
        'bigvision_npz': ({}, dict(pretrained_cfg_overlay=dict(file=str(bv), num_classes=5))),
        'vitjax_npz': (VITJAX, dict(pretrained_cfg_overlay=dict(file=str(vj), num_classes=5))),
        'safetensors': ({}, dict(pretrained_cfg_overlay=dict(file=str(tmp_path / 'w.safetensors'), num_classes=5))),
        'hub_folder_file': ({}, dict(pretrained_cfg_overlay=dict(file=str(folder), num_classes=5))),
        'hub_folder_local_dir': ({}, dict(local_dir=str(folder))),
    }


def _create(extras, in_chans, arch):
    if 'local_dir' in extras:
        return timm.create_model(f'local-dir:{extras["local_dir"]}', pretrained=True, in_chans=in_chans).eval()
    return timm.create_model(NAME, pretrained=True, in_chans=in_chans, **SMALL, **arch, **extras).eval()


@pytest.mark.parametrize('in_chans', [1, 2])
def test_in_chans_from_every_source_equals_adapt_input_conv(tmp_path, in_chans):
    for name, (arch, extras) in _sources(tmp_path).items():
        rgb = _create(extras, 3, arch)
        adapted = _create(extras, in_chans, arch)
        by_hand = timm.create_model(NAME, in_chans=in_chans, **SMALL, **arch).eval()
        state = rgb.state_dict()
        state['patch_embed.proj.weight'] = adapt_input_conv(in_chans, state['patch_embed.proj.weight'])
        by_hand.load_state_dict(state)
        x = torch.randn(2, in_chans, 32, 32, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            assert rgb(torch.randn(1, 3, 32, 32)).abs().max() > 0, name  # the weights really loaded
            torch.testing.assert_close(adapted(x), by_hand(x), rtol=0, atol=1e-6, msg=name)


def test_architecture_names_only_exact_matches():
    assert architecture_for(SimpleViTConfig(embed_dim=192, depth=12, num_heads=3)) == 'simple_vit_tiny'
    assert architecture_for(SimpleViTConfig(embed_dim=384, depth=12, num_heads=6, rep_size=384)) == \
        'simple_vit_small_patch16_224'
    assert architecture_for(SimpleViTConfig(embed_dim=192, depth=6, num_heads=3, img_size=32, patch_size=4)) == NAME
    # A depth no registered model has: the nearest member names the family; model_args carry the depth.
    odd = SimpleViTConfig(embed_dim=192, depth=7, num_heads=3, img_size=32, patch_size=4)
    assert architecture_for(odd) == NAME
    assert architecture_for(SimpleViTConfig(embed_dim=192, depth=7, num_heads=3)) == 'simple_vit_tiny'


def test_non_standard_depth_round_trips_through_config_json(tmp_path):
    model = timm.create_model('simple_vit_tiny', depth=7, embed_dim=32, num_heads=2, num_classes=3)
    folder = save_pretrained_folder(model, tmp_path / 'deep7')
    import json
    config = json.loads((folder / 'config.json').read_text())
    assert config['architecture'] == 'simple_vit_tiny' and config['model_args']['depth'] == 7
    assert 'num_classes' not in config['model_args'] and config['num_classes'] == 3
    loaded = timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert len(loaded.blocks) == 7 and loaded.config == model.config


def test_the_architecture_label_never_fills_a_field(tmp_path):
    """config.json names the nearest registered model, and timm's create_model drops a None argument: a label whose
    row sets a field this model leaves None (DINOv3's LayerScale) would fill it on loading, so it is never chosen."""
    from timm_vit_variants import SimpleVisionTransformer
    # DINOv3's shape without its LayerScale: by every other dimension, the nearest row is a DINOv3 one
    model = SimpleVisionTransformer(embed_dim=32, depth=2, num_heads=2, mlp_dim=128, class_token=True, reg_tokens=4,
                                    global_pool='token', pos_embed='rope', rope_type='dinov3', img_size=224,
                                    patch_size=16, act_layer='gelu', norm_eps=1e-5, grid_mode='crop', num_classes=3)
    folder = save_pretrained_folder(model, tmp_path / 'plain')
    loaded = timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert loaded.config == model.config and not any('.ls1.' in key for key in loaded.state_dict())


@pytest.mark.parametrize('argv', [['--help'], ['--version'], ['convert', '--help'], ['resize', '--help'], ['inspect', '--help'],
                                  ['verify', '--help'], ['export', '--help'], ['push', '--help']])
def test_help_imports_neither_torch_nor_timm(argv):
    code = ('import sys\nfrom porting.cli import main\nrc = main(%r)\n'
            'heavy = sorted(m for m in ("torch", "timm", "numpy", "huggingface_hub", "timm_vit_variants") '
            'if m in sys.modules)\nprint(rc, heavy)\n') % (argv,)
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == '0 []'


def test_cli_choices_match_the_package():
    from porting import export
    from porting.commands import cmd_export, options
    from timm_vit_variants import config
    from timm_vit_variants.checkpoints import FORMATS
    from timm_vit_variants.geometry import RESAMPLE_RULES

    assert set(options.FORMATS) == set(FORMATS)
    assert set(options.RESAMPLE_RULES) == set(config.RESAMPLE_RULE_NAMES) == set(RESAMPLE_RULES)
    assert set(options.ACT_LAYERS) == set(config.ACT_LAYERS)
    assert cmd_export.EXPORT_FORMATS == export.FORMATS and cmd_export.DEFAULT_OPSET == export.DEFAULT_OPSET
    assert cmd_export.ONNX_OPSETS == export.ONNX_OPSETS
    from dataclasses import fields
    from timm_vit_variants.limits import Limits
    assert options.LIMIT_NAMES == tuple(f.name for f in fields(Limits))


# -- the import map -------------------------------------------------------------------------------------

def _project_imports():
    """{module: set of project modules it imports}, counting imports inside functions too (AST, not runtime)."""
    import ast

    modules = {}
    for package in ('timm_vit_variants', 'porting'):
        for path in (REPO / package).rglob('*.py'):
            parts = path.relative_to(REPO).with_suffix('').parts
            name = '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)
            modules[name] = path
    modules['vit_port'] = REPO / 'vit_port.py'  # the public API module, above both packages
    graph = {}
    for name, path in modules.items():
        is_package = path.name == '__init__.py'
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = name.split('.') if is_package else name.split('.')[:-1]
                base = base[:len(base) - (node.level - 1)] if node.level else []
                module = '.'.join(base + ([node.module] if node.module else []))
                found = [module] + [f'{module}.{alias.name}' for alias in node.names]
            else:
                continue
            for target in found:
                while target and target not in modules:
                    target = target.rpartition('.')[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def test_no_import_cycle_among_project_modules():
    graph = _project_imports()
    assert 'timm_vit_variants.vision_transformer' in graph and 'porting.pipeline' in graph
    state, cycles = {}, []

    def visit(node, path):
        state[node] = 'open'
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 'open':
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 'done'

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, '\n'.join(' -> '.join(c) for c in cycles)


def test_data_flows_one_way():
    graph = _project_imports()
    upward = {m: sorted(t for t in targets if t.startswith('porting')) for m, targets in graph.items()
              if m.startswith('timm_vit_variants')}
    assert not any(upward.values()), {m: t for m, t in upward.items() if t}
    assert not [m for m, targets in graph.items() if 'vit_port' in targets]  # nothing imports the API module
    assert graph['vit_port'] == {'porting.api'}
    readers = {m: targets for m, targets in graph.items() if m.startswith('timm_vit_variants.checkpoints')}
    model_modules = {'timm_vit_variants.vision_transformer', 'timm_vit_variants.simple_vit', 'timm_vit_variants'}
    assert not {m: targets & model_modules for m, targets in readers.items() if targets & model_modules}


def test_the_map_names_every_module():
    """docs/architecture.md names every core module of the two packages by its file name; a family's own modules
    (``families/`` on either side, beside its registry) are the family's, which the map describes once."""
    text = (REPO / 'docs' / 'architecture.md').read_text()
    modules = [p for package in ('timm_vit_variants', 'porting') for p in (REPO / package).rglob('*.py')
               if p.name != '__init__.py' and (p.parent.name != 'families' or p.name == 'registry.py')]
    missing = sorted(str(p.relative_to(REPO)) for p in modules if p.name not in text)
    assert not missing, f'docs/architecture.md does not name: {missing}'


# -- the map against the code ---------------------------------------------------------------------------

_FILE_TOKEN = re.compile(r'^[\w./-]+\.(py|json|safetensors|md)$|^[\w/]+/$')
_DOTTED = re.compile(r'^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$')
_NAME = re.compile(r'^[A-Za-z_]\w*$')


def _package_files():
    return [p.relative_to(REPO) for package in ('timm_vit_variants', 'porting') for p in (REPO / package).rglob('*.py')]


def _module_of_file(token):
    """The dotted module a map's file name means: the one file of the two packages whose path ends with it."""
    found = [p for p in _package_files() if str(p) == token or str(p).endswith('/' + token)]
    assert len(found) == 1, f'docs/architecture.md names {token!r}, which is {len(found)} files: {found}'
    parts = found[0].with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def _defined_in(module_name, attr, shown):
    """``module.attr`` is defined in that module (or, for a package, one of its own modules), not imported there
    from elsewhere: the map says where a function lives."""
    import importlib

    home = getattr(getattr(importlib.import_module(module_name), attr), '__module__', None)
    if home is not None:
        assert home == module_name or home.startswith(module_name + '.'), \
            f'docs/architecture.md names {shown!r}, but it is defined in {home}'


def _resolve(name):
    """``module.attr...`` of the map, imported: the module named by its last dotted parts (one module of the two
    packages), then each attribute in turn; AssertionError or AttributeError when the map is stale."""
    import importlib

    modules = {'.'.join(p.with_suffix('').parts[:-1] if p.name == '__init__.py' else p.with_suffix('').parts)
               for p in _package_files()}
    parts = name.split('.')
    for i in range(len(parts), 0, -1):
        head = '.'.join(parts[:i])
        found = sorted(m for m in modules if m == head or m.endswith('.' + head))
        if found:
            assert len(found) == 1, f'docs/architecture.md names {name!r}: {head!r} is each of {found}'
            obj = importlib.import_module(found[0])
            if i < len(parts):
                _defined_in(found[0], parts[i], name)
            for attr in parts[i:]:
                obj = getattr(obj, attr)
            return obj
    raise AssertionError(f'docs/architecture.md names {name!r}, and no module of the two packages is {parts[0]!r}')


def _defined_names():
    """Every name defined or imported at the top of a module of the two packages (AST, nothing imported)."""
    import ast

    names = set()
    for path in _package_files():
        for node in ast.parse((REPO / path).read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split('.')[0] for a in node.names}
    return names


def test_every_name_on_the_map_exists_where_it_says():
    """Each backticked name of docs/architecture.md is checked against the code: a file exists (one of that name),
    ``module.function`` imports and has the attribute, a name listed in a file's parentheses is that module's
    attribute, and any other name is defined in some module. A stale data path fails here."""
    text = (REPO / 'docs' / 'architecture.md').read_text()
    tokens = re.findall(r'`([^`]+)`', text)
    assert any(_DOTTED.match(t) for t in tokens), 'the map names no function'
    for token in tokens:
        if _FILE_TOKEN.match(token):
            if token.endswith('/'):
                assert any(f'/{token}' in f'/{p}' for p in _package_files()), token
            elif token.endswith('.py'):
                assert (REPO / token).is_file() or _module_of_file(token), token
        elif _DOTTED.match(token):
            _resolve(token)
    for file, listed in re.findall(r'`([\w/]+\.py)` \(([^)]*)\)', text):
        module = __import__(_module_of_file(file), fromlist=['_'])
        for name in re.findall(r'`([^`]+)`', listed):
            if _NAME.match(name):
                assert hasattr(module, name), f'docs/architecture.md says {file} holds {name!r}; it does not'
                _defined_in(module.__name__, name, f'{file}: {name}')
    defined = _defined_names() | {'porting', 'timm_vit_variants', 'vit_port'}
    stale = sorted(t for t in tokens if _NAME.match(t) and t not in defined)
    assert not stale, f'docs/architecture.md names what no module defines: {stale}'


def test_the_map_is_one_screen():
    assert len((REPO / 'docs' / 'architecture.md').read_text().split()) <= 600


def test_the_constants_import_without_torch():
    """``porting.constants`` (defaults and choice lists, read by every parser) is a leaf that imports nothing heavy."""
    code = ('import sys\nimport porting.constants\n'
            'print(sorted(m for m in ("torch", "timm", "numpy", "timm_vit_variants") if m in sys.modules))\n')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == '[]'
