"""What the GPUs were used for: the GPU-hours ledger per attempt and clock hour
(`usage_ledger`) and its reports (`usage_report`), the minute's utilization samples and idle
iron (`utilization`), and each running job's measured GPU activity (`gpu_activity`)."""
