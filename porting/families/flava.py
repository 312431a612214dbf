"""FLAVA's porting side: transformers' ``FlavaImageModel`` and ``FlavaModel`` folders are format ``hf``, claimed here
and checked by the class itself (``_flava_ref.py``)."""
from .registry import Claim, PortingFamily, lazy

_REF = 'porting.families._flava_ref'
FAMILY = PortingFamily('flava', claims=(Claim('hf', 271, lazy(_REF, 'is_hf_flava'), lazy(_REF, 'hf_flava_outputs')),))
