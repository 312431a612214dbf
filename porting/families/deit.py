"""DeiT-III files: timm's network with DeiT's own table resize (``verification/deit3_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('deit', references={'deit3': lazy('porting.verification.deit3_ref', 'deit3_outputs')},
                       resample_rules=('deit',))
