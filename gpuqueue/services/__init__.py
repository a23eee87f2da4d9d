"""Domain writes and the reads they share, in one room per domain: `jobs`, `quotas`,
`accounting`, `forecasts` and `cluster`. Each write is one transaction and the only place its
rows change. Services sit below the cycle: the cycle calls them, they never call the cycle."""
