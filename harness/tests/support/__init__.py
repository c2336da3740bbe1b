"""The harness's test support: its own doubles and prerequisites, so that its tests need nothing
of the repository's ``tests`` package (they reach the serving package only through
``reflectrm.HARNESS_SEAM``)."""
