"""What Granian serves: gpuqueue's WSGI application behind its front, which hands a request to
the application's threads only once its whole body has arrived (gpuqueue/ops/web_front.py)."""

from gpuqueue.ops.web_front import from_environment
from gpuqueue.wsgi import application as wsgi_application

application = from_environment(wsgi_application)
