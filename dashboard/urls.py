from django.urls import path

from dashboard.views import arrays, capacity, front, jobs, teams, usage
from dashboard.views.job_dependencies import job_dependencies
from dashboard.views.job_progress import job_progress

app_name = "dashboard"
urlpatterns = [
    path("", front.home, name="home"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/new/", jobs.submit, name="submit"),
    path("jobs/new/curl/", jobs.submit_curl, name="submit-curl"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="job"),
    path("jobs/<int:job_id>/cancel/", jobs.job_cancel, name="job-cancel"),
    path("jobs/<int:job_id>/logs/", jobs.job_logs, name="job-logs"),
    path("arrays/<int:array_id>/", arrays.array_detail, name="array"),
    path("arrays/<int:array_id>/cancel/", arrays.array_cancel, name="array-cancel"),
    path("jobs/<int:job_id>/progress/", job_progress, name="job-progress"),
    path("jobs/<int:job_id>/dependencies/", job_dependencies, name="job-dependencies"),
    path("queues/", capacity.queues, name="queues"),
    path("cluster/", capacity.cluster, name="cluster"),
    path("utilization/", capacity.utilization, name="utilization"),
    path("usage/", usage.usage, name="usage"),
    path("teams/", teams.team_list, name="teams"),
    path("teams/<slug:slug>/", teams.team_detail, name="team"),
    path("teams/<slug:slug>/quotas/<slug:flavor>/", teams.quota_edit, name="quota"),
    path("teams/<slug:slug>/members/", teams.member_add, name="member-add"),
    path("teams/<slug:slug>/allowed/", teams.allowed_edit, name="team-allowed"),
    path("teams/<slug:slug>/members/<int:membership_id>/", teams.member_edit, name="member"),
    path("tokens/", teams.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", teams.token_revoke, name="token-revoke"),
]
