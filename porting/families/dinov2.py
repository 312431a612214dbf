"""DINOv2 files: facebookresearch/dinov2's own network, as timm builds it; transformers DINOv2 folders: their own
class (``verification/dinov2_ref.py``)."""
from .registry import Claim, PortingFamily, lazy

_REF = 'porting.verification.dinov2_ref'
FAMILY = PortingFamily('dinov2', references={'dinov2': lazy(_REF, 'dinov2_outputs')}, resample_rules=('dinov2',),
                       claims=(Claim('hf', 300, lazy(_REF, 'is_hf_dinov2'), lazy(_REF, 'hf_dinov2_outputs')),))
