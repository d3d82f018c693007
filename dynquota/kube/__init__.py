"""kubernetes_asyncio adapters: metadata informers, API clients, own error types (I/O)."""
