from __future__ import annotations

from typing import Any

from rest_framework import serializers

from gpuqueue.models import Flavor, Job
from teams.models import Team


class JobSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.all())
    user = serializers.CharField(source="user.username", read_only=True)
    command = serializers.ListField(child=serializers.CharField(), required=False)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    labels = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    annotations = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    workers = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    gpus_per_worker = serializers.IntegerField(min_value=1, max_value=64, default=1)

    class Meta:
        model = Job
        fields = [
            "id", "team", "user", "name", "image", "command", "env", "labels", "annotations",
            "workers", "gpus_per_worker", "flavor", "priority", "preemptible",
            "checkpoint_grace_seconds", "max_runtime_seconds", "expected_runtime_seconds",
            "state", "submitted_at", "admitted_at", "started_at", "finished_at", "placement",
            "pending_reason", "queue_position", "cluster_position", "estimated_start",
            "attempts", "exit_code", "message", "checkpoint_location",
        ]
        read_only_fields = [
            "id", "user", "state", "submitted_at", "admitted_at", "started_at", "finished_at",
            "placement", "pending_reason", "queue_position", "cluster_position",
            "estimated_start", "attempts", "exit_code", "message", "checkpoint_location",
        ]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if not attrs.get("image", "").strip():
            raise serializers.ValidationError({"image": ["An image is required."]})
        return attrs
