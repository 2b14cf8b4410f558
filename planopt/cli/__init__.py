"""The `planopt` command line: simulate, solve, show, methods, demo, experiment.

One module per command (`simulate`, `solve`, `show`, `methods`, `demo`,
`experiment`), each with `register(command)` (its arguments) and `run(args)`;
the argument types and loaders in `args`; what every command prints with in
`common`; the parser and the error handling in `main`. `planopt.cli:main` is
the console script and `python -m planopt`.
"""

from planopt.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
