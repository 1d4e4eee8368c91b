"""Summaries, paper-layout tables and plots of every stage, for the CSVs and `snakemake --report`.

Modules by stage: `zero_shot`, `debate`, `uncertainty`, `confidence`, `training`; `figures` holds the
figure convention (a plot function returns the figure, `debatelab.io.save_figure_atomic` writes it).

The stages and the evaluation reach plotting through this package only, and it imports none of them:
it reads their output files and is handed what it needs to know of a stage (the confidence
baselines, say) as an argument, so the package import graph stays acyclic
(tests/test_import_graph.py).
"""
