"""The evaluation harness: benchmark accuracy and positional consistency for any checkpoint.

``benchmarks`` loads pairs (local files or Hugging Face copies), ``runner`` judges them through the
same ``Judge`` the service uses (in-process or over HTTP) into an append-only JSONL file,
``scoring`` holds each benchmark's official metric, ``report`` turns a results file into the
JSON, Markdown and PNG report, and ``cli`` is the ``reflectrm eval`` command.
"""
