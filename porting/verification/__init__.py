"""Numerical verification: the source in its own reference implementation against our model.

One question, one value: a ``Check`` (``result``) holds the source file, its format, the source's
``SimpleViTConfig`` and, for a check at a new geometry, the target's and the resize rule. ``compare``
runs the reference (``references.reference_outputs``, which picks it from ``references.REFERENCES`` by
format), frees it, runs ours, and ``compare.deltas`` measures every output both produced (final-norm
tokens, logits or pooled embedding, pre-logits, the NaFlex batch of ``naflex_ref.MIXED_GRIDS``); the
``Verification`` records each delta. ``conversion`` asks the questions of a conversion
(``verify_source``) and of ``vit-port verify`` (``verify_folder``).

References, never our own key mapping, one module each:
  * ``timm_ref``: timm sources: timm builds the network and loads the file itself (``local-dir:`` for a
    timm Hub folder, ``load_state_dict`` into an equivalent ``VisionTransformer`` or ``NaFlexVit`` for a
    single file);
  * ``npz_ref``: big_vision / FlexiViT / vit_jax ``.npz``: an equivalent timm ``VisionTransformer`` loaded
    with timm's own ``load_pretrained(npz)`` (a NaFlex tower: timm's ``NaFlexVit``, ``naflex_ref``); a
    sin-cos table comes from an independent numpy port of big_vision's ``posemb_sincos_2d`` (``rules``),
    appended in memory to the archive (``archive``);
  * ``hf_ref``: transformers folders (ViT, SigLIP and SigLIP 2, CLIP, DINOv2) ``.from_pretrained``;
  * ``dinov2_ref``: a DINOv2 hub ``.pth`` through timm's DINOv2 loading, with DINOv2's own table resize;
  * ``open_clip_ref``: OpenCLIP folders and OpenAI ``.pt`` through open_clip.
timm has no pre-logits (``rep_size``) layer, so that layer is an explicit numpy ``head(tanh(W x + b))``
built from the source's own arrays. ``target`` rebuilds a timm reference at a target geometry with the
source framework's own resize rules (``rules``, numpy); ``streamed`` bounds the memory a check holds.
"""
from .compare import compare, deltas, verification_inputs
from .networks import release_as_it_runs
from .references import REFERENCES, reference_outputs
from .result import DEFAULT_TOL, Check, NoReference, Outputs, ReferenceFailed, Verification
from .rules import bigvision_posemb_sincos_2d

__all__ = ['DEFAULT_TOL', 'Check', 'Verification', 'Outputs', 'NoReference', 'ReferenceFailed', 'compare', 'deltas',
           'verification_inputs', 'REFERENCES', 'reference_outputs', 'release_as_it_runs', 'bigvision_posemb_sincos_2d']
