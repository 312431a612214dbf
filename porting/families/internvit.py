"""InternViT's porting side: an OpenGVLab ``InternVisionModel`` folder (format ``internvit``) is checked by timm's
port of the same network (``vit_intern300m_patch14_448``'s ``VisionTransformer``), run by ``_internvit_ref.py``."""
from .registry import PortingFamily, lazy

FAMILY = PortingFamily('internvit', references={'internvit': lazy('porting.families._internvit_ref',
                                                                 'internvit_outputs')})
