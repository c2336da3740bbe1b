"""The group workload (``--groups``): group designs scored on group-shaped data.

``command`` resolves the options and runs the judging, ``data`` reads group files, ``runner``
judges the pool (or serves each design) in-process or over HTTP, ``report`` scores the records.
"""
