"""`python -m deltaguard`: the `deltaguard` command."""

from deltaguard.cli import main

raise SystemExit(main())
