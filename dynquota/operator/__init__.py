"""The operator: kopf wiring, the per-namespace reconcile workqueue, overrides, kill switch.

Glue only: the sizing rules live in :mod:`dynquota.policy`, usage counting in
:mod:`dynquota.usage`, API I/O in :mod:`dynquota.kube`. Nothing else in dynquota imports this
package (the CLI starts it).
"""
