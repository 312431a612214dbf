"""DINOv3 files: timm's Eva port of DINOv3; timm sources with rotary positions (DINOv3, RoPE-ViT folders): timm's
Eva; transformers DINOv3 folders: their own class (``verification/dinov3_ref.py``)."""
from .registry import Claim, PortingFamily, lazy

_REF = 'porting.verification.dinov3_ref'
FAMILY = PortingFamily('dinov3', references={'dinov3': lazy(_REF, 'dinov3_outputs')}, claims=(
    Claim('timm', 300, lazy(_REF, 'has_rope'), lazy(_REF, 'timm_eva_outputs')),
    Claim('hf', 400, lazy(_REF, 'is_hf_dinov3'), lazy(_REF, 'hf_dinov3_outputs'))))
