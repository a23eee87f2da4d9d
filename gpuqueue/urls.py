from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from gpuqueue.health import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("gpuqueue.api.urls")),
    path("", include("dashboard.urls")),
]
