"""`python -m planopt`: the same command line as the `planopt` script."""

from planopt.cli import main

raise SystemExit(main())
