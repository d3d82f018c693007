"""The operator: parts that own their state (the cluster view, the write gate, the deleter,
the kill switch, the reporter, the status writers, the budget tasks, the reconciler), wired by
:mod:`dynquota.operator.assembly`; kopf wiring in :mod:`dynquota.operator.runtime`; ``dynquota
plan``'s decisions on the same road.

Glue only: the sizing rules live in :mod:`dynquota.policy`, usage counting in
:mod:`dynquota.usage`, API I/O in :mod:`dynquota.kube` (on :mod:`dynquota._k8s`, which also
holds the workqueue). Only the CLI and the test bed import it (``make lint`` checks).
"""
