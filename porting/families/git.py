"""GIT's porting side: a transformers GIT folder (format ``git``: ``GitVisionModel``, or the image encoder of
``GitModel`` / ``GitForCausalLM``) is checked by the class the folder declares, run by transformers (``_git_ref.py``)."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('git', references={'git': lazy('porting.families._git_ref', 'git_outputs')})
