"""big_vision and vit_jax archives: timm's network loading the ``.npz`` (``verification/npz_ref.py``), at a new
geometry big_vision's own resizes (``verification/target.py``)."""
from .registry import PortingFamily, TableRule, lazy

_NPZ = lazy('porting.verification.npz_ref', 'npz_outputs')
FAMILY = PortingFamily(
    'bigvision', references={'bigvision': _NPZ, 'vitjax': _NPZ}, resample_rules=('bigvision', 'flexi'),
    table_rules={'bigvision': TableRule("big_vision's scipy zoom", lazy('porting.verification.npz_ref', 'zoom_table')),
                 'flexi': TableRule("FlexiViT's jax.image.resize", lazy('porting.verification.npz_ref', 'jax_table'))})
