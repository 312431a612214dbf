"""``vit-port`` subcommands; each module exposes ``add_parser(subparsers)`` and listed in ``porting.cli.COMMANDS``."""
