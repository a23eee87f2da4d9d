"""`GET /api/v1/usage/`: the GPU-hours ledger's report, as JSON or CSV (`?format=csv` or
`Accept: text/csv`), with the dashboard's filters (services/accounting/usage_report.py)."""

from __future__ import annotations

import csv
import io
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import renderers, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuqueue.services.accounting.usage_report import (
    UsageFilterForm,
    UsageReport,
    csv_lines,
    usage_report,
)


class CsvRenderer(renderers.BaseRenderer):
    """Writes the report's rows as CSV; an error body stays JSON-shaped text."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, context: Any = None) -> bytes:
        if isinstance(data, UsageReport):
            out = io.StringIO()
            csv.writer(out).writerows(csv_lines(data))
            return out.getvalue().encode()
        return renderers.JSONRenderer().render(data)


class JsonReportRenderer(renderers.JSONRenderer):
    def render(self, data: Any, accepted_media_type: Any = None, context: Any = None) -> bytes:
        if isinstance(data, UsageReport):
            data = report_json(data)
        return super().render(data, accepted_media_type, context)


def report_json(report: UsageReport) -> dict[str, Any]:
    return {
        "since": report.since.isoformat(),
        "until": report.until.isoformat(),
        "by": report.by,
        "gpu_hours": report.gpu_hours,
        "preempted_gpu_hours": report.preempted_gpu_hours,
        "rows": [row.as_dict() for row in report.rows],
        "teams": [team.as_dict() for team in report.teams],
        "top_users": report.top_users,
    }


FILTERS = [
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="start (default: 30 days ago)"),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="end, excluded (default: now)"),
    OpenApiParameter("team", OpenApiTypes.STR),
    OpenApiParameter("user", OpenApiTypes.STR, description="username"),
    OpenApiParameter("flavor", OpenApiTypes.STR),
    OpenApiParameter("by", OpenApiTypes.STR, enum=["day", "week", "month"]),
]


class UsageView(APIView):
    """GPU-hours held per period, team, user and flavor (site admins: every team; team
    admins: their teams; others: their own), with GPU-hours lost to preemption, used and idle
    where utilization is known, each team's totals against guarantee and fair share, and the
    top users."""

    renderer_classes = [JsonReportRenderer, CsvRenderer]

    @extend_schema(parameters=FILTERS, responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        form = UsageFilterForm(request.query_params)
        if not form.is_valid():
            raise serializers.ValidationError(
                {field: [str(e) for e in errors] for field, errors in form.errors.items()}
            )
        report = usage_report(request.user, form.cleaned_data)
        response = Response(report)
        if request.accepted_renderer.format == "csv":
            response["Content-Disposition"] = 'attachment; filename="gpu-usage.csv"'
        return response
