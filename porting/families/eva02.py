"""EVA-02 files: BAAI's network as timm builds it (``verification/eva02_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('eva02', references={'eva02': lazy('porting.verification.eva02_ref', 'eva02_outputs')})
