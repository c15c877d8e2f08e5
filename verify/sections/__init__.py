"""The rows of ``georecall verify``: constructions checked against their promises (:mod:`.suite`) and the
bound tables with their golden values (:mod:`.bounds_checks`)."""
