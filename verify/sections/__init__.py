"""The rows of ``georecall verify``: constructions checked against their promises (:mod:`.suite`, whose
:func:`~.suite.verify_reports` runs every row), certification for every task with its negative controls
(:mod:`.certified`) and the bound tables with their golden values (:mod:`.bounds_checks`).

The top of ``verify/`` beside the command line: nothing imports this package but its entry point
(``georecall.verify_rows`` in pyproject.toml), through which ``georecall verify`` finds its rows."""
