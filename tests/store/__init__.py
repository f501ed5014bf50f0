"""The Redis store against real redis-servers: claims, fencing, jobs, leases, durability,
Redis modes and faults, and the server's private Redis."""
