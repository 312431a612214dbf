"""OpenCLIP and OpenAI CLIP files: open_clip's own image tower (``verification/open_clip_ref.py``); transformers
CLIP-layout folders: the class the folder declares (``verification/hf_clip_ref.py``)."""
from .registry import Claim, Needs, PortingFamily, lazy

_OPEN_CLIP = lazy('porting.verification.open_clip_ref', 'open_clip_outputs')
_NEEDS = Needs('clip', 'verifying an OpenCLIP or OpenAI CLIP source')
_HF = 'porting.verification.hf_clip_ref'
FAMILY = PortingFamily('clip', references={'openclip': _OPEN_CLIP, 'openai': _OPEN_CLIP},
                       needs={'openclip': _NEEDS, 'openai': _NEEDS}, resample_rules=('openclip',),
                       claims=(Claim('hf', 600, lazy(_HF, 'is_hf_clip'), lazy(_HF, 'hf_clip_outputs')),))
