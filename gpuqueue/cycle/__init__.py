"""The admission cycle: load a snapshot from PostgreSQL (`snapshot`), plan it with the engine,
store the decisions (`run`), then start the admitted jobs on the cluster (`launch`). The cluster
sync (`cluster_sync`) follows what the cluster did: nodes in, workload phases turned into job
transitions, and the admitted jobs whose workloads are missing launched again. Both sit above
`gpuqueue.services` and call it; services never call the cycle."""
