"""The evaluation harness: benchmark accuracy and positional consistency for any checkpoint.

``names`` lists the benchmarks, ``benchmarks`` loads their pairs (local files through
``reflectrm.pairs``, or Hugging Face copies converted by ``hub``), ``runner`` judges them through
the same ``Judge`` the service uses (in-process or over HTTP) into an append-only JSONL file
(``records``), ``scoring`` holds each benchmark's official metric, ``report`` turns a results file
into the JSON, Markdown and PNG report, and ``cli`` is the ``reflectrm eval`` command.
"""
