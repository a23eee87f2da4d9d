"""What is expected to happen: runtime predictions and start bands from the jobs that finished
(`runtime_history`), the samples the band's stretch learns from (`band_samples`) and replays of
recorded submissions under other quotas (`whatif`)."""
