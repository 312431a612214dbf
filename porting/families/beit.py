"""BEiT files (unilm, timm's Beit state dicts), timm beit* folders and transformers BEiT / data2vec-vision folders:
timm's Beit and transformers' own classes (``verification/beit_ref.py``)."""
from .registry import Claim, PortingFamily, lazy

_REF = 'porting.verification.beit_ref'
FAMILY = PortingFamily('beit', references={'beit': lazy(_REF, 'beit_outputs')}, claims=(
    Claim('timm', 200, lazy(_REF, 'is_timm_beit'), lazy(_REF, 'beit_outputs')),
    Claim('hf', 200, lazy(_REF, 'is_hf_beit'), lazy(_REF, 'hf_beit_outputs'))))
