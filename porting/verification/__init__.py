"""Numerical verification: the source in its own reference implementation against our model.

References, never our own key mapping, one module each:
  * ``timm_ref``: timm sources: timm builds the network and loads the file itself (``local-dir:`` for a
    timm Hub folder, ``load_state_dict`` into an equivalent ``VisionTransformer`` for a single file);
  * ``npz_ref``: big_vision / FlexiViT / vit_jax ``.npz``: an equivalent timm ``VisionTransformer`` loaded
    with timm's own ``load_pretrained(npz)``; a sin-cos table comes from an independent numpy port of
    big_vision's ``posemb_sincos_2d`` (``rules``), appended in memory to the archive (``archive``);
  * ``hf_ref``: transformers folders: ``ViTForImageClassification`` / ``ViTModel`` ``.from_pretrained``.
timm has no pre-logits (``rep_size``) layer, so that layer is an explicit numpy ``head(tanh(W x + b))``
built from the source's own arrays. ``target`` rebuilds a timm reference at a target geometry with the
source framework's own resize rules (``rules``, numpy); ``compare`` runs both networks on the same inputs.
"""
from .compare import compare, deltas, verification_inputs
from .references import REFERENCES, reference_outputs, release_as_it_runs
from .result import DEFAULT_TOL, Check, NoReference, Outputs, ReferenceFailed, Verification
from .rules import bigvision_posemb_sincos_2d

__all__ = ['DEFAULT_TOL', 'Check', 'Verification', 'Outputs', 'NoReference', 'ReferenceFailed', 'compare', 'deltas',
           'verification_inputs', 'REFERENCES', 'reference_outputs', 'release_as_it_runs', 'bigvision_posemb_sincos_2d']
