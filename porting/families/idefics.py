"""Idefics2's, Idefics3's and SmolVLM's image towers: their transformers folders are format ``hf``, claimed here and
checked by the folder's own class (``_idefics_ref.py``)."""
from .registry import Claim, PortingFamily, lazy

_REF = 'porting.families._idefics_ref'
FAMILY = PortingFamily('idefics', claims=(Claim('hf', 280, lazy(_REF, 'is_hf_idefics_vision'),
                                                lazy(_REF, 'hf_idefics_vision_outputs')),))
