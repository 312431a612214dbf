"""MAE's porting side: a transformers ViTMAE folder (format ``vit_mae``) is checked by the class it declares, run by
transformers with nothing masked and the patch order kept (``_vit_mae_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('vit_mae', references={'vit_mae': lazy('porting.families._vit_mae_ref', 'vit_mae_outputs')})
