"""The gap-analysis report: collect (named queries) and render (HTML and SVG charts)."""
