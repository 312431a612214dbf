"""AIMv2 files (Apple's, transformers' folders, timm's ``aimv2_*``): transformers' ``Aimv2VisionModel`` for its
folders, timm's ``aimv2_*`` entry and loader for the others (``aimv2_ref.aimv2_outputs``, which asks for
transformers only when it runs a folder)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('aimv2', references={'aimv2': lazy('porting.families.aimv2_ref', 'aimv2_outputs')})
