"""InternVL's porting side: a transformers ``InternVLVisionModel`` folder (format ``internvl``) is checked by the
class itself, run by transformers (``_internvl_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('internvl', references={'internvl': lazy('porting.families._internvl_ref', 'internvl_outputs')})
