"""dynquota: a ResourceQuota per namespace, sized from what the namespace really uses."""

__version__ = "0.1.0"
