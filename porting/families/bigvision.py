"""big_vision and vit_jax archives: timm's network loading the ``.npz`` (``verification/npz_ref.py``), at a new
geometry big_vision's own resizes (``verification/target.py``)."""
from .registry import PortingFamily, lazy

_NPZ = lazy('porting.verification.npz_ref', 'npz_outputs')
FAMILY = PortingFamily('bigvision', references={'bigvision': _NPZ, 'vitjax': _NPZ},
                       resample_rules=('bigvision', 'flexi'))
