"""Reporting: the Allure output (``allure_out``: per-test tables and SVG
charts, the seed-000 summary matrix, run context, Allure 3 metrics), the
charts, the evidence pages, and the tables (``tables``: HTML, CSV and the one
text-table renderer of every terminal summary).

Nothing is imported here, so that ``wanbench.report.tables`` can be used
(by the engines' own seed tables) without loading Allure."""
