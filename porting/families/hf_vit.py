"""transformers folders: the class the folder's ``config.json`` declares (``verification/hf_ref.py``)."""
from .registry import Needs, PortingFamily, lazy

FAMILY = PortingFamily('hf_vit', references={'hf': lazy('porting.verification.hf_ref', 'hf_outputs')},
                       needs={'hf': Needs('hf', 'verifying a transformers source')}, resample_rules=('hf',))
