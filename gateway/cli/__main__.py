"""`python -m gateway.cli`: the `triad` command."""

from gateway.cli import main

raise SystemExit(main())
