"""Connections and policy: ``Config``, the incremental reconcile, clients, the pool, registries, events.

Never reads or watches a file, prints, or handles signals (SPEC §1): when to reconcile is decided
above it (``mcpvisor.host``), how to reconcile here. Imports no other mcpvisor package.
"""
