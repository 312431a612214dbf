"""timm's relative-position ViTs' porting side: a ``VisionTransformerRelPos`` folder or state dict (format
``vit_relpos``) is checked by timm's own class (``_vit_relpos_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('vit_relpos',
                       references={'vit_relpos': lazy('porting.families._vit_relpos_ref', 'relpos_outputs')})
