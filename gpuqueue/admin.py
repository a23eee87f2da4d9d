from django.contrib import admin

from gpuqueue.models import Flavor, Job, JobEvent, Node, Quota, SimulatedWorkload, UtilizationSample


@admin.register(Flavor)
class FlavorAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "resource_name",
        "device_class",
        "node_selector",
        "tolerations",
        "topology_levels",
        "cpu_millicores_per_gpu",
        "memory_mib_per_gpu",
        "allow_root",
        "shareable",
        "slices_per_gpu",
        "description",
    ]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["team", "flavor", "guarantee", "limit", "weight"]
    list_filter = ["flavor", "team"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "capacity", "gpu_model", "ready", "cordoned", "drained", "updated_at"]
    list_filter = ["ready", "cordoned", "drained"]
    search_fields = ["name"]


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["at", "from_state", "to_state", "reason", "actor", "details"]
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "team",
        "user",
        "flavor",
        "workers",
        "gpus_per_worker",
        "priority",
        "state",
        "submitted_at",
    ]
    list_filter = ["state", "team", "flavor"]
    search_fields = ["name", "user__username"]
    raw_id_fields = ["user"]
    inlines = [JobEventInline]
    # State changes go through the services (and so through the state machine), not this form.
    readonly_fields = [
        "state",
        "submitted_at",
        "admitted_at",
        "started_at",
        "finished_at",
        "placement",
        "gpu_devices",
        "pending_reason",
        "attempts",
        "start_failures",
        "not_before",
        "preempted_for",
    ]


@admin.register(JobEvent)
class JobEventAdmin(admin.ModelAdmin):
    list_display = ["job", "at", "from_state", "to_state", "actor", "reason"]
    list_filter = ["to_state", "actor"]


@admin.register(UtilizationSample)
class UtilizationSampleAdmin(admin.ModelAdmin):
    list_display = ["at", "flavor", "team", "capacity", "allocated", "pending"]
    list_filter = ["flavor", "team"]


@admin.register(SimulatedWorkload)
class SimulatedWorkloadAdmin(admin.ModelAdmin):
    list_display = [
        "job_id",
        "attempt",
        "ready_at",
        "ends_at",
        "exit_code",
        "checkpoint_requested_at",
    ]
