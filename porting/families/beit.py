"""BEiT files (unilm, timm's Beit state dicts): timm's Beit (``verification/beit_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('beit', references={'beit': lazy('porting.verification.beit_ref', 'beit_outputs')})
