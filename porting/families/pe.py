"""Perception Encoder's porting side: a timm ``vit_pe_*`` folder (format ``timm``, read by the PE family) is run by
timm's own ``Eva`` (``_pe_ref.py``), claimed before the other rotary timm sources."""
from .registry import Claim, PortingFamily, lazy

_REF = 'porting.families._pe_ref'
FAMILY = PortingFamily('pe', claims=(Claim('timm', 250, lazy(_REF, 'is_pe'), lazy(_REF, 'pe_outputs')),))
