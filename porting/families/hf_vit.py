"""transformers folders: the ViT-layout class the folder's ``config.json`` declares (``verification/hf_ref.py``);
timm folders transformers' ``TimmWrapperModel`` saved: that class."""
from .registry import Claim, Needs, PortingFamily, TableRule, lazy

_REF = 'porting.verification.hf_ref'
FAMILY = PortingFamily(
    'hf_vit', references={'hf': lazy(_REF, 'hf_outputs')}, needs={'hf': Needs('hf', 'verifying a transformers source')},
    resample_rules=('hf',), claims=(Claim('timm', 100, lazy(_REF, 'is_timm_wrapper'),
                                          lazy(_REF, 'timm_wrapper_outputs')),),
    table_rules={'hf': TableRule("transformers' interpolate_pos_encoding")})
