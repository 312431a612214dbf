"""``vit-port`` commands: each ``cmd_*`` module has ``add_parser(subparsers)`` and ``run(args) -> int``."""
