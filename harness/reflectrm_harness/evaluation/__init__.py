"""The evaluation harness: benchmark accuracy and positional consistency for any checkpoint, and
group rewards per design.

A shared core and two workloads that never import each other. The core: ``names`` lists the
benchmarks, ``benchmarks`` loads their pairs (local files through the harness's ``datasets``,
or Hugging Face copies converted by ``hub``), ``records`` is the append-only JSONL results file,
``scoring`` holds every metric (each benchmark's official one, the group metrics) and every
bootstrap, ``reporting`` the number formatting, chart scaffolding and file writing of both
reports, and ``common`` the run loop, the engine-work counter, the service client's pieces and
the user's errors. The workloads: ``pairwise`` (benchmark pairs through the same ``Judge`` the
service uses) and ``groups`` (group designs through the service's own app, in process or over
HTTP). ``cli`` is the ``reflectrm eval`` command: its options, and which workload runs them.
"""
