"""EVA-CLIP's porting side: an EVA-CLIP ``*.pt`` file (format ``evaclip``) is checked by timm's ``Eva`` built as its
``eva02_*_clip_*`` / ``eva_giant_*_clip_*`` entries build it, loaded through timm's own ``checkpoint_filter_fn``
(``_evaclip_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('evaclip', references={'evaclip': lazy('porting.families._evaclip_ref', 'evaclip_outputs')})
