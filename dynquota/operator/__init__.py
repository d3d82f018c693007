"""The operator: kopf wiring, per-namespace reconcile, overrides, kill switch.

Glue only: the sizing rules live in :mod:`dynquota.policy`, usage counting in
:mod:`dynquota.usage`, API I/O in :mod:`dynquota.kube` (on :mod:`dynquota._k8s`, which also
holds the workqueue). Only the CLI and the test bed import it (``make lint`` checks).
"""
