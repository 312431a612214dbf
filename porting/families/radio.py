"""RADIO's porting side: a RADIO ``model.safetensors`` (format ``radio``) is checked by timm's ``VisionTransformer`` as
its ``vit_*_radio_v3`` entries build it, loaded through timm's own ``checkpoint_filter_fn`` (``_radio_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('radio', references={'radio': lazy('porting.families._radio_ref', 'radio_outputs')})
