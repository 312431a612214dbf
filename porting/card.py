"""Model card (Hub ``README.md``) for a converted ``simple_vit_*`` checkpoint.

The card says what the model is, where its weights came from and how they were checked, and shows
how to load it: ``import timm_vit_variants`` must come first, because plain timm cannot build the family.
"""
from typing import Optional

import timm
from huggingface_hub import ModelCard, ModelCardData

from timm_vit_variants import __version__ as plugin_version
from timm_vit_variants.errors import ViTVariantsError

from .redact import redact

TAGS = ['image-classification', 'timm', 'timm-vit-variants']
# Stands in for the repo id in the usage snippet when the card is written before the id is known;
# ``porting.publish`` fills it in (in the uploaded bytes only) when the folder is pushed.
REPO_PLACEHOLDER = 'ORG/NAME'
VERIFICATION_STATUSES = ('passed', 'failed', 'skipped')
_MAX_LISTED_LABELS = 20
# timm-vit-variants is not published on PyPI: it installs from its source tree.
INSTALL_LINE = ('It is not on PyPI: install it from a checkout of its repository (`pip install -e .` there; '
                "`pip install -e '.[hf]'` adds transformers).")
# How each provenance fact of a source is shown.
_SOURCE_FACTS = (('url', 'Source URL'), ('hf_hub_id', 'Hub repo'), ('revision', 'Hub revision'),
                 ('format', 'Source format'), ('dtype', 'Source dtype'), ('sha256', 'Source sha256'))


