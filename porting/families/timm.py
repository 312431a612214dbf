"""timm checkpoints: the timm class the folder or state dict holds (``verification/timm_folder_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('timm', references={'timm': lazy('porting.verification.timm_folder_ref', 'timm_outputs')},
                       resample_rules=('timm',))
