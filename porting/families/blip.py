"""BLIP's porting side: transformers' ``BlipVisionModel`` folders are format ``hf``, claimed here and checked by the
class itself (``_blip_ref.py``)."""
from .registry import Claim, PortingFamily, lazy

_REF = 'porting.families._blip_ref'
FAMILY = PortingFamily('blip', claims=(Claim('hf', 270, lazy(_REF, 'is_hf_blip_vision'),
                                             lazy(_REF, 'hf_blip_vision_outputs')),))
