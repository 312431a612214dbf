"""timm's Qwen3 vision towers (``qwen3_vit_*`` folders, format ``qwen3_vit``): checked by timm's own model built from
the folder (``_qwen3_vit_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('qwen3_vit', references={'qwen3_vit': lazy('porting.families._qwen3_vit_ref',
                                                                  'qwen3_vit_outputs')})
