"""The domain's shared vocabulary: job states, pending-reason text, taint matching, the
database's singleton locks and model rows to and from SQL. No module here calls a service."""
