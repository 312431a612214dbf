"""DeiT-III files: timm's network with DeiT's own table resize; transformers DeiT folders: the class the folder
declares (``verification/deit3_ref.py``)."""
from .registry import Claim, PortingFamily, TableRule, lazy

_REF = 'porting.verification.deit3_ref'
FAMILY = PortingFamily(
    'deit', references={'deit3': lazy(_REF, 'deit3_outputs')}, resample_rules=('deit',),
    claims=(Claim('hf', 700, lazy(_REF, 'is_hf_deit'), lazy(_REF, 'hf_deit_outputs')),),
    table_rules={'deit': TableRule("DeiT's main.py table resize", lazy(_REF, 'deit_resize'))})
