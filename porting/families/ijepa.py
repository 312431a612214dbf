"""I-JEPA's porting side: a facebookresearch/ijepa ``.pth.tar`` (format ``ijepa``) is checked by timm's own reading of
it (``_ijepa_ref.py``: timm's ``checkpoint_filter_fn``, which resizes the table as it loads); transformers' I-JEPA
folders are format ``hf``, checked by the transformers reference."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('ijepa', references={'ijepa': lazy('porting.families._ijepa_ref', 'ijepa_outputs')})
