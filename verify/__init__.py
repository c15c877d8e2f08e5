"""The harness: :mod:`.checking` (the exhaustive checker, its evaluation paths, certification for every task,
and :mod:`.checking.run`: build a construction on a task and check every query) and :mod:`.sections` (the
rows of ``georecall verify``, which the command line finds through their entry point). The checker sits below
the trainer (:mod:`georecall.training` confirms a trained model with it) and the rows above the experiments
(:mod:`georecall.experiments`). Where everything else lives, and the one stack the imports follow:
CONTRIBUTING.md, "Where things go"."""
