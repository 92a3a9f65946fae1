"""`python -m traceinsight` is the same as the `traceinsight` command."""

from traceinsight.cli import main

raise SystemExit(main())
