from csp.decorators import csp_exempt
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from gpuqueue.ops.health import healthz
from gpuqueue.ops.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("gpuqueue.api.urls")),
    # The schema and its docs page work offline: the sidecar serves Swagger UI. (ReDoc is not
    # offered: its page loads web fonts and its bundle a logo from other hosts.)
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Its generated page has an inline script: no Content-Security-Policy there.
    path(
        "api/docs/",
        csp_exempt()(SpectacularSwaggerView.as_view(url_name="schema")),
        name="api-docs",
    ),
    path("metrics", metrics_view, name="metrics"),
    path("", include("dashboard.urls")),
]
