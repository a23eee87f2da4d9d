#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuqueue.settings")
    from gpuqueue.ops.data_folder import embedded_database_missing

    if problem := embedded_database_missing(sys.argv[1:], os.environ):
        sys.exit(problem)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
