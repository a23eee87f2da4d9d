"""Running the service: the one-machine launcher, the embedded PostgreSQL and Redis, health,
and Prometheus metrics."""
