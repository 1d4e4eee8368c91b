"""Summaries, paper-layout tables and plots of every stage, for the CSVs and `snakemake --report`.

Modules by stage: `zero_shot`, `debate`, `uncertainty`, `confidence`; `figures` holds the figure
convention (a plot function returns the figure, `debatelab.io.save_figure_atomic` writes it).
"""
