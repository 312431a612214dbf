"""Weight porting for the ``simple_vit_*`` family: convert, resize, verify, inspect and save Hub folders.

Entry points: the ``vit-port`` CLI (``porting.cli``), ``porting.convert.convert`` and
``porting.writer.save_pretrained_folder``. This package imports ``timm_vit_variants``; never the reverse.
"""
