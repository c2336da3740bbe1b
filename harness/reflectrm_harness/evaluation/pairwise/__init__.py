"""The pairwise workload: benchmark pairs (or a user's own) judged in both orders and every mode.

``command`` resolves the options and runs the judging, ``runner`` plans the units and judges
them (in-process or over HTTP), ``report`` scores a results file into the paper's tables.
"""
