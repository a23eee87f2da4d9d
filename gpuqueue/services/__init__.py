"""Domain writes: each function is one transaction and the only place its rows change."""
