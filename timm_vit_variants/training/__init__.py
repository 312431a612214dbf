"""Training the ``simple_vit_*`` family, kept apart from the model package.

``run``: run any timm script (``train.py``, ``validate.py``, ``benchmark.py``, ...) with the plugin
loaded (console script ``vit-variants-run``). ``trainer``: a small data-parallel trainer built from
timm's components that also runs several processes on CPU (console script ``vit-variants-train-ddp``).
Nothing here is imported by ``import timm_vit_variants``.
"""
