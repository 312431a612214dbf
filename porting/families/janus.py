"""Janus's porting side: a transformers ``JanusVisionModel`` folder (format ``janus``) is checked by the class itself,
run by transformers (``_janus_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('janus', references={'janus': lazy('porting.families._janus_ref', 'janus_outputs')})
