"""The read-only dashboard (`/ui`): pure rendering of domain results into HTML with inline SVG.

Nothing here reads Redis or the clock: `service.dashboard.routes` gathers the same domain results
the JSON routes answer with and hands them to `page.render_dashboard`. Every string that came
from a user (project, budget and plan names, experiment ids, tag values in waste evidence) is
escaped with `html.escape` where it is written out. Charts are server-side SVG: the page needs
no JavaScript, no font and no URL outside itself, so it works offline.
"""
