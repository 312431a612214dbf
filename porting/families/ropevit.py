"""RoPE-ViT files: timm's Eva port of naver-ai/rope-vit (``verification/ropevit_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('ropevit', references={'ropevit': lazy('porting.verification.ropevit_ref', 'ropevit_outputs')},
                       resample_rules=('ropevit',))
