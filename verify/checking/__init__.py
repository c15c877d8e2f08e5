"""The checker: every query of a model decided exactly (:mod:`.check`), with the alternative evaluation paths
it may take (:mod:`.decoders`: hypercube decoding; :mod:`.additive`: the tables path) and the precision scan
(:mod:`.precision`)."""
