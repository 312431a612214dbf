"""``python -m porting``: the ``vit-port`` command line."""
import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C before the CLI's own handler exists: the same quiet exit
    sys.exit(130)

sys.exit(main())
