"""The judging service: what sits between the HTTP edge (``reflectrm.api``) and the judge
(``reflectrm.judging``). It knows nothing of HTTP."""
