"""Pixio's porting side: a transformers ``PixioModel`` folder (format ``pixio``) is checked by the class itself
(``_pixio_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('pixio', references={'pixio': lazy('porting.families._pixio_ref', 'pixio_outputs')})
