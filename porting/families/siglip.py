"""SigLIP and SigLIP 2 transformers folders: the class the folder declares (``verification/siglip_ref.py``). Their
other sources are big_vision archives (the bigvision family's)."""
from .registry import Claim, PortingFamily, lazy

_REF = 'porting.verification.siglip_ref'
FAMILY = PortingFamily('siglip', claims=(
    Claim('hf', 100, lazy(_REF, 'is_hf_siglip2'), lazy(_REF, 'hf_siglip2_outputs')),
    Claim('hf', 500, lazy(_REF, 'is_hf_siglip'), lazy(_REF, 'hf_siglip_outputs'))))
