"""Phi-4-multimodal's porting side: a transformers ``Phi4MultimodalVisionModel`` folder (format ``phi4mm``) is checked
by the class itself, run by transformers (``_phi4mm_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('phi4mm', references={'phi4mm': lazy('porting.families._phi4mm_ref', 'phi4mm_outputs')})
