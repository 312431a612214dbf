"""DINOv2 files: facebookresearch/dinov2's own network, as timm builds it (``verification/dinov2_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('dinov2', references={'dinov2': lazy('porting.verification.dinov2_ref', 'dinov2_outputs')},
                       resample_rules=('dinov2',))
