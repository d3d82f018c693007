"""dynquota: a ResourceQuota per namespace, sized from what the namespace really uses."""

__version__ = "0.2.0"
