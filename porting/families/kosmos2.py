"""Kosmos-2's porting side: a transformers Kosmos-2 folder (format ``kosmos2``: ``Kosmos2Model`` or
``Kosmos2ForConditionalGeneration``) is checked by its own vision model, run by transformers (``_kosmos2_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('kosmos2', references={'kosmos2': lazy('porting.families._kosmos2_ref', 'kosmos2_outputs')})
