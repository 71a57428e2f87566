"""``python -m solver.cli``: the ``solver`` command without the installed script (the tests
run the bot as a child process this way)."""

from solver.cli import main

raise SystemExit(main())
