"""TIPSv2's porting side: a transformers ``Tipsv2VisionModel`` folder (format ``tipsv2``) is checked by the class
itself (``_tipsv2_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('tipsv2', references={'tipsv2': lazy('porting.families._tipsv2_ref', 'tipsv2_outputs')})
