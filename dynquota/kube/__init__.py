"""kubernetes_asyncio adapters of the operator: the managed quota, namespaces and policies,
Events, the Lease elector, metadata informers, the API client (I/O).

They sit on :mod:`dynquota._k8s` (requests, errors, timeouts, pagination, the reflector).
"""
