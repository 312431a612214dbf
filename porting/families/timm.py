"""timm checkpoints: the timm class the folder or state dict holds (``verification/timm_folder_ref.py``)."""
from .registry import PortingFamily, TableRule, lazy

FAMILY = PortingFamily(
    'timm', references={'timm': lazy('porting.verification.timm_folder_ref', 'timm_outputs')},
    resample_rules=('timm',),
    table_rules={'timm': TableRule("timm's resample_abs_pos_embed", lazy('porting.verification.timm_ref',
                                                                         'timm_table'))})
