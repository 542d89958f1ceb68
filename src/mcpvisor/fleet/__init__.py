"""Replicas of the gateway that share decisions and settings through Redis (``--fleet URL``).

- :mod:`~mcpvisor.fleet.store`: the keys, the Lua scripts (one atomic script per change: write, bump
  the revision, append to the change log) and the blocking operations of management commands;
- :mod:`~mcpvisor.fleet.approvals`: the approval store read from an in-memory mirror, failing closed
  (stale mirror or rewound store: every gated server held);
- :mod:`~mcpvisor.fleet.settings`: settings snapshots, published raw by one replica and applied by all;
- :mod:`~mcpvisor.fleet.replica`: this process as a replica (log follower, freshness watchdog,
  registry heartbeat, publisher lease);
- :mod:`~mcpvisor.fleet.routing`: ``/readyz`` and handshake sessions named, and forwarded to, their owner.

Imports point down: the commands use the fleet, the fleet uses the host and the core; the gateway
never imports it (it takes the router as an ASGI layer). Only this package talks to Redis.
"""
