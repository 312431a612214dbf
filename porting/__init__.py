"""Weight porting for the ``simple_vit_*`` family: convert, resize, verify, inspect, push and save Hub folders.

Entry points: the ``vit-port`` CLI (``porting.cli``), ``porting.pipeline.convert`` and
``porting.hub_folder.save_pretrained_folder`` / ``load_folder``. This package imports
``timm_vit_variants``, never the reverse, and imports nothing heavy itself (``vit-port --help`` is instant).
"""
