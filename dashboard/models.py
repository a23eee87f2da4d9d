"""The dashboard's own rows: what the utilization history needs beyond UtilizationSample."""

from __future__ import annotations

from django.db import models


class IdleIronSample(models.Model):
    """Per flavor and minute: GPUs free for new work, and GPUs asked for by pending jobs that
    would have fitted on them (gpuqueue/utilization.py says exactly which). The idle iron of
    that minute is min(free, waiting_fit) GPU-minutes.

    UtilizationSample (gpuqueue) keeps capacity, allocated and pending; "would have fitted"
    needs a node-by-node fit at the moment of sampling, which cannot be rebuilt later from
    totals, so it is stored here beside it.
    """

    at = models.DateTimeField()
    flavor = models.ForeignKey("gpuqueue.Flavor", on_delete=models.CASCADE, related_name="+")
    # GPUs on schedulable nodes that neither gpuqueue jobs nor outside pods hold.
    free = models.PositiveIntegerField()
    # GPUs of pending jobs that the engine held back for a policy reason although their whole
    # gang fitted on the free GPUs.
    waiting_fit = models.PositiveIntegerField()

    class Meta:
        ordering = ["at"]
        indexes = [
            # The idle-iron figure: WHERE at >= ? (AND flavor_id = ?) ORDER BY at.
            models.Index(fields=["flavor", "at"], name="idleiron_flavor_time"),
        ]
