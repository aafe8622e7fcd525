"""The backends: the idempotency guard, the notifications and the rate limiter on Redis,
their in-memory twins, and ``MemoryStore`` (the store contract in memory)."""
