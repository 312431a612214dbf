"""DINOv3 files: timm's Eva port of DINOv3 (``verification/dinov3_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('dinov3', references={'dinov3': lazy('porting.verification.dinov3_ref', 'dinov3_outputs')})
