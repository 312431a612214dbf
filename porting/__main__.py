"""``python -m porting``: the ``vit-port`` command line."""
import sys

from .cli import main

sys.exit(main())
