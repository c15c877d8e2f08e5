"""The checker: every query of a model decided exactly (:mod:`.check`), its report and verdict against a
promise (:mod:`.report`), with the alternative evaluation paths it may take (:mod:`.decoders`: hypercube
decoding; :mod:`.additive`: the tables path), quantization (:mod:`.precision`), certification for every task
(:mod:`.certify`), and the one home of "check a model" (:mod:`.run`: build a registered construction on a task
and check every query), which everything above imports from here. The bottom layer of ``verify/``: it imports
nothing from the other subpackages."""
