"""The cluster as gpuqueue's rows see it: reads of GPU capacity and use from Node rows
(`inventory`), draining a node (`nodes`) and a worker's log through the backend (`logs`).
Following the cluster (inventory in, phases turned into transitions) drives launches, so it
lives with the cycle (`gpuqueue.cycle.cluster_sync`)."""
