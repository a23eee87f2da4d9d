"""Dashboard entry points: parse, check the role, call one service or read helper, render.

One view serves the page and, for htmx requests, its partial (templates/dashboard/partials/).
"""
