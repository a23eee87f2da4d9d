"""The embedded mode's demo world: its accounts (`accounts`, importable without Django), and its
teams, quotas and trickle of jobs (`data`)."""