def build_model_card(
        *,
        architecture: str,
        model_args: dict,
        num_classes: int,
        repo_id: Optional[str] = None,
        source: Optional[dict] = None,
        conversion_command: Optional[str] = None,
        verification: Optional[dict] = None,
        license: Optional[str] = None,
        base_model: Optional[str] = None,
        datasets: Optional[list] = None,
        label_names: Optional[list] = None,
        assumed: Optional[dict] = None,
) -> ModelCard:
    """Build the card for a converted checkpoint.

    Args:
        architecture: timm model name, e.g. ``'simple_vit_small_patch16_224'``.
        model_args: the kwargs the model is built with (the ``model_args`` of ``config.json``).
        num_classes: classifier width (0 for a headless feature extractor).
        repo_id: Hub repo id used in the usage snippet; ``ORG/NAME`` stands in when unknown.
        source: ``{'name', 'format', 'sha256'}`` of what was converted, ``name`` as ``porting.sources`` labels it
            (Hub id, URL, tag, or a local file's name), plus ``url`` / ``revision`` / ``hf_hub_id`` when known.
        conversion_command: the exact command run; any ``--token`` value is masked.
        verification: ``{'status': 'passed'|'failed'|'skipped', 'reference', 'max_abs_logits',
            'max_abs_features', 'tolerance', 'reason'}``.
        license, base_model, datasets: card metadata, included only when known.
        label_names: class names, one per output, when known.
        assumed: {field: (value, why)} for what the source does not record and was assumed.
    """
    if not architecture:
        raise ViTVariantsError('model card needs an architecture name')
    if label_names is not None and len(label_names) != num_classes:
        raise ViTVariantsError(
            f'model card got {len(label_names)} label names for {num_classes} classes', key='label_names')
    if verification is not None and verification.get('status') not in VERIFICATION_STATUSES:
        raise ViTVariantsError(
            f'verification status must be one of {VERIFICATION_STATUSES}, got {verification.get("status")!r}',
            key='verification')

    data = ModelCardData(
        library_name='timm',
        pipeline_tag='image-classification' if num_classes else 'image-feature-extraction',
        tags=list(TAGS),
        license=license or None,
        base_model=base_model or None,
        datasets=list(datasets) if datasets else None,
    )
    sections = [
        _about(architecture, model_args, num_classes, repo_id, base_model, label_names),
        _usage(repo_id or REPO_PLACEHOLDER, placeholder=repo_id is None),
        _conversion(source, conversion_command),
        _verification(verification),
        *([_assumptions(assumed)] if assumed else []),
        _provenance(base_model, license, datasets),
    ]
    body = '\n\n'.join(sections) + '\n'
    # Built from text rather than ``ModelCard.from_template`` so jinja2 is not needed. Redacted by value
    # (any token this process holds), and undecodable file-name bytes become U+FFFD so the card is UTF-8.
    text = redact(f'---\n{data.to_yaml()}\n---\n\n{body}')
    return ModelCard(text.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace'))


def fill_repo_id(card_text: str, repo_id: str) -> str:
    """Put ``repo_id`` into a card written before the repo id was known (only the usage snippets' uses)."""
    text = card_text.replace(f'hf-hub:{REPO_PLACEHOLDER}', f'hf-hub:{repo_id}')
    text = text.replace(f"'{REPO_PLACEHOLDER}'", f"'{repo_id}'")
    return text.replace(_placeholder_note(), '')


def _placeholder_note() -> str:
    return f'\nReplace `{REPO_PLACEHOLDER}` with the repository this card lives in.\n'


def _about(architecture, model_args, num_classes, repo_id, base_model, label_names) -> str:
    title = repo_id.split('/')[-1] if repo_id else architecture
    lines = [
        f'# Model card for {title}',
        '',
        f'A plain Vision Transformer (`{architecture}`) from the `simple_vit_*` family of the '
        '`timm-vit-variants` timm plugin ("Better plain ViT baselines" layout, '
        'with timm VisionTransformer state-dict names).',
    ]
    if base_model:
        lines += ['', f'Weights converted from `{base_model}`.']
    if (model_args or {}).get('global_pool') == 'map' and num_classes == 0:
        lines += ['', 'This is the image tower of a SigLIP-style image-text model. `model(x)` returns the image '
                      'embedding: the output of the MAP head (attention pooling with a learned probe over the final '
                      'tokens), before the L2 normalisation that the contrastive loss applies. The text tower, and '
                      'the logit scale and bias, are not included, so text-image similarities cannot be computed '
                      'with this model alone.']
    lines += ['', '## Model details', '', f'- **Architecture:** `{architecture}`',
              f'- **Classes:** {num_classes}' + (' (feature extractor, no classifier)' if num_classes == 0 else '')]
    if model_args:
        lines += ['- **Model args:**']
        lines += [f'  - `{k}`: `{v!r}`' for k, v in model_args.items()]
    if label_names:
        shown = ', '.join(str(n) for n in label_names[:_MAX_LISTED_LABELS])
        more = f', ... ({len(label_names)} in all, see `config.json`)' if len(label_names) > _MAX_LISTED_LABELS else ''
        lines += [f'- **Labels:** {shown}{more}']
    return '\n'.join(lines)


def _usage(repo_ref: str, placeholder: bool) -> str:
    snippet = '\n'.join([
        '```python',
        'import timm_vit_variants  # registers simple_vit_* with timm; must come before create_model',
        'import timm',
        'import torch',
        '',
        f"model = timm.create_model('hf-hub:{repo_ref}', pretrained=True).eval()",
        'cfg = timm.data.resolve_data_config({}, model=model)',
        'transform = timm.data.create_transform(**cfg)',
        '',
        '# img: a PIL image',
        'with torch.no_grad():',
        '    logits = model(transform(img).unsqueeze(0))',
        '```',
    ])
    transformers = '\n'.join([
        '```python',
        'import timm_vit_variants  # registers simple_vit_* with timm, which transformers builds the model with',
        'import torch',
        'from transformers import AutoImageProcessor, AutoModelForImageClassification, pipeline',
        '',
        f"classifier = pipeline('image-classification', model='{repo_ref}')",
        'predictions = classifier(img)  # [{\'label\': ..., \'score\': ...}, ...], labels from config.json',
        '',
        f"processor = AutoImageProcessor.from_pretrained('{repo_ref}')",
        f"model = AutoModelForImageClassification.from_pretrained('{repo_ref}').eval()",
        'with torch.no_grad():',
        "    logits = model(**processor(img, return_tensors='pt')).logits",
        '```',
    ])
    text = ('## Usage\n\nInstall the plugin first: plain timm cannot build `simple_vit_*` models. '
            f'{INSTALL_LINE}\n\n' + snippet + '\n\n'
            f"Pin a revision with `hf-hub:{repo_ref}@REVISION` (a branch, tag or commit).\n\n"
            'transformers (5.x) loads the same folder through its timm wrapper, with the same logits:\n\n'
            + transformers + '\n\n'
            "Pin a revision there with `revision='REVISION'`.")
    if placeholder:
        text += '\n' + _placeholder_note().rstrip('\n')
    return text


def _conversion(source: Optional[dict], command: Optional[str]) -> str:
    lines = ['## Conversion', '']
    if source:
        name = source.get('name', 'unknown')
        lines += [f'- **Source:** `{name}`']
        lines += [f'- **{label}:** `{source[key]}`' for key, label in _SOURCE_FACTS
                  if source.get(key) and source[key] != name]
    else:
        lines += ['- **Source:** not recorded']
    if command:
        lines += ['', 'Converted with:', '', '```bash', command, '```']
    return '\n'.join(lines)


def _verification(v: Optional[dict]) -> str:
    head = '## Verification\n\n'
    if v is None:
        return head + 'No numerical verification was recorded for this conversion.'
    status = v['status']
    if status == 'skipped':
        return head + f'Numerical verification was **skipped**: {v.get("reason") or "no reason given"}.'
    ref = v.get('reference') or 'the source implementation'
    but = f', but {"; ".join(v["caveats"])}' if v.get('caveats') and status == 'passed' else ''
    lines = [f'Checked against {ref} on the same inputs: **{status}**{but}.', '']
    for label, key in ((f'max abs diff, {v.get("output") or "logits"}', 'max_abs_logits'),
                       ('max abs diff, features', 'max_abs_features'), ('tolerance', 'tolerance')):
        if v.get(key) is not None:
            lines.append(f'- {label}: {_num(v[key])}')
    if v.get('reason'):
        lines.append(f'- note: {v["reason"]}')
    return head + '\n'.join(lines)


def _assumptions(assumed: dict) -> str:
    lines = ['## Assumed', '', 'The source does not record these; they were assumed:', '']
    lines += [f'- `{name}` = `{value!r}`: {why}' for name, (value, why) in assumed.items()]
    return '\n'.join(lines)


def _provenance(base_model, license, datasets) -> str:
    lines = ['## Provenance', '',
             f'- Converted with timm-vit-variants {plugin_version} on timm {timm.__version__}.',
             f'- Original weights: {f"`{base_model}`" if base_model else "see the source file above"}.',
             f'- License: {license or "not stated; check the original weights"}.']
    if datasets:
        lines.append('- Training data: ' + ', '.join(f'`{d}`' for d in datasets) + '.')
    return '\n'.join(lines)


def _num(x) -> str:
    return f'{x:.3e}' if isinstance(x, float) else str(x)
