"""reflectrm: a judging service for generative reward models (ReflectRM).

``HARNESS_SEAM`` is the serving package's contract with the harness beside it
(``reflectrm-harness``: ``reflectrm eval``, ``reflectrm train``): the modules and packages the
harness may import. What it needs of the rest it gets through the app (``create_app`` behind
``httpx.ASGITransport``) or over HTTP, as a client does; harness/tests/unit/test_seam.py fails on
an import outside it.
"""

HARNESS_SEAM = (
    "reflectrm.judging",  # the method: prompts, parsing, the judge, modes, groups
    "reflectrm.engines",  # the engine interface and vLLM behind it
    "reflectrm.checkpoints",  # the shipped judges and the base models, prepared
    "reflectrm.settings",
    "reflectrm.app",  # create_app: the service in process
    "reflectrm.client",  # the service over HTTP
    "reflectrm.retry",
    "reflectrm.hardware",
    "reflectrm.interrupts",
    "reflectrm.aio",
)
