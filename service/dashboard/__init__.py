"""The read-only dashboard (`/ui`): pure rendering of domain results into HTML with inline SVG.

Only `service.py` here reads Redis: it gathers the same domain results the JSON routes answer
with, and `routes.py` hands them to `page.render_dashboard`. Every string that came
from a user (project, budget and plan names, experiment ids, tag values in waste evidence) is
escaped with `html.escape` where it is written out. Charts are server-side SVG: the page needs
no JavaScript, no font and no URL outside itself, so it works offline.
"""
