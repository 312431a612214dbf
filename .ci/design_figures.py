"""The design figures of the family-unit layout, counted from a checkout (run from its root, with the package
importable): which code files name three or more model families, which core files name any, which modules are over 450 lines, how many
``hints.get`` lookups remain and how many top-level fields ``SimpleViTConfig`` has.

A file "names" a family when its identifiers or string literals (docstrings and comments excluded) match the
family's pattern below. ``timm_vit_variants/families/`` and ``porting/families/`` hold the families' own modules,
which may name their relatives (DINO's names DINOv2, DINOv3 and RoPE-ViT): they are not counted.

    python .ci/design_figures.py
"""
import ast
import dataclasses
import io
import pathlib
import re
import sys
import tokenize
from typing import List, Set

FAMILIES = {'siglip': r'siglip', 'clip': r'(?<!sig)clip|openai', 'dinov2': r'dinov2', 'dinov3': r'dinov3',
            'deit': r'deit', 'eva': r'(?<![a-z])eva(?!l)', 'beit': r'beit|data2vec', 'ropevit': r'rope_?vit',
            'flexivit': r'flexi', 'naflex': r'naflex', 'aimv2': r'aimv2', 'ijepa': r'i_?jepa'}
LONG = 450
# The core the issue names (config, model, positions, geometry, dispatch, pipeline): these should name no family.
CORE = ('config.py', 'choices.py', 'parts.py', 'part_base.py', 'vision_transformer.py', 'positions.py',
        'position_parts.py', 'geometry.py', 'checkpoints/detect.py', 'checkpoints/routes.py', 'model_table.py',
        'simple_vit.py')


def _docstrings(tree: ast.AST) -> Set[str]:
    return {ast.get_docstring(node, clean=False) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and ast.get_docstring(node) is not None}


def code_words(source: str) -> str:
    """The identifiers and string literals of ``source``, lower-cased, docstrings left out."""
    docs = _docstrings(ast.parse(source))
    words: List[str] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME:
            words.append(token.string.lower())
        elif token.type == tokenize.STRING:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):  # f-strings: their text as written
                value = token.string
            if value not in docs:
                words.append(str(value).lower())
    return ' '.join(words)


def main() -> None:
    root = pathlib.Path('.')
    files = sorted(p for d in ('timm_vit_variants', 'porting') for p in (root / d).rglob('*.py'))
    many, long = [], []
    for path in files:
        source = path.read_text()
        words = code_words(source)
        named = sorted(f for f, pattern in FAMILIES.items() if re.search(pattern, words))
        if len(named) >= 3 and 'families' not in path.parts:
            many.append((str(path), named))
        lines = source.count('\n')
        if lines > LONG:
            long.append((str(path), lines))
    print(f'code files naming 3+ families: {len(many)}')
    for path, named in many:
        print(f'   {path}: {len(named)} {named}')
    core = {}
    for name in CORE:
        words = code_words((root / 'timm_vit_variants' / name).read_text())
        core[name] = sorted(f for f, pattern in FAMILIES.items() if re.search(pattern, words))
    print(f'core files naming a family: {sum(bool(v) for v in core.values())} of {len(CORE)} '
          f'{ {k: v for k, v in core.items() if v} }')
    print(f'modules over {LONG} lines: {len(long)} {long}')
    hints = sum(len(re.findall(r'hints\.get\(', p.read_text())) for p in files)
    print(f'hints.get: {hints}')
    sys.path.insert(0, '.')
    from timm_vit_variants.config import SimpleViTConfig

    print(f'SimpleViTConfig top-level fields: {len(dataclasses.fields(SimpleViTConfig))}')


if __name__ == '__main__':
    main()
