"""Usage tracking: quota counting semantics, per-namespace tallies, peak windows (Pure).

No I/O and no clock: ``now`` is passed in as seconds since the epoch (float). The metadata
informers in :mod:`dynquota.kube.informer` feed these structures.
"""

from dynquota.usage.counting import (
    CONFIGMAPS,
    INDEFINITE,
    POD_FIELD_SELECTOR,
    PODS,
    TERMINAL_POD_PHASES,
    TRACKED_RESOURCES,
    charge,
    configmap_expiry,
    parse_time,
    pod_counts,
    pod_expiry,
)
from dynquota.usage.peak import DEFAULT_MAX_SAMPLES, PeakWindow, PeakWindows
from dynquota.usage.tally import ADDED, DELETED, MODIFIED, Entry, ResourceTally

__all__ = [
    "ADDED",
    "CONFIGMAPS",
    "DEFAULT_MAX_SAMPLES",
    "DELETED",
    "INDEFINITE",
    "MODIFIED",
    "PODS",
    "POD_FIELD_SELECTOR",
    "TERMINAL_POD_PHASES",
    "TRACKED_RESOURCES",
    "Entry",
    "PeakWindow",
    "PeakWindows",
    "ResourceTally",
    "charge",
    "configmap_expiry",
    "parse_time",
    "pod_counts",
    "pod_expiry",
]
