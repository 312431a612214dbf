"""SAM's porting side: a timm folder of a ``samvit_*`` architecture (format ``sam``) is checked by timm's own
``VisionTransformerSAM`` (``_sam_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('sam', references={'sam': lazy('porting.families._sam_ref', 'sam_outputs')})
