"""The admission cycle: load a snapshot from PostgreSQL (`snapshot`), plan it with the engine,
store the decisions (`run`), then start the admitted jobs on the cluster (`launch`)."""
