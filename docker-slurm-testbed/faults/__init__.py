"""The fault tier: faults injected into a real local testbed, each case ending with the same checks.

``hai-slurm selftest faults`` (:mod:`.cli`) and ``tests/faults/`` run the cases of
:mod:`.cases` on a testbed (:mod:`.bed`); every case ends with :func:`.checks.end_checks`: no
job lost, none left held, no checkpoint lost, counters consistent.
"""
